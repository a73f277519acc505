"""Pull consumer, the blocking facade, client metrics, offset repair and broker loss, on a real cluster."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from clusterkit import FAST, Cluster, Collector, eventually, scrape, start_cluster

from orbitmq.client import (
    Admin,
    BlockingProducer,
    BlockingPullConsumer,
    ConsumeFromWhere,
    ConsumerMetrics,
    ConsumeStatus,
    Message,
    MessageQueue,
    Producer,
    PullConsumer,
    PullStatus,
    PushConsumer,
    start_metrics_server,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path)
    async with Admin(running.address) as admin:
        await admin.create_topic("Pulled", read_queue_nums=2, write_queue_nums=2)
    yield running
    await running.close()


async def send(cluster: Cluster, topic: str, count: int, queue: int | None = None, start: int = 0) -> None:
    async with Producer("PG", cluster.address) as producer:
        queues = await producer.write_queues(topic)
        for i in range(start, start + count):
            target = queues[queue] if queue is not None else None
            await producer.send(
                Message(topic, f"{i}".encode(), tags="AB"[i % 2], properties={"n": str(i)}), queue=target
            )


async def test_pull_at_explicit_offsets_with_filters_and_long_polling(cluster: Cluster) -> None:
    await send(cluster, "Pulled", 20, queue=0)
    async with PullConsumer("PullGroup", cluster.address) as consumer:
        queues = await consumer.queues("Pulled")
        assert queues == [MessageQueue("Pulled", "broker-a", 0), MessageQueue("Pulled", "broker-a", 1)]
        q0 = queues[0]
        first = await consumer.pull(q0, 0, max_nums=5)
        assert first.status is PullStatus.FOUND
        assert [m.body for m in first.messages] == [f"{i}".encode() for i in range(5)]
        assert (first.next_begin_offset, first.min_offset, first.max_offset) == (5, 0, 20)
        tagged = await consumer.pull(q0, 5, expression="B", max_nums=32)
        assert [m.body for m in tagged.messages] == [f"{i}".encode() for i in range(5, 20, 2)]
        sql = await consumer.pull(q0, 0, expression="n BETWEEN 3 AND 6", sql=True)
        assert [m.body for m in sql.messages] == [b"3", b"4", b"5", b"6"]
        end = await consumer.pull(q0, 20)
        assert end.status is PullStatus.NO_NEW_MSG and end.next_begin_offset == 20

        waiting = asyncio.create_task(consumer.pull(q0, 20, wait_ms=5_000))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        started = time.monotonic()
        await send(cluster, "Pulled", 1, queue=0, start=20)
        woken = await waiting
        assert woken.status is PullStatus.FOUND and woken.messages[0].body == b"20"
        assert time.monotonic() - started < 2

        assert await consumer.committed_offset(q0) == -1
        await consumer.commit_offset(q0, 21)
        assert await consumer.committed_offset(q0) == 21
        assert (await consumer.min_offset(q0), await consumer.max_offset(q0)) == (0, 21)
        assert await consumer.offset_at(q0, 0) == 0
        assert await consumer.offset_at(q0, int(time.time() * 1000) + 60_000) == 21

        with pytest.raises(ValueError, match="offset must be an int >= 0, got -1"):
            await consumer.pull(q0, -1)
        with pytest.raises(ValueError, match="max_nums must be between 1 and 1024, got 0"):
            await consumer.pull(q0, 0, max_nums=0)
        with pytest.raises(ValueError, match="a >"):
            await consumer.pull(q0, 0, expression="a >", sql=True)
    async with Admin(cluster.address) as admin:
        progress = {
            p.queue_id: p.consumer_offset for p in await admin.consume_progress("PullGroup", "Pulled")
        }
    assert progress[0] == 21


async def test_blocking_facade_from_plain_code(cluster: Cluster) -> None:
    def script() -> list[bytes]:
        with BlockingProducer("PG", cluster.address) as producer:
            queue = producer.write_queues("Pulled")[1]
            results = [producer.send(Message("Pulled", f"sync {i}".encode()), queue=queue) for i in range(3)]
            assert {r.queue_id for r in results} == {1}
        with BlockingPullConsumer("SyncGroup", cluster.address) as consumer:
            q1 = consumer.queues("Pulled")[1]
            return [m.body for m in consumer.pull(q1, 0).messages]

    assert await asyncio.to_thread(script) == [b"sync 0", b"sync 1", b"sync 2"]


async def test_illegal_offset_is_repaired_and_metrics_are_served(cluster: Cluster) -> None:
    await send(cluster, "Pulled", 10, queue=0)
    async with PullConsumer("Repair", cluster.address) as pull:
        await pull.commit_offset((await pull.queues("Pulled"))[0], 1_000)  # far past the end
    collector = Collector()
    metrics = ConsumerMetrics("Repair", "c")
    consumer = PushConsumer(
        "Repair",
        cluster.address,
        listener=collector.listener("c", ConsumeStatus.CONSUME_SUCCESS),
        settings=FAST,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
        metrics=metrics,
    )
    consumer.subscribe("Pulled")
    port = start_metrics_server(0, metrics)
    await consumer.start()
    await collector.wait_for(10)
    await collector.settle(0.5)
    assert sorted(collector.bodies(), key=int) == [str(i) for i in range(10)], "redelivered from the start"
    await eventually(
        lambda: consumer.committed_offsets().get(MessageQueue("Pulled", "broker-a", 0)) == 10,
        5,
        lambda: str(consumer.committed_offsets()),
    )

    async def published() -> dict[tuple[str, tuple[tuple[str, str], ...]], float] | None:
        found = await asyncio.to_thread(scrape, f"http://127.0.0.1:{port}/metrics")
        key = (
            "orbitmq_client_committed_offset",
            (("broker", "broker-a"), ("group", "Repair"), ("queue", "0"), ("topic", "Pulled")),
        )
        return found if found.get(key) == 10 else None

    samples = await eventually(published, 5, lambda: "committed offset 10 published")

    def value(name: str, **labels: str) -> float:
        return sum(v for (n, ls), v in samples.items() if n == name and labels.items() <= dict(ls).items())

    assert value("orbitmq_rebalance_events_total", topic="Pulled", outcome="ok") >= 1
    assert value("orbitmq_client_queues_assigned", topic="Pulled") == 2
    assert value("orbitmq_client_committed_offset", topic="Pulled", queue="0") == 10
    assert value("orbitmq_client_consumer_lag", topic="Pulled", queue="0") == 0
    assert value("orbitmq_consume_results_total", topic="Pulled", status="CONSUME_SUCCESS") == 10
    assert value("orbitmq_consume_latency_seconds_count") == 10
    await consumer.close()


async def test_consumer_survives_broker_loss_and_return(tmp_path: Path) -> None:
    cluster = await start_cluster(tmp_path, brokers=("broker-a", "broker-b"))
    try:
        async with Admin(cluster.address) as admin:
            await admin.create_topic("Spread", read_queue_nums=2, write_queue_nums=2)
        collector = Collector()
        consumer = PushConsumer(
            "Survivor",
            cluster.address,
            listener=collector.listener("c", ConsumeStatus.CONSUME_SUCCESS),
            settings=FAST,
            consume_from=ConsumeFromWhere.FIRST_OFFSET,
        )
        consumer.subscribe("Spread")
        await consumer.start()
        await send(cluster, "Spread", 8)
        await collector.wait_for(8)
        await cluster.stop_broker("broker-b")
        await send(cluster, "Spread", 8, start=8)  # the producer routes around the lost broker
        await collector.wait_for(16)
        await eventually(
            lambda: (
                {mq.broker_name for mq in consumer._process_queues if mq.topic == "Spread"} == {"broker-a"}
            ),
            10,
            lambda: "broker-b's queues dropped after the route refresh",
        )
        await cluster.start_broker("broker-b")
        await eventually(
            lambda: "broker-b" in {mq.broker_name for mq in consumer._process_queues},
            10,
            lambda: "broker-b's queues back",
        )
        await send(cluster, "Spread", 8, start=16)
        await collector.wait_for(24)
        await collector.settle(0.5)
        assert sorted(set(collector.bodies()), key=int) == [str(i) for i in range(24)]
        await consumer.close()
    finally:
        await cluster.close()
