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
SENDERS = 4
"""Concurrent senders sharing one producer, so sends also travel coalesced (several callers'
messages in one broker call, each acknowledged on its own): a coalesced SEND_OK must be as
durable as a lone one."""
REPLICA_CONFIG_INTERVAL_S = 3.0
"""The brokers' default ``replica_config_interval_ms``: how stale a promoted slave's copy of the
group's offsets may be. A consumer that kept its queues re-delivers at most what was in flight;
one that restarted a queue from the new master's copy re-delivers up to this much."""


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
            async with Producer("ChaosProducer", namesrv) as producer:
                await asyncio.gather(*(sender(producer, n) for n in range(SENDERS)))

        async def sender(producer: Producer, n: int) -> None:
            nonlocal failures
            i = 0
            while sending:
                body = f"s{n}-m{i}"
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
        producing_since = time.monotonic()
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
        producing_s = time.monotonic() - producing_since
        expected = {body for body, _ in acked}
        await eventually(
            lambda: expected <= set(collector.bodies()),
            90,
            lambda: f"{len(expected - set(collector.bodies()))} acknowledged messages not consumed",
        )
        await consumer.close()
        consumed = collector.bodies()
        duplicates = len(consumed) - len(set(consumed))
        # At-least-once allows re-delivery of what a promoted slave's offsets had not caught up
        # with: per failover, at most one config-copy interval of the sending rate.
        allowance = int(ROUNDS * len(stored_at) / producing_s * REPLICA_CONFIG_INTERVAL_S)
        print(
            f"chaos: {ROUNDS} SIGKILL rounds, {len(expected)} acknowledged, all consumed, "
            f"{duplicates} duplicates (allowed {allowance}: {REPLICA_CONFIG_INTERVAL_S:.0f} s of "
            f"sends per failover; re-delivered {_redelivered(collector)}), {failures} failed sends; "
            f"kill->writes {', '.join(f'{s:.2f}' for s in failover_s)} s (max {max(failover_s):.2f})"
        )
        assert len(failover_s) == ROUNDS
        assert failures == 0, f"{failures} sends failed: a send rides out a failover"
        assert duplicates <= allowance, (
            f"{duplicates} duplicates, more than {allowance}: queues restarted from stale or "
            f"missing offsets ({_redelivered(collector)})"
        )


def _redelivered(collector: Collector) -> str:
    """Queue offsets delivered more than once, as ``queue:first-last(count)`` spans."""
    seen: set[tuple[int, int]] = set()
    again: dict[int, list[int]] = {}
    for delivery in collector.deliveries:
        key = (delivery.message.queue_id, delivery.message.queue_offset)
        if key in seen:
            again.setdefault(key[0], []).append(key[1])
        seen.add(key)
    spans = [f"{q}:{min(o)}-{max(o)}({len(o)})" for q, o in sorted(again.items())]
    return ", ".join(spans) or "none"
