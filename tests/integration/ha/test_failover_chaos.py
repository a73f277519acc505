"""Chaos: SIGKILL the master of a `orbitmq local up --slaves 1` group while producers send with
SYNC_MASTER and a clustering consumer consumes. Every acknowledged message must be consumed."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
sys.path.insert(0, str(Path(__file__).parent))
from clusterkit import FAST, Collector, eventually
from hakit import healthy_pair, local_group, pid_of

from orbitmq.client import Admin, ConsumeFromWhere, Message, Producer, PushConsumer, SendStatus
from orbitmq.common.errors import OrbitError

pytestmark = pytest.mark.timeout(300)
ROUNDS = 5


async def test_master_sigkill_rounds_lose_no_acknowledged_message(tmp_path: Path) -> None:
    async with local_group(tmp_path / "data") as group:
        namesrv, addresses = group.namesrv, group.addresses
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
