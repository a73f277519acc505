"""Chaos: SIGKILL the master of a `orbitmq local up --slaves 1` group while producers send with
SYNC_MASTER and a clustering consumer consumes. Every acknowledged message must be consumed."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import FAST, Collector, eventually

from orbitmq.client import Admin, ConsumeFromWhere, Message, Producer, PushConsumer, SendStatus
from orbitmq.common.errors import OrbitError
from orbitmq.v1 import broker_pb2, broker_pb2_grpc

pytestmark = pytest.mark.timeout(300)
ROUNDS = 5


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


async def test_master_sigkill_rounds_lose_no_acknowledged_message(tmp_path: Path) -> None:
    base = free_base_port()
    supervisor = subprocess.Popen(  # noqa: ASYNC220 - started once; its output is read in a thread
        [
            sys.executable,
            "-m",
            "orbitmq.cli.main",
            "local",
            "up",
            "--slaves",
            "1",
            "--json",
            "--data-dir",
            str(tmp_path / "data"),
            "--namesrv-port",
            "0",
            "--namesrv-metrics-port",
            "0",
            "--broker-port",
            str(base),
            "--broker-metrics-port",
            str(base + 1),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert supervisor.stdout is not None
        report = json.loads(await asyncio.to_thread(supervisor.stdout.readline))
        namesrv = report["namesrv"]
        addresses = [f"127.0.0.1:{base}", f"127.0.0.1:{base + 10}"]
        async with Admin(namesrv) as admin:
            await admin.create_topic("Chaos", read_queue_nums=4, write_queue_nums=4)
        await healthy_pair(addresses)

        acked: list[tuple[str, float]] = []
        stored_at: list[tuple[float, float]] = []
        """(started, answered) of every send the broker stored."""
        failures = 0
        sending = True

        async def produce() -> None:
            nonlocal failures
            async with Producer("ChaosProducer", namesrv) as producer:
                i = 0
                while sending:
                    body = f"m{i}"
                    began = time.monotonic()
                    try:
                        result = await producer.send(Message("Chaos", body.encode()))
                    except (OrbitError, grpc.aio.AioRpcError):
                        failures += 1
                        await asyncio.sleep(0.05)
                        continue
                    i += 1
                    now = time.monotonic()
                    stored_at.append((began, now))
                    if result.status is SendStatus.SEND_OK:
                        acked.append((body, now))
                    await asyncio.sleep(0.005)

        collector = Collector()
        consumer = PushConsumer(
            "ChaosGroup",
            namesrv,
            listener=collector.listener("c"),
            settings=FAST,
            consume_from=ConsumeFromWhere.FIRST_OFFSET,
        )
        consumer.subscribe("Chaos")
        await consumer.start()
        producer_task = asyncio.create_task(produce())
        failover_s: list[float] = []
        for round_no in range(ROUNDS):
            master, _ = await healthy_pair(addresses)
            await asyncio.sleep(random.uniform(0.5, 2.0))
            pid = await pid_of(master)
            killed = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            await eventually(
                lambda at=killed: stored_at and stored_at[-1][0] > at, 60, lambda: "writes accepted again"
            )
            first = next(answered for began, answered in stored_at if began > killed)
            failover_s.append(first - killed)
            print(
                f"round {round_no + 1}: master {master} killed; "
                f"writes accepted again after {first - killed:.2f} s"
            )
        await healthy_pair(addresses)
        sending = False
        await producer_task
        expected = {body for body, _ in acked}
        await eventually(
            lambda: expected <= set(collector.bodies()),
            90,
            lambda: f"{len(expected - set(collector.bodies()))} acknowledged messages not consumed",
        )
        await consumer.close()
        consumed = collector.bodies()
        duplicates = len(consumed) - len(set(consumed))
        print(
            f"chaos: {ROUNDS} SIGKILL rounds, {len(expected)} acknowledged, all consumed, "
            f"{duplicates} duplicates, {failures} failed sends; kill->writes "
            f"{', '.join(f'{s:.2f}' for s in failover_s)} s (max {max(failover_s):.2f})"
        )
        assert len(failover_s) == ROUNDS
        assert failures == 0, f"{failures} sends failed: a send rides out a failover"
    finally:
        supervisor.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(supervisor.wait, 30)
        except subprocess.TimeoutExpired:
            supervisor.kill()
