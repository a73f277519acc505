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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from orbitmq.chaos.network import CLUSTER_GROUP, Network, free_port
from orbitmq.local.datadir import RUN_FILE
from orbitmq.local.ports import SLAVE_PORT_STEP
from orbitmq.store.disk import used_ratio
from orbitmq.v1 import broker_pb2, broker_pb2_grpc

NAMESRV = "namesrv"
BROKER_ENV = {
    "ORBITMQ_BROKER_FLUSH_MODE": "SYNC_FLUSH",
    "ORBITMQ_BROKER_TRANSACTION_TIMEOUT_MS": "1000",
    "ORBITMQ_BROKER_TRANSACTION_CHECK_INTERVAL_MS": "1000",
}
"""Local up's brokers inherit its environment: SYNC_FLUSH (an acknowledgement waits for the
fsync) with the SYNC_MASTER local up gives a group with slaves; half messages checked back after
a second unresolved, every second (RocketMQ's 6 s and 60 s would leave a round's lost
EndTransaction unresolved until long after the round)."""
STOP_TIMEOUT_S = 30.0
STORE_DIRS = ("broker-a", "broker-a-s1")
"""The brokers' store directories under the data directory (local up's layout, ``datadir``)."""
STORE_DISK_RATIOS = {
    "disk_max_used_space_ratio": 0.80,
    "disk_space_warning_level_ratio": 0.85,
    "disk_space_clean_forcibly_ratio": 0.97,
}
"""The brokers' disk ratios when their stores are mounts of their own (``store_mib``): sends
refused past 85 %, and forced deletion of unconsumed segments only past 97 %, a level the
disk-full fault does not reach (that deletion loses acknowledged messages by design, as in
RocketMQ; the fault tests the refusal, not it)."""


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
    gateway_pids: Callable[[], dict[str, int]] = field(default=dict, repr=False)
    """The live proxy's and sidecar's PIDs (the harness runs them: :mod:`.gateways`)."""
    metrics: dict[str, str] = field(default_factory=dict)
    """Component name -> its metrics URL (``http://host:port/metrics``)."""
    store_mib: int | None = None
    """When set, each broker's store directory is a tmpfs of this many MiB, mounted before local
    up starts and unmounted after it stops (root only: else the stores stay on the data
    directory's disk and :attr:`mount_error` says why): a disk the disk-full fault can fill
    without touching the machine's, whose ratios the brokers act on (:data:`STORE_DISK_RATIOS`)."""
    mounted: list[Path] = field(default_factory=list)
    mount_error: str = ""
    store_problems: list[str] = field(default_factory=list)
    """What the stores' consistency check (after the cluster stopped) found: empty when every
    record and queue unit checked out (see :func:`orbitmq.chaos.diskfault.check_stores`)."""
    network: Network | None = None
    """Routing through toxiproxy and iptables (network faults): set up on the brokers' ports,
    chosen here, before local up starts, which then runs under :data:`.CLUSTER_GROUP`."""
    launcher: Path | None = None
    """When set, local up runs every child with this instead of its own Python (the clock step's
    libfaketime launcher: :func:`orbitmq.chaos.clockfault.write_launcher`)."""
    _process: subprocess.Popen[str] | None = field(default=None, repr=False)
    _stores_checked: bool = field(default=False, repr=False)

    async def start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **BROKER_ENV}
        if self.store_mib is not None:
            self._mount_stores(self.store_mib)
        if self.mounted:
            env.update({f"ORBITMQ_BROKER_{name.upper()}": str(v) for name, v in STORE_DISK_RATIOS.items()})
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
        as_group: dict[str, object] = {}
        if self.network is not None:
            broker_port = free_port(SLAVE_PORT_STEP)  # the master's; its slave's is 10 above
            self.network.start([broker_port, broker_port + SLAVE_PORT_STEP])
            args[args.index("--broker-port") + 1] = str(broker_port)
            as_group = {"group": CLUSTER_GROUP, "extra_groups": []}
        log = (self.data_dir / "local-up.log").open("a")
        self._process = subprocess.Popen(  # noqa: ASYNC220 - its one report line is read in a thread
            [sys.executable, *_entry(self.launcher), *args],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env=env,
            **as_group,  # type: ignore[arg-type]
        )
        assert self._process.stdout is not None
        line = await asyncio.to_thread(self._process.stdout.readline)
        if not line:
            await self.stop()
            raise RuntimeError(f"local up did not start; see {self.data_dir / 'local-up.log'}")
        report = json.loads(line)
        self.namesrv = report["namesrv"]
        self.brokers = {
            name: str(info["address"])
            for name, info in report["components"].items()
            if name.startswith("broker ")
        }
        self.metrics = {name: str(info["metrics"]) for name, info in report["components"].items()}

    async def stop(self) -> None:
        """Stop local up, check the stores, unmount them (each once, however often called)."""
        await self._stop_local_up()
        if self.network is not None:
            self.network.close()
        if self._process is not None and not self._stores_checked:
            from orbitmq.chaos.diskfault import check_stores

            self._stores_checked = True
            self.store_problems = await asyncio.to_thread(check_stores, self)
        self._unmount_stores()

    def disk_used_ratio(self) -> float:
        """The fullest of the data directory's disk and the stores' own mounts, now."""
        return max(used_ratio(path) for path in [self.data_dir, *self.mounted])

    def store_dir(self, component: str) -> Path:
        """The store directory of local up's ``broker <dir>`` component."""
        return self.data_dir / component.removeprefix("broker ")

    def _mount_stores(self, mib: int) -> None:
        if os.geteuid() != 0:
            self.mount_error = "mounting a tmpfs store needs root"
            return
        for name in STORE_DIRS:
            directory = self.data_dir / name
            directory.mkdir(exist_ok=True)
            mount = ["mount", "-t", "tmpfs", "-o", f"size={mib}m,mode=0755", "orbitmq-chaos", str(directory)]
            done = subprocess.run(mount, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                self.mount_error = f"mount of {directory} failed: {done.stderr.strip()}"
                self._unmount_stores()
                return
            self.mounted.append(directory)

    def _unmount_stores(self) -> None:
        while self.mounted:
            directory = self.mounted.pop()
            subprocess.run(["umount", "--lazy", str(directory)], capture_output=True, check=False)

    async def _stop_local_up(self) -> None:
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
        """Component name -> PID of its current process (local up's run file, and the gateways)."""
        try:
            run = json.loads((self.data_dir / RUN_FILE).read_text())
        except (OSError, ValueError):
            run = {}
        return {name: int(pid) for name, pid in run.get("components", {}).items()} | self.gateway_pids()

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


def _entry(launcher: Path | None) -> list[str]:
    """How Python starts local up: as a module, or with ``sys.executable`` set to ``launcher``
    first (local up starts each child as ``sys.executable -m orbitmq.cli.main …``)."""
    if launcher is None:
        return ["-m", "orbitmq.cli.main"]
    boot = (
        "import runpy, sys; sys.executable = sys.argv.pop(1); "
        "runpy.run_module('orbitmq.cli.main', run_name='__main__', alter_sys=True)"
    )
    return ["-c", boot, str(launcher)]


def signal_quietly(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it died on its own meanwhile
        os.kill(pid, signum)
