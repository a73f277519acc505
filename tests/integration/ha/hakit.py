"""A real ``orbitmq local up --slaves 1`` group for failover tests, and probes of its brokers."""

from __future__ import annotations

import asyncio
import json
import random
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import eventually

from orbitmq.v1 import broker_pb2, broker_pb2_grpc


@dataclass
class LocalGroup:
    namesrv: str
    addresses: list[str]
    """The master's and the slave's gRPC addresses as started (roles move with failovers)."""


def free_base_port() -> int:
    """A port P with P, P+1, P+10 and P+11 free (master and slave, gRPC and metrics)."""
    for _ in range(100):
        base = random.randrange(20_000, 40_000)
        try:
            for port in (base, base + 1, base + 10, base + 11):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise RuntimeError("no free ports")


@asynccontextmanager
async def local_group(data_dir: Path) -> AsyncIterator[LocalGroup]:
    """``orbitmq local up --slaves 1`` on free ports (its stderr discarded: nothing reads it, and
    a full pipe would block the supervisor); stopped with SIGTERM, killed if it lingers."""
    base = free_base_port()
    args = ["local", "up", "--slaves", "1", "--json", "--data-dir", str(data_dir), "--segment-mib", "8"]
    ports = ["--namesrv-port", "0", "--namesrv-metrics-port", "0"]
    ports += ["--broker-port", str(base), "--broker-metrics-port", str(base + 1)]
    supervisor = subprocess.Popen(  # noqa: ASYNC220 - started once; its first line read in a thread
        [sys.executable, "-m", "orbitmq.cli.main", *args, *ports],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert supervisor.stdout is not None
        report = json.loads(await asyncio.to_thread(supervisor.stdout.readline))
        yield LocalGroup(report["namesrv"], [f"127.0.0.1:{base}", f"127.0.0.1:{base + 10}"])
    finally:
        supervisor.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(supervisor.wait, 30)
        except subprocess.TimeoutExpired:
            supervisor.kill()


async def ha_state(address: str) -> broker_pb2.HaState | None:
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            return await broker_pb2_grpc.BrokerStub(channel).GetHaState(
                broker_pb2.GetHaStateRequest(), timeout=1
            )
    except grpc.aio.AioRpcError:
        return None


async def pid_of(address: str) -> int:
    async with grpc.aio.insecure_channel(address) as channel:
        info = await broker_pb2_grpc.BrokerStub(channel).GetRuntimeInfo(
            broker_pb2.GetRuntimeInfoRequest(), timeout=2
        )
    return int(info.pid)


async def healthy_pair(addresses: list[str]) -> tuple[str, str]:
    """Wait until one broker is master with the other replicating, caught up; (master, slave)."""

    async def check() -> tuple[str, str] | None:
        states = {a: await ha_state(a) for a in addresses}
        masters = [a for a, s in states.items() if s is not None and s.role != "SLAVE"]
        slaves = [a for a, s in states.items() if s is not None and s.role == "SLAVE"]
        if len(masters) == 1 and len(slaves) == 1:
            master = states[masters[0]]
            assert master is not None
            if master.slaves and master.slaves[0].lag_bytes == 0:
                return masters[0], slaves[0]
        return None

    return await eventually(check, 60, lambda: "a caught-up master/slave pair")
