"""Streaming reads (``readStream.format("orbitmq")``) into Spark's exactly-once Parquet sink:
offsets per queue in the checkpoint, ``maxOffsetsPerTrigger``, a queue added while the query
runs, a stop and restart on the same checkpoint, and ``failOnDataLoss`` when retention removed
offsets the checkpoint still needed."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sparkkit import ThreadCluster

from orbitmq.client.message import Message, SendResult

pytestmark = pytest.mark.timeout(240)


def _start(spark: Any, namesrv: str, topic: str, out: Path, checkpoint: Path, **options: str) -> Any:
    reader = spark.readStream.format("orbitmq").option("namesrv", namesrv).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def _processed(query: Any) -> int:
    return sum(p["numInputRows"] for p in query.recentProgress)


def _wait(condition: Callable[[], bool], query: Any, within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not condition():
        if query.exception() is not None:
            raise AssertionError(f"query failed while waiting for {what}: {query.exception()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {what} (progress: {query.recentProgress[-3:]})")
        time.sleep(0.2)


def _places(results: list[SendResult]) -> set[tuple[str, int, int]]:
    return {(r.broker_name, r.queue_id, r.queue_offset) for r in results}


def _sink_rows(spark: Any, out: Path) -> list[Any]:
    return spark.read.parquet(str(out)).collect()


@pytest.fixture
def stopped() -> Iterator[list[Any]]:
    """Queries to stop at the end of a test, whatever happened."""
    queries: list[Any] = []
    yield queries
    for query in queries:
        query.stop()


def test_stream_caps_batches_picks_up_a_new_queue_and_resumes_after_restart(
    spark: Any, cluster: ThreadCluster, tmp_path: Path, stopped: list[Any]
) -> None:
    topic = "SparkStream"
    cluster.create_topic(topic, 2)  # two queues on each broker
    sent = cluster.send([Message(topic, f"before-{i}".encode(), tags="T") for i in range(40)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    query = _start(
        spark, cluster.namesrv, topic, out, checkpoint, startingOffsets="earliest", maxOffsetsPerTrigger="12"
    )
    stopped.append(query)
    _wait(lambda: _processed(query) >= 40, query, 60, "the 40 messages sent before the start")
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert max(sizes) <= 12 and len(sizes) >= 4, sizes  # capped: 40 messages need at least four batches

    cluster.create_topic(topic, 3)  # a queue more on each broker while the query runs
    added = cluster.send([Message(topic, f"added-{i}".encode()) for i in range(18)])
    assert {(r.broker_name, r.queue_id) for r in added} >= {("broker-a", 2), ("broker-b", 2)}
    _wait(lambda: _processed(query) >= 58, query, 60, "the messages sent after a queue was added")
    last = json.loads(query.lastProgress["sources"][0]["endOffset"])
    assert last[topic]["broker-a:2"] > 0 and last[topic]["broker-b:2"] > 0  # the checkpoint's per-queue form
    query.stop()
    stopped.remove(query)

    later = cluster.send([Message(topic, f"while-stopped-{i}".encode()) for i in range(15)])
    query = _start(spark, cluster.namesrv, topic, out, checkpoint, maxOffsetsPerTrigger="12")
    stopped.append(query)
    _wait(lambda: _processed(query) >= 15, query, 60, "the messages sent while the query was stopped")
    time.sleep(1)  # a batch more would show a duplicate
    query.stop()

    rows = _sink_rows(spark, out)
    places = [(r.broker, r.queue, r.queue_offset) for r in rows]
    assert len(places) == len(set(places))  # no duplicates across the restart
    assert set(places) == _places(sent) | _places(added) | _places(later)  # no loss
    bodies = {(r.broker, r.queue, r.queue_offset): r.body.decode() for r in rows}
    for results, prefix in ((sent, "before"), (added, "added"), (later, "while-stopped")):
        assert all(bodies[(r.broker_name, r.queue_id, r.queue_offset)].startswith(prefix) for r in results)


def test_available_now_reads_what_was_there_in_capped_batches_and_stops(
    spark: Any, cluster: ThreadCluster, tmp_path: Path
) -> None:
    topic = "SparkStreamNow"
    cluster.create_topic(topic, 1)
    sent = cluster.send([Message(topic, f"now-{i}".encode()) for i in range(25)])
    query = (
        spark.readStream.format("orbitmq")
        .option("namesrv", cluster.namesrv)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "10")
        .load()
        .writeStream.format("parquet")
        .option("path", str(tmp_path / "out"))
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(90), "an availableNow query stops by itself"
    assert query.exception() is None
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [10, 10, 5]
    rows = _sink_rows(spark, tmp_path / "out")
    assert sorted((r.broker, r.queue, r.queue_offset) for r in rows) == sorted(_places(sent))


@pytest.fixture
def retention_cluster(tmp_path: Path) -> Iterator[ThreadCluster]:
    """One broker with 64 KiB commit-log segments whose retention keeps nothing older than 1 ms
    (the test triggers it itself)."""
    running = ThreadCluster(
        tmp_path / "retention",
        ("broker-r",),
        segment_bytes=64 * 1024,
        max_message_bytes=16 * 1024,
        file_reserved_time_ms=1,
        register_interval_ms=1_000,
    )
    yield running
    running.close()


def _apply_retention(cluster: ThreadCluster, topic: str, above: int) -> int:
    """Delete expired segments until queue 0's min offset passes ``above``; returns it."""
    store = cluster.cluster.brokers["broker-r"].broker.store

    async def purge() -> int:
        store.flush_commitlog()
        store.delete_expired()
        return store.min_offset_in_queue(topic, 0)

    deadline = time.monotonic() + 30
    while (minimum := cluster.run(purge())) <= above:
        assert time.monotonic() < deadline, f"retention left queue 0 at min offset {minimum}"
        time.sleep(0.2)
    return minimum


