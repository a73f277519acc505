"""Writes through the ``orbitmq`` format, batch and streaming, read back with the project's pull
consumer: every row sent once with its keys, tags and properties, rows of a sharding key on one
queue in row order, and a batch the broker did not store as asked failing the task."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F
from sparkkit import ThreadCluster

from orbitmq.client.message import Message

pytestmark = pytest.mark.timeout(180)


def _write(frame: Any, namesrv: str, topic: str, **options: str) -> None:
    writer = frame.write.format("orbitmq").option("namesrv", namesrv).option("topic", topic).mode("append")
    for name, value in options.items():
        writer = writer.option(name, value)
    writer.save()


def test_batch_write_sends_every_row_once_keeping_order_per_sharding_key(
    spark: Any, cluster: ThreadCluster
) -> None:
    topic = "SparkSinkBatch"
    cluster.create_topic(topic, 4)  # eight write queues over two brokers
    # 200 rows in 4 Spark partitions of 50 (built in the JVM: no Python worker to start for
    # them); keys order-0..order-15 each hold 10 consecutive rows (so one partition), the last
    # 40 rows have no sharding key.
    frame = spark.range(0, 200, 1, 4).select(
        F.concat(F.lit("row-"), F.lpad(F.col("id").cast("string"), 3, "0")).cast("binary").alias("body"),
        F.array(F.concat(F.lit("id-"), F.col("id").cast("string")), F.lit("bulk")).alias("keys"),
        F.when(F.col("id") % 2 == 0, "even").otherwise("odd").alias("tags"),
        F.create_map(F.lit("seq"), F.col("id").cast("string")).alias("properties"),
        F.when(F.col("id") < 160, F.concat(F.lit("order-"), F.floor(F.col("id") / 10).cast("string"))).alias(
            "sharding_key"
        ),
    )
    _write(frame, cluster.namesrv, topic, batchSize="16")

    stored = cluster.read_all(topic)
    bodies = [m.body.decode() for m in stored]
    assert sorted(bodies) == [f"row-{i:03d}" for i in range(200)]  # each row once
    for message in stored:
        i = int(message.properties["seq"])
        assert message.body == f"row-{i:03d}".encode()
        assert list(message.keys) == [f"id-{i}", "bulk"]
        assert message.tags == ("even" if i % 2 == 0 else "odd")
    by_key: dict[str, list[tuple[str, int, int, int]]] = {}
    for message in stored:
        i = int(message.properties["seq"])
        if i < 160:
            broker = message.store_host  # one broker per store host: enough to tell queues apart
            by_key.setdefault(f"order-{i // 10}", []).append(
                (broker, message.queue_id, message.queue_offset, i)
            )
    assert len(by_key) == 16
    for key, placed in by_key.items():
        assert len({(b, q) for b, q, _, _ in placed}) == 1, f"{key} spread over queues: {placed}"
        in_queue_order = [i for *_, i in sorted(placed)]
        assert in_queue_order == sorted(in_queue_order), f"{key} out of order: {in_queue_order}"
    assert len({(m.store_host, m.queue_id) for m in stored}) > 2  # and the writes did spread out

    # A string body is sent as its UTF-8 bytes.
    _write(spark.createDataFrame([("héllo",)], "body string"), cluster.namesrv, topic)
    assert "héllo" in [m.body.decode() for m in cluster.read_all(topic)]

    # Eight tasks of one unkeyed row each: each task's producer starts its round robin at a
    # random queue, so they do not all write the first queue (all eight on one of the eight
    # queues by chance: 8 / 8**8).
    spread = "SparkSinkSpread"
    cluster.create_topic(spread, 4)
    singles = spark.range(0, 8, 1, 8).select(F.col("id").cast("string").cast("binary").alias("body"))
    _write(singles, cluster.namesrv, spread)
    placed = {(m.store_host, m.queue_id) for m in cluster.read_all(spread)}
    assert len(cluster.read_all(spread)) == 8 and len(placed) > 1, placed


def test_stream_write_copies_a_topic_through_a_streaming_query(
    spark: Any, cluster: ThreadCluster, tmp_path: Path
) -> None:
    source, target = "SparkSinkFrom", "SparkSinkTo"
    cluster.create_topic(source, 2)
    cluster.create_topic(target, 1)
    cluster.send(
        [
            Message(source, f"copy-{i}".encode(), tags="c", keys=[f"k{i}"], properties={"i": str(i)})
            for i in range(30)
        ]
    )
    query = (
        spark.readStream.format("orbitmq")
        .option("namesrv", cluster.namesrv)
        .option("topic", source)
        .option("startingOffsets", "earliest")
        .load()
        .select("body", "keys", "tags", "properties")
        .writeStream.format("orbitmq")
        .option("namesrv", cluster.namesrv)
        .option("topic", target)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 60
        while len(copied := cluster.read_all(target)) < 30:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, f"{len(copied)} of 30 messages copied"
            time.sleep(0.3)
        cluster.send(
            [
                Message(source, f"copy-{i}".encode(), tags="c", keys=[f"k{i}"], properties={"i": str(i)})
                for i in range(30, 35)
            ]
        )
        while len(copied := cluster.read_all(target)) < 35:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, f"{len(copied)} of 35 messages copied"
            time.sleep(0.3)
    finally:
        query.stop()
    assert sorted(m.body.decode() for m in copied) == sorted(f"copy-{i}" for i in range(35))
    assert all(m.tags == "c" and list(m.keys) == [f"k{m.properties['i']}"] for m in copied)


@pytest.fixture
def sync_master(tmp_path: Path) -> Iterator[ThreadCluster]:
    """A SYNC_MASTER broker without a slave: it stores a send but answers SLAVE_NOT_AVAILABLE."""
    running = ThreadCluster(tmp_path / "sync", ("broker-s",), broker_role="SYNC_MASTER")
    yield running
    running.close()


def test_a_batch_not_stored_as_asked_fails_the_task(spark: Any, sync_master: ThreadCluster) -> None:
    topic = "SparkSinkSync"
    sync_master.create_topic(topic, 1)
    frame = spark.createDataFrame([(f"s-{i}".encode(),) for i in range(5)], "body binary")
    with pytest.raises(Exception) as failed:
        _write(frame, sync_master.namesrv, topic)
    message = str(failed.value)
    assert "SendFailedError" in message and f"topic {topic}" in message, message
    assert "returned SLAVE_NOT_AVAILABLE, not SEND_OK" in message, message
