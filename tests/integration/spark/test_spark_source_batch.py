"""Batch reads through the ``orbitmq`` format against a real two-broker cluster, checked row by
row against what the producer was told it stored (broker, queue, offset, message id)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from sparkkit import ThreadCluster

from orbitmq.client.admin import Admin
from orbitmq.client.message import Message, SendResult
from orbitmq.client.pull_consumer import PullConsumer
from orbitmq.client.queue import MessageQueue
from orbitmq_spark.options import DEFAULT_READER_GROUP

pytestmark = pytest.mark.timeout(180)

TOPIC_A, TOPIC_B = "SparkBatchA", "SparkBatchB"


def _message(topic: str, i: int) -> Message:
    tags = ("TagA", "TagB", None)[i % 3]
    color = "red" if i % 2 else "blue"
    return Message(
        topic,
        f"{topic}-{i}".encode(),
        tags=tags,
        keys=[f"key-{i}", f"order-{i % 5}"],
        properties={"n": str(i), "color": color},
    )


@pytest.fixture(scope="module")
def produced(cluster: ThreadCluster) -> dict[tuple[str, str, int, int], tuple[Message, SendResult]]:
    """60 messages on TOPIC_A (3 queues on each broker), 10 on TOPIC_B (2 queues on each)."""
    cluster.create_topic(TOPIC_A, 3)
    cluster.create_topic(TOPIC_B, 2)
    messages = [_message(TOPIC_A, i) for i in range(60)] + [_message(TOPIC_B, i) for i in range(10)]
    results = cluster.send(messages)
    return {
        (m.topic, r.broker_name, r.queue_id, r.queue_offset): (m, r)
        for m, r in zip(messages, results, strict=True)
    }


def _read(spark: Any, cluster: ThreadCluster, topic: str, **options: str) -> list[Any]:
    reader = spark.read.format("orbitmq").option("namesrv", cluster.namesrv).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load().collect()


async def _groups(namesrv: str) -> set[str]:
    async with Admin(namesrv) as admin:
        return set(await admin.groups())


def _where(row: Any) -> tuple[str, str, int, int]:
    return (row.topic, row.broker, row.queue, row.queue_offset)


def test_batch_read_of_two_topics_returns_every_message_once_with_its_fields(
    spark: Any, cluster: ThreadCluster, produced: dict[tuple[str, str, int, int], tuple[Message, SendResult]]
) -> None:
    started = time.time()
    rows = _read(spark, cluster, f"{TOPIC_A},{TOPIC_B}")
    places = [_where(r) for r in rows]
    assert len(places) == len(set(places)) == 70  # no duplicates
    assert set(places) == set(produced)  # no loss, nothing else
    assert {r.broker for r in rows} == {"broker-a", "broker-b"}
    for row in rows:
        message, result = produced[_where(row)]
        assert row.body == message.body
        assert row.msg_id == result.msg_id
        assert row.tags == message.tags
        assert row.keys == message.keys
        assert row.properties == message.properties  # user properties only: no TAGS/KEYS/UNIQ_KEY
        assert row.reconsume_times == 0
        assert row.born_timestamp <= row.store_timestamp
        assert abs(row.store_timestamp.timestamp() - started) < 120
    # Per queue, offsets come back complete and in order within each partition.
    by_queue: dict[tuple[str, str, int], list[int]] = {}
    for row in rows:
        by_queue.setdefault((row.topic, row.broker, row.queue), []).append(row.queue_offset)
    assert all(offsets == list(range(len(offsets))) for offsets in by_queue.values())
    assert len(by_queue) == 10
    # The pulls named the reader group and committed nothing: no broker recorded it.
    assert DEFAULT_READER_GROUP not in cluster.run(_groups(cluster.namesrv))


def test_tag_and_sql92_filters_are_applied(
    spark: Any, cluster: ThreadCluster, produced: dict[tuple[str, str, int, int], tuple[Message, SendResult]]
) -> None:
    tagged = _read(spark, cluster, TOPIC_A, tags="TagA || TagB")
    expected = {w for w, (m, _) in produced.items() if w[0] == TOPIC_A and m.tags in ("TagA", "TagB")}
    assert sorted(_where(r) for r in tagged) == sorted(expected)
    assert len(expected) == 40

    selected = _read(spark, cluster, TOPIC_A, sql="n BETWEEN 10 AND 29 AND color = 'red'")
    expected = {
        w
        for w, (m, _) in produced.items()
        if w[0] == TOPIC_A and 10 <= int(m.properties["n"]) <= 29 and m.properties["color"] == "red"
    }
    assert sorted(_where(r) for r in selected) == sorted(expected) and len(expected) == 10


def test_per_queue_offsets_bound_the_read_and_min_partitions_splits_it(
    spark: Any, cluster: ThreadCluster, produced: dict[tuple[str, str, int, int], tuple[Message, SendResult]]
) -> None:
    starting = {TOPIC_A: {"broker-a:0": 3, "broker-b:1": -2}}
    ending = {TOPIC_A: {"broker-a:0": 7, "broker-b:2": 2}}
    rows = _read(
        spark, cluster, TOPIC_A, startingOffsets=json.dumps(starting), endingOffsets=json.dumps(ending)
    )
    expected = {
        w
        for w in produced
        if w[0] == TOPIC_A
        and w[3] >= (3 if w[1:3] == ("broker-a", 0) else 0)
        and w[3] < (7 if w[1:3] == ("broker-a", 0) else 2 if w[1:3] == ("broker-b", 2) else 10**9)
    }
    assert sorted(_where(r) for r in rows) == sorted(expected)

    frame = (
        spark.read.format("orbitmq")
        .option("namesrv", cluster.namesrv)
        .option("topic", TOPIC_A)
        .option("minPartitions", "24")
        .load()
    )
    assert frame.rdd.getNumPartitions() >= 24  # six queues of ten messages cut further
    split_rows = frame.collect()
    assert sorted(_where(r) for r in split_rows) == sorted(w for w in produced if w[0] == TOPIC_A)


def test_timestamp_start_is_resolved_by_the_brokers_offset_search(spark: Any, cluster: ThreadCluster) -> None:
    topic = "SparkBatchTime"
    cluster.create_topic(topic, 2)
    cluster.send([Message(topic, f"old-{i}".encode()) for i in range(8)])
    time.sleep(0.05)
    boundary_ms = int(time.time() * 1000)
    time.sleep(0.05)
    cluster.send([Message(topic, f"new-{i}".encode()) for i in range(8)])
    rows = _read(spark, cluster, topic, startingOffsets=f"timestamp:{boundary_ms}")
    assert sorted(r.body.decode() for r in rows) == sorted(f"new-{i}" for i in range(8))
    older = _read(spark, cluster, topic, endingOffsets=f"timestamp:{boundary_ms}")
    assert sorted(r.body.decode() for r in older) == sorted(f"old-{i}" for i in range(8))


def test_group_option_starts_at_the_groups_committed_offsets(spark: Any, cluster: ThreadCluster) -> None:
    topic, group = "SparkBatchGroup", "spark-batch-group"
    cluster.create_topic(topic, 2, broker="broker-a")
    cluster.send([Message(topic, f"g-{i}".encode()) for i in range(20)])
    queues = cluster.queues(topic)
    assert [(q.broker_name, q.queue_id) for q in queues] == [("broker-a", 0), ("broker-a", 1)]

    async def commit() -> None:
        async with PullConsumer(group, cluster.namesrv) as consumer:
            await consumer.commit_offset(MessageQueue(topic, "broker-a", 0), 6)  # queue 1: never committed

    cluster.run(commit())
    rows = _read(spark, cluster, topic, group=group)
    assert sorted((r.queue, r.queue_offset) for r in rows) == sorted(
        [(0, o) for o in range(6, 10)] + [(1, o) for o in range(10)]
    )
