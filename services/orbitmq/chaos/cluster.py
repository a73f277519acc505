"""The cluster a chaos run breaks: ``orbitmq local up --slaves 1`` started as a child.

Local up already supervises its processes (a killed name server is restarted on its address, a
killed broker comes back as a slave of the live master, a master unseen for
``--failover-after-ms`` is replaced), so faults only signal processes and the harness watches
the cluster heal the way a user's would. PIDs come from local up's run file (rewritten at every
restart), roles from each broker's ``GetHaState``. Its stderr goes to ``local-up.log`` in the data
directory: the record to read when a round goes wrong.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from orbitmq.local.datadir import RUN_FILE
from orbitmq.v1 import broker_pb2, broker_pb2_grpc

NAMESRV = "namesrv"
BROKER_ENV = {"ORBITMQ_BROKER_FLUSH_MODE": "SYNC_FLUSH"}
"""Local up's brokers inherit its environment: SYNC_FLUSH (an acknowledgement waits for the
fsync) with the SYNC_MASTER local up gives a group with slaves."""
STOP_TIMEOUT_S = 30.0


@dataclass
class BrokerView:
    name: str
    """Local up's component name (``broker broker-a``, ``broker broker-a-s1``)."""
    address: str
    role: str | None
    """``SYNC_MASTER``, ``SLAVE``, ... or None when it does not answer."""
    lag_bytes: int | None = None


@dataclass
class LocalUpCluster:
    data_dir: Path
    failover_after_ms: int = 3_000
    namesrv: str = ""
    brokers: dict[str, str] = field(default_factory=dict)
    """Component name -> gRPC address (addresses stay across restarts and failovers)."""
    _process: subprocess.Popen[str] | None = field(default=None, repr=False)

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        ports = [
            a
            for flag in ("--namesrv-port", "--broker-port", "--namesrv-metrics-port", "--broker-metrics-port")
            for a in (flag, "0")
        ]
        args = [
            "--log-level",
            "debug",  # local up passes its children's own log lines on at debug: the brokers' record
            "local",
            "up",
            "--slaves",
            "1",
            "--json",
            "--data-dir",
            str(self.data_dir),
            "--segment-mib",
            "8",
            "--failover-after-ms",
            str(self.failover_after_ms),
            *ports,
        ]
        log = (self.data_dir / "local-up.log").open("a")
        self._process = subprocess.Popen(  # noqa: ASYNC220 - its one report line is read in a thread
            [sys.executable, "-m", "orbitmq.cli.main", *args],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, **BROKER_ENV},
        )
        assert self._process.stdout is not None
        line = await asyncio.to_thread(self._process.stdout.readline)
        if not line:
            raise RuntimeError(f"local up did not start; see {self.data_dir / 'local-up.log'}")
        report = json.loads(line)
        self.namesrv = report["namesrv"]
        self.brokers = {
            name: str(info["address"])
            for name, info in report["components"].items()
            if name.startswith("broker ")
        }

    async def stop(self) -> None:
        process = self._process
        if process is None or process.poll() is not None:
            return
        for pid in self.pids().values():  # a process left paused would hold up the shutdown
            signal_quietly(pid, signal.SIGCONT)
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(process.wait, STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            await asyncio.to_thread(process.wait)

    def exit_reason(self) -> str | None:
        """None while local up runs; else its exit code and last line (why it stopped the cluster)."""
        if self._process is None or self._process.poll() is None:
            return None
        lines = [line for line in (self.data_dir / "local-up.log").read_text().splitlines() if line.strip()]
        return (
            f"local up exited with code {self._process.returncode}: {lines[-1] if lines else '(no output)'}"
        )

    def retention_deletions(self) -> list[str]:
        """The brokers' lines saying retention deleted commit-log segments during the run: a
        message acknowledged and then deleted (a disk past ``disk_space_clean_forcibly_ratio``
        deletes unconsumed segments, as RocketMQ does) reads as lost, and this says why."""
        log = self.data_dir / "local-up.log"
        if not log.exists():
            return []
        return [
            line.strip()
            for line in log.read_text(errors="replace").splitlines()
            if "retention deleted" in line
        ]

    def pids(self) -> dict[str, int]:
        """Component name -> PID of its current process (local up's run file)."""
        try:
            run = json.loads((self.data_dir / RUN_FILE).read_text())
        except (OSError, ValueError):
            return {}
        return {name: int(pid) for name, pid in run.get("components", {}).items()}

    async def views(self) -> list[BrokerView]:
        async def one(name: str, address: str) -> BrokerView:
            try:
                async with grpc.aio.insecure_channel(address) as channel:
                    state = await broker_pb2_grpc.BrokerStub(channel).GetHaState(
                        broker_pb2.GetHaStateRequest(), timeout=1
                    )
            except grpc.aio.AioRpcError:
                return BrokerView(name, address, None)
            lag = state.slaves[0].lag_bytes if state.slaves else None
            return BrokerView(name, address, state.role, lag)

        return list(await asyncio.gather(*(one(n, a) for n, a in self.brokers.items())))

    async def wait_healthy(self, timeout_s: float) -> tuple[str, str] | None:
        """Wait for one master with its slave caught up; (master, slave) component names, or
        None when the group did not settle within ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.exit_reason() is None:
            views = await self.views()
            masters = [v for v in views if v.role is not None and v.role != "SLAVE"]
            slaves = [v for v in views if v.role == "SLAVE"]
            if len(masters) == 1 and len(slaves) == 1 and masters[0].lag_bytes == 0:
                return masters[0].name, slaves[0].name
            await asyncio.sleep(0.2)
        return None


def signal_quietly(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it died on its own meanwhile
        os.kill(pid, signum)