def test_fail_on_data_loss_errors_or_skips_what_retention_removed(
    spark: Any, retention_cluster: ThreadCluster, tmp_path: Path, stopped: list[Any]
) -> None:
    cluster, topic = retention_cluster, "SparkLoss"
    cluster.create_topic(topic, 1)
    body = b"x" * 2048
    cluster.send([Message(topic, body) for _ in range(10)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = _start(spark, cluster.namesrv, topic, out, checkpoint, startingOffsets="earliest")
    stopped.append(query)
    _wait(lambda: _processed(query) >= 10, query, 60, "the first 10 messages")
    query.stop()
    stopped.remove(query)

    cluster.send([Message(topic, body) for _ in range(150)])  # ~300 KiB: several segments
    minimum = _apply_retention(cluster, topic, above=10)  # offsets 10.. are gone before being read

    query = _start(spark, cluster.namesrv, topic, out, checkpoint)
    stopped.append(query)
    with pytest.raises(Exception) as failed:
        query.awaitTermination(60)
    message = str(failed.value)
    assert f"offsets 10..{minimum - 1} were removed by retention" in message, message
    assert "'failOnDataLoss'" in message, message
    stopped.remove(query)

    query = _start(spark, cluster.namesrv, topic, out, checkpoint, failOnDataLoss="false")
    stopped.append(query)
    _wait(lambda: _processed(query) >= 160 - minimum, query, 60, "the messages retention kept")
    time.sleep(0.5)
    query.stop()
    offsets = sorted(r.queue_offset for r in _sink_rows(spark, out))
    assert offsets == list(range(10)) + list(range(minimum, 160))  # the lost ones skipped, nothing twice

    # A batch read asked for the removed offsets fails the same way, or skips with the option off.
    reader = (
        spark.read.format("orbitmq")
        .option("namesrv", cluster.namesrv)
        .option("topic", topic)
        .option("startingOffsets", json.dumps({topic: {"broker-r:0": 0}}))
    )
    with pytest.raises(Exception, match="removed by retention"):
        reader.load().collect()
    kept = reader.option("failOnDataLoss", "false").load().collect()
    assert sorted(r.queue_offset for r in kept) == list(range(minimum, 160))
