"""Push-consumer rules on a real cluster: where a new group starts, flow control, orderly
SUSPEND, expiry of hung listeners, and lock hand-over on rebalance."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from clusterkit import FAST, Cluster, Collector, eventually, start_cluster

from orbitmq.client import (
    Admin,
    ConsumeFromWhere,
    ConsumeStatus,
    Message,
    MessageQueue,
    MessageVerdicts,
    OrderlyStatus,
    Producer,
    PushConsumer,
)
from orbitmq.store.record import StoredMessage

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, delay_levels="200ms 200ms 200ms 200ms")
    yield running
    await running.close()


async def topic(cluster: Cluster, name: str, queues: int = 2) -> None:
    async with Admin(cluster.address) as admin:
        await admin.create_topic(name, read_queue_nums=queues, write_queue_nums=queues)


async def send(cluster: Cluster, name: str, bodies: list[str], key: str | None = None) -> None:
    async with Producer("PG", cluster.address) as producer:
        for body in bodies:
            await producer.send(Message(name, body.encode()), sharding_key=key)


async def test_where_a_new_group_starts(cluster: Cluster) -> None:
    await topic(cluster, "Start")
    await send(cluster, "Start", [f"old {i}" for i in range(6)])
    await asyncio.sleep(0.05)
    cut = int(time.time() * 1000)
    await asyncio.sleep(0.05)
    await send(cluster, "Start", [f"mid {i}" for i in range(4)])
    collector = Collector()
    consumers = [
        PushConsumer(
            f"From{how.name.title().replace('_', '')}",
            cluster.address,
            listener=collector.listener(how.name),
            settings=FAST,
            consume_from=how,
            consume_timestamp_ms=cut if how is ConsumeFromWhere.TIMESTAMP else None,
        )
        for how in ConsumeFromWhere
    ]
    for consumer in consumers:
        consumer.subscribe("Start")
        await consumer.start()
    await send(cluster, "Start", ["new 0", "new 1"])
    await collector.wait_for(2, consumer="LAST_OFFSET")
    await collector.wait_for(12, consumer="FIRST_OFFSET")
    await collector.wait_for(6, consumer="TIMESTAMP")
    await collector.settle(0.5)
    assert sorted(collector.bodies("LAST_OFFSET")) == ["new 0", "new 1"]
    assert len(collector.bodies("FIRST_OFFSET")) == 12
    assert sorted(collector.bodies("TIMESTAMP")) == sorted(
        [f"mid {i}" for i in range(4)] + ["new 0", "new 1"]
    )
    for consumer in consumers:
        await consumer.close()


async def test_flow_control_bounds_a_slow_listeners_backlog(cluster: Cluster) -> None:
    await topic(cluster, "Flow", queues=1)
    await send(cluster, "Flow", [f"{i}" for i in range(300)])
    gate = threading.Event()
    collector = Collector()
    settings = dataclasses.replace(FAST, cached_messages_per_queue=40, pull_batch=16, consume_threads=2)
    consumer = PushConsumer(
        "Slow",
        cluster.address,
        listener=collector.listener("slow", before=lambda m: gate.wait(10) and None),
        settings=settings,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe("Flow")
    await consumer.start()
    mq = MessageQueue("Flow", "broker-a", 0)
    await eventually(lambda: mq in consumer._process_queues and consumer._process_queues[mq].count >= 40, 10)
    await asyncio.sleep(1.0)  # pulls keep trying while the listener is stuck
    held = consumer._process_queues[mq].count
    assert 40 <= held <= 40 + 16, f"{held} messages cached; flow control allows one pull past 40"
    paused = consumer.metrics.flow_pauses.labels("Slow", "count")._value.get()
    assert paused > 0
    gate.set()
    await collector.wait_for(300)
    await consumer.close()


async def test_a_backlog_is_pulled_in_bulk(cluster: Cluster) -> None:
    """Past the first pull, a queue with a backlog is pulled ``pull_batch_backlog`` at a time
    (within flow control's room), not ``pull_batch``: 1 000 messages in about 6 pulls, not 63."""
    await topic(cluster, "Bulk", queues=1)
    async with Producer("PG", cluster.address) as producer:
        for start in range(0, 1_000, 100):
            await producer.send_batch([Message("Bulk", f"{i}".encode()) for i in range(start, start + 100)])
    pulls = cluster.brokers["broker-a"].broker.metrics.pull_latency
    before = pulls.count
    collector = Collector()
    settings = dataclasses.replace(FAST, pull_batch=16, pull_batch_backlog=200)
    consumer = PushConsumer(
        "Bulk", cluster.address, listener=collector.listener("bulk"), settings=settings,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
    )  # fmt: skip
    consumer.subscribe("Bulk")
    await consumer.start()
    await collector.wait_for(1_000)
    answered = pulls.count - before
    assert answered <= 12, f"{answered} pulls answered for a backlog of 1 000 (16 a pull would take 63)"
    assert sorted(int(body) for body in collector.bodies("bulk")) == list(range(1_000))
    await consumer.close()


async def test_orderly_suspend_retries_the_same_message_after_a_pause(cluster: Cluster) -> None:
    await topic(cluster, "Steps", queues=1)
    await send(cluster, "Steps", [f"{i}" for i in range(5)], key="k")
    attempts: list[tuple[str, float]] = []

    def listener(messages: list[StoredMessage]) -> OrderlyStatus:
        body = messages[0].body.decode()
        attempts.append((body, time.monotonic()))
        if body == "2" and sum(1 for b, _ in attempts if b == "2") < 3:
            return OrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT
        return OrderlyStatus.SUCCESS

    settings = dataclasses.replace(FAST, suspend_orderly_ms=300)
    consumer = PushConsumer(
        "Orderly",
        cluster.address,
        listener=listener,
        orderly=True,
        settings=settings,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe("Steps")
    await consumer.start()
    await eventually(lambda: [b for b, _ in attempts][-1:] == ["4"], 20, lambda: str(attempts))
    assert [b for b, _ in attempts] == ["0", "1", "2", "2", "2", "3", "4"]
    tries = [t for b, t in attempts if b == "2"]
    assert all(later - earlier >= 0.29 for earlier, later in itertools.pairwise(tries))
    await consumer.close()


async def test_a_hung_listener_message_is_sent_back_after_the_consume_timeout(cluster: Cluster) -> None:
    await topic(cluster, "Hang", queues=1)
    await send(cluster, "Hang", ["stuck", "a", "b"])
    release = threading.Event()
    collector = Collector()

    def hang_first(message: StoredMessage) -> None:
        if message.body == b"stuck" and message.reconsume_times == 0:
            release.wait(20)

    settings = dataclasses.replace(FAST, consume_timeout_ms=500, expiry_scan_ms=200)
    consumer = PushConsumer(
        "Hung",
        cluster.address,
        listener=collector.listener("c", before=hang_first),
        settings=settings,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe("Hang")
    await consumer.start()
    mq = MessageQueue("Hang", "broker-a", 0)
    # The retry copy of "stuck" arrives while the first call still hangs, and the committed
    # offset moves past it: one hung call no longer holds the queue back.
    await eventually(
        lambda: any(
            d.message.body == b"stuck" and d.message.reconsume_times == 1 for d in collector.deliveries
        ),
        10,
        lambda: str(collector.bodies()),
    )
    await eventually(
        lambda: consumer.committed_offsets().get(mq) == 3, 5, lambda: str(consumer.committed_offsets())
    )
    release.set()
    await consumer.close()


async def test_rebalance_hands_over_orderly_locks(cluster: Cluster) -> None:
    await topic(cluster, "Locked", queues=4)
    collector = Collector()

    def orderly(name: str) -> PushConsumer:
        consumer = PushConsumer(
            "LockGroup",
            cluster.address,
            listener=collector.listener(name, OrderlyStatus.SUCCESS),
            orderly=True,
            settings=FAST,
            instance_name=name,
        )
        consumer.subscribe("Locked")
        return consumer

    first = orderly("first")
    await first.start()
    locks = cluster.brokers["broker-a"].broker.locks

    def owners() -> dict[int, str | None]:
        return {q: locks.owner("LockGroup", ("Locked", "broker-a", q)) for q in range(4)}

    await eventually(lambda: set(owners().values()) == {first.client_id}, 10, lambda: str(owners()))
    second = orderly("second")
    await second.start()
    await eventually(
        # a queue is unowned (None) between the first's unlock and the second's lock
        lambda: Counter(owners().values()) == Counter({first.client_id: 2, second.client_id: 2}),
        10,
        lambda: str(owners()),
    )
    mine = {mq.queue_id for mq, pq in second._process_queues.items() if mq.topic == "Locked" and pq.locked}
    assert {q for q, owner in owners().items() if owner == second.client_id} == mine
    await first.close()
    await eventually(lambda: set(owners().values()) == {second.client_id}, 10, lambda: str(owners()))
    await second.close()
    assert set(owners().values()) == {None}, "close unlocks"


async def test_per_message_verdicts_commit_retry_or_keep_each_message(cluster: Cluster) -> None:
    """A listener answering per message (as the sidecar does for a batch): successes are
    committed, a failure alone goes to the retry topic, an unconsumed message holds the
    committed offset and is consumed again by the next owner of the queue."""
    await topic(cluster, "Verdicts", queues=1)
    await send(cluster, "Verdicts", [f"{i}" for i in range(8)])
    calls: list[list[tuple[str, int]]] = []
    verdict = {"3": ConsumeStatus.RECONSUME_LATER, "5": None}

    def listener(messages: list[StoredMessage]) -> MessageVerdicts:
        calls.append([(m.body.decode(), m.reconsume_times) for m in messages])
        return MessageVerdicts(
            [
                verdict.get(m.body.decode(), ConsumeStatus.CONSUME_SUCCESS)
                if m.reconsume_times == 0
                else ConsumeStatus.CONSUME_SUCCESS
                for m in messages
            ]
        )

    settings = dataclasses.replace(FAST, consume_batch=8)
    first = PushConsumer(
        "Verdicts",
        cluster.address,
        listener=listener,
        settings=settings,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
    )
    first.subscribe("Verdicts")
    await first.start()
    seen = lambda: [d for call in calls for d in call]  # noqa: E731
    await eventually(lambda: ("3", 1) in seen(), 10, lambda: str(calls))
    mq = MessageQueue("Verdicts", "broker-a", 0)
    await asyncio.sleep(0.5)
    assert first.committed_offsets().get(mq) == 5, "the unconsumed message 5 holds the offset"
    assert sorted(body for body, times in seen() if times == 0) == [f"{i}" for i in range(8)]
    await first.close()

    calls.clear()
    verdict.clear()
    second = PushConsumer("Verdicts", cluster.address, listener=listener, settings=settings)
    second.subscribe("Verdicts")
    await second.start()
    await eventually(lambda: ("5", 0) in seen(), 10, lambda: str(calls))
    await eventually(
        lambda: second.committed_offsets().get(mq) == 8, 10, lambda: str(second.committed_offsets())
    )
    assert "3" not in [body for body, _ in seen()], "the failed one was retried, not left behind"
    await second.close()
