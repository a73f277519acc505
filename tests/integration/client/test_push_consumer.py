"""Push consumers against a real cluster: real name server, real brokers, real gRPC and files."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from clusterkit import FAST, Cluster, Collector, eventually, start_cluster

from orbitmq.client.admin import Admin
from orbitmq.client.consumer import PushConsumer
from orbitmq.client.consumer_types import ConsumeFromWhere, ConsumeStatus, MessageModel, OrderlyStatus
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer, TransactionProducer
from orbitmq.client.queue import MessageQueue
from orbitmq.common.topics import Property
from orbitmq.store.record import StoredMessage
from orbitmq.v1.broker_pb2 import TransactionResolution

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, default_topic_queue_nums=8)
    yield running
    await running.close()


def consumer(cluster: Cluster, collector: Collector, name: str, group: str = "CG", **options) -> PushConsumer:  # type: ignore[no-untyped-def]
    """A consumer whose deliveries the collector records under ``name``."""
    result = options.pop("result", None)
    before = options.pop("before", None)
    options.setdefault("settings", FAST)
    options.setdefault("consume_from", ConsumeFromWhere.FIRST_OFFSET)
    orderly = options.get("orderly", False)
    default = OrderlyStatus.SUCCESS if orderly else ConsumeStatus.CONSUME_SUCCESS
    return PushConsumer(
        group,
        cluster.address,
        listener=collector.listener(name, result or default, before),
        instance_name=name,
        **options,
    )


async def produce(cluster: Cluster, topic: str, count: int, *, batch: int = 100, start: int = 0) -> None:
    async with Producer("PG", cluster.address) as producer:
        for first in range(start, start + count, batch):
            last = min(first + batch, start + count)
            await producer.send_batch([Message(topic, f"{i}".encode(), tags="T") for i in range(first, last)])


async def create_topic(cluster: Cluster, topic: str, queues: int = 8) -> None:
    async with Admin(cluster.address) as admin:
        await admin.create_topic(topic, read_queue_nums=queues, write_queue_nums=queues)


async def assigned(consumers: list[PushConsumer], total: int, within: float = 10) -> None:
    """Wait until the consumers between them hold ``total`` queues, none held twice."""

    def held() -> list[MessageQueue]:
        return [mq for c in consumers for mq in c._process_queues if not mq.topic.startswith("%")]

    await eventually(
        lambda: len(held()) == total and len(set(held())) == total, within, lambda: f"held: {held()}"
    )


async def test_clustering_delivers_20000_messages_exactly_once_over_3_consumers(cluster: Cluster) -> None:
    await create_topic(cluster, "Orders")
    collector = Collector()
    consumers = [consumer(cluster, collector, f"c{i}") for i in range(3)]
    for c in consumers:
        c.subscribe("Orders", "*")
        await c.start()
    await assigned(consumers, 8)
    shares = sorted(len([q for q in c._process_queues if q.topic == "Orders"]) for c in consumers)
    assert shares == [2, 3, 3]
    await produce(cluster, "Orders", 20_000)
    await collector.wait_for(20_000, within=90)
    await collector.settle(1.0)
    bodies = Counter(collector.bodies())
    assert len(bodies) == 20_000 and max(bodies.values()) == 1, "each delivered once"
    assert all(collector.count(f"c{i}") > 0 for i in range(3))
    for c in consumers:
        await c.close()
    async with Admin(cluster.address) as admin:
        progress = await admin.consume_progress("CG", "Orders")
    assert sum(p.consumer_offset for p in progress) == 20_000
    assert all(p.consumer_offset == p.broker_offset for p in progress), "offsets committed on close"


async def test_broadcasting_delivers_everything_to_every_consumer(cluster: Cluster, tmp_path: Path) -> None:
    await create_topic(cluster, "News")
    collector = Collector()
    consumers = [
        consumer(
            cluster,
            collector,
            f"b{i}",
            group="BG",
            message_model=MessageModel.BROADCASTING,
            offsets_dir=tmp_path / "offsets",
        )
        for i in range(2)
    ]
    for c in consumers:
        c.subscribe("News")
        await c.start()
    await produce(cluster, "News", 501)
    await collector.wait_for(1002)
    await collector.settle(0.5)
    for name in ("b0", "b1"):
        assert sorted(collector.bodies(name), key=int) == [str(i) for i in range(501)]
    for c in consumers:
        await c.close()
    files = sorted((tmp_path / "offsets").rglob("offsets.json"))
    assert len(files) == 2
    for file in files:
        table = json.loads(file.read_text())["offsetTable"]
        assert sum(e["offset"] for e in table if e["topic"] == "News") == 501

    # A restarted broadcasting consumer resumes from its own file: nothing again.
    again = Collector()
    c = consumer(
        cluster,
        again,
        "b0",
        group="BG",
        message_model=MessageModel.BROADCASTING,
        offsets_dir=tmp_path / "offsets",
    )
    c.subscribe("News")
    await c.start()
    await produce(cluster, "News", 10, start=501)
    await again.wait_for(10)
    await again.settle(0.5)
    assert sorted(again.bodies(), key=int) == [str(i) for i in range(501, 511)]
    await c.close()


async def test_joining_consumer_serves_its_queues_within_2_seconds(cluster: Cluster) -> None:
    await create_topic(cluster, "Join")
    collector = Collector()
    first = consumer(cluster, collector, "first", settings=dataclasses.replace(FAST, rebalance_ms=60_000))
    first.subscribe("Join")
    await first.start()
    await assigned([first], 8)
    second = consumer(cluster, collector, "second", settings=dataclasses.replace(FAST, rebalance_ms=60_000))
    second.subscribe("Join")
    joined = time.monotonic()
    await second.start()
    await assigned([first, second], 8, within=2)  # the broker's membership push, not the timer
    took = time.monotonic() - joined
    assert took < 2
    await produce(cluster, "Join", 80, batch=1)
    await collector.wait_for(80)
    assert collector.count("second") > 0
    print(f"joining consumer held its queues {took * 1000:.0f} ms after start")
    await first.close()
    await second.close()


async def test_an_orderly_consumer_pulls_each_queue_once_locked_not_at_its_next_recheck(
    cluster: Cluster,
) -> None:
    """A new queue's pull loop starts before the rebalance locks it, and used to sleep a whole
    recheck (3 s by default) first: a new orderly consumer's first message came 3 s late, and
    so did each queue it took over. With the recheck at 30 s the gap cannot hide."""
    await create_topic(cluster, "OrderlyStart")
    await produce(cluster, "OrderlyStart", 16, batch=1)
    collector = Collector()
    slow_recheck = dataclasses.replace(FAST, orderly_recheck_ms=30_000)
    first = consumer(cluster, collector, "first", orderly=True, settings=slow_recheck)
    first.subscribe("OrderlyStart")
    started = time.monotonic()
    await first.start()
    await collector.wait_for(16, within=10)
    print(f"an orderly consumer had all 16 messages {(time.monotonic() - started) * 1000:.0f} ms after start")
    await first.close()


async def test_offsets_survive_consumer_and_broker_restarts(cluster: Cluster) -> None:
    await produce(cluster, "Durable", 400)
    collector = Collector()
    c = consumer(cluster, collector, "one")
    c.subscribe("Durable")
    await c.start()
    await collector.wait_for(400)
    await c.close()
    await cluster.restart_broker("broker-a")
    await produce(cluster, "Durable", 100, start=400)
    c = consumer(cluster, collector, "two")
    c.subscribe("Durable")
    await c.start()
    await collector.wait_for(100, consumer="two")
    await collector.settle(0.5)
    assert sorted(collector.bodies("two"), key=int) == [str(i) for i in range(400, 500)]
    await c.close()


async def test_offset_reset_by_timestamp_redelivers_from_that_time(cluster: Cluster) -> None:
    await produce(cluster, "Replay", 200)
    await asyncio.sleep(0.05)
    cut = int(time.time() * 1000)
    await asyncio.sleep(0.05)
    await produce(cluster, "Replay", 100, start=200)
    collector = Collector()
    c = consumer(cluster, collector, "c")
    c.subscribe("Replay")
    await c.start()
    await collector.wait_for(300)
    await collector.settle(0.5)
    async with Admin(cluster.address) as admin:
        await admin.reset_offset("CG", "Replay", timestamp_ms=cut)
    await collector.wait_for(400)
    await collector.settle(1.0)
    replayed = collector.bodies()[300:]
    assert sorted(replayed, key=int) == [str(i) for i in range(200, 300)]
    await c.close()


async def test_tag_and_sql_filters(cluster: Cluster) -> None:
    async with Producer("PG", cluster.address) as producer:
        for i in range(60):
            tag = ("TagA", "TagB", "TagC")[i % 3]
            await producer.send(Message("Filtered", f"{i}".encode(), tags=tag, properties={"n": str(i)}))
    collector = Collector()
    tags = consumer(cluster, collector, "tags", group="TagGroup")
    tags.subscribe("Filtered", "TagA || TagC")
    sql = consumer(cluster, collector, "sql", group="SqlGroup")
    sql.subscribe("Filtered", "n >= 50 AND TAGS <> 'TagB'", sql=True)
    await tags.start()
    await sql.start()
    await collector.wait_for(40, consumer="tags")
    await collector.wait_for(7, consumer="sql")
    await collector.settle(0.5)
    assert sorted(collector.bodies("tags"), key=int) == [str(i) for i in range(60) if i % 3 != 1]
    assert sorted(collector.bodies("sql"), key=int) == [str(i) for i in range(50, 60) if i % 3 != 1]
    await tags.close()
    await sql.close()


async def test_retries_then_dead_letters(tmp_path: Path) -> None:
    cluster = await start_cluster(tmp_path, delay_levels="100ms 100ms 200ms 200ms 200ms 200ms")
    try:
        await produce(cluster, "Fragile", 3)
        collector = Collector()
        c = consumer(
            cluster,
            collector,
            "c",
            result=ConsumeStatus.RECONSUME_LATER,
            settings=dataclasses.replace(FAST, max_reconsume_times=2),
        )
        c.subscribe("Fragile")
        await c.start()
        await collector.wait_for(9)  # first delivery + 2 retries each
        async with Admin(cluster.address) as admin:

            async def three_dead() -> list[StoredMessage] | None:
                found = await admin.dead_letters("CG")
                return found if len(found) >= 3 else None

            dead = await eventually(three_dead, 10, lambda: "3 dead letters")
        await collector.settle(1.0)
        times = Counter(d.message.body.decode() for d in collector.deliveries)
        assert times == {"0": 3, "1": 3, "2": 3}
        retried = [d.message for d in collector.deliveries if d.message.reconsume_times]
        assert {m.topic for m in retried} == {"Fragile"}, "retries show the original topic"
        assert sorted(m.reconsume_times for m in retried) == [1, 1, 1, 2, 2, 2]
        assert sorted(m.body for m in dead) == [b"0", b"1", b"2"]
        assert {m.properties[Property.RETRY_TOPIC] for m in dead} == {"Fragile"}
        await c.close()
    finally:
        await cluster.close()


async def test_listener_exceptions_are_retried(tmp_path: Path) -> None:
    failed: set[str] = set()

    def fail_once(message):  # type: ignore[no-untyped-def]
        body = message.body.decode()
        if body not in failed:
            failed.add(body)
            raise RuntimeError(f"listener bug on {body}")

    collector = Collector()
    fast_retry = await start_cluster(tmp_path, delay_levels="100ms 100ms 100ms 100ms")
    try:
        await produce(fast_retry, "Flaky", 5)
        c = consumer(fast_retry, collector, "c", before=fail_once)
        c.subscribe("Flaky")
        await c.start()
        await collector.wait_for(5)  # the collector records a delivery once the hook passes
        await collector.settle(0.5)
        assert sorted(collector.bodies()) == ["0", "1", "2", "3", "4"]
        assert failed == {"0", "1", "2", "3", "4"}
        assert {d.message.reconsume_times for d in collector.deliveries} == {1}
        await c.close()
    finally:
        await fast_retry.close()


async def test_delay_level_2_arrives_after_about_5_seconds(cluster: Cluster) -> None:
    await create_topic(cluster, "Later")
    collector = Collector()
    c = consumer(cluster, collector, "c")
    c.subscribe("Later")
    await c.start()
    await assigned([c], 8)
    async with Producer("PG", cluster.address) as producer:
        await producer.send(Message("Later", b"delayed", delay_level=2))
        sent = time.monotonic()
    await asyncio.sleep(4.5)
    assert collector.count() == 0, "not before its time"
    await collector.wait_for(1, within=5)
    waited = collector.deliveries[-1].at - sent
    print(f"delay level 2 message delivered {waited:.2f} s after the send")
    assert 4.8 <= waited <= 7
    await c.close()


async def test_transactions_commit_rollback_and_check_back(tmp_path: Path) -> None:
    cluster = await start_cluster(
        tmp_path, transaction_timeout_ms=300, transaction_check_interval_ms=100, default_topic_queue_nums=4
    )
    try:
        outcome = {
            "commit": TransactionResolution.COMMIT,
            "rollback": TransactionResolution.ROLLBACK,
            "unknown": TransactionResolution.UNKNOWN,
        }
        checked: list[str] = []

        def local(message: Message, arg: object) -> TransactionResolution:
            return outcome[message.body.decode()]

        def check(message) -> TransactionResolution:  # type: ignore[no-untyped-def]
            checked.append(message.body.decode())
            return TransactionResolution.COMMIT

        collector = Collector()
        c = consumer(cluster, collector, "c")
        c.subscribe("Payments")
        async with TransactionProducer("TPG", cluster.address, local_transaction=local, check=check) as tp:
            for body in ("commit", "rollback", "unknown"):
                await tp.send_in_transaction(Message("Payments", body.encode()))
            await c.start()
            await collector.wait_for(2, within=15)
            await collector.settle(1.0)
        assert sorted(collector.bodies()) == ["commit", "unknown"]
        assert "unknown" in checked and "rollback" not in checked
        await c.close()
    finally:
        await cluster.close()


async def test_ordered_per_sharding_key_across_restarts_and_rebalance(cluster: Cluster) -> None:
    keys = [f"order-{k}" for k in range(12)]
    steps = 40
    await create_topic(cluster, "Steps")

    def slow(message):  # type: ignore[no-untyped-def]
        time.sleep(0.001)

    collector = Collector()
    first = consumer(cluster, collector, "first", orderly=True, before=slow)
    first.subscribe("Steps")
    await first.start()

    async def send_all() -> None:
        async with Producer("PG", cluster.address) as producer:
            for step in range(steps):
                for key in keys:
                    await producer.send(Message("Steps", f"{key}:{step}".encode()), sharding_key=key)
                await asyncio.sleep(0.01)

    sending = asyncio.create_task(send_all())
    await collector.wait_for(60)
    second = consumer(cluster, collector, "second", orderly=True, before=slow)  # a rebalance
    second.subscribe("Steps")
    await second.start()
    await collector.wait_for(200)
    await first.close()  # a restart of the first consumer
    first = consumer(cluster, collector, "first-again", orderly=True, before=slow)
    first.subscribe("Steps")
    await first.start()
    await sending
    total = steps * len(keys)
    await eventually(lambda: len(set(collector.bodies())) >= total, 60, lambda: "every step delivered")
    await collector.settle(1.0)
    bodies = collector.bodies()
    assert len(set(bodies)) == total
    for key in keys:
        sequence = [int(b.split(":")[1]) for b in bodies if b.startswith(f"{key}:")]
        # Every delivery of step n follows a delivery of step n-1 (redeliveries after a
        # restart start again from the committed offset, never skip ahead).
        seen: set[int] = set()
        for step in sequence:
            assert step == 0 or step - 1 in seen, f"{key}: {sequence}"
            seen.add(step)
    redelivered = len(bodies) - total
    print(f"ordered: {total} messages, {redelivered} redelivered across a restart and a rebalance")
    assert {d.consumer for d in collector.deliveries} >= {"first", "second", "first-again"}
    await first.close()
    await second.close()
