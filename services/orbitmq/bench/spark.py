"""``orbitmq bench spark``: the ``orbitmq`` Spark data source reading a backlog, against the
project's own pull consumer reading the same backlog in one process (needs ``orbitmq[spark]``).

A name server and a broker run as child processes (as ``bench e2e``); an ``orbitmq produce``
child loads ``--messages`` 1 KiB messages onto a topic of 8 queues. Then, in this order:

* baseline — a :class:`PullConsumer` in this process pulls every queue from its min to its max
  offset, one coroutine per queue, 1 024 messages per pull (the data source's pull size);
* ``spark_batch_count`` — ``spark.read.format("orbitmq")...load().count()`` on a ``local[2]``
  session (after a warm-up read of 100 messages per queue, so the JVM, the Python workers and
  the planning path are warm): msg/s of the count, target ratio >= 0.5;
* ``spark_stream_sustained`` — ``readStream`` from earliest with ``maxOffsetsPerTrigger``
  100 000 into Spark's ``noop`` sink until the backlog is read: msg/s over the micro-batches
  after the first (the first pays the query's start), from Spark's own progress reports.

The machine's 1-minute load average is printed before and after: on a shared machine it says
how much the figures were crowded.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from orbitmq.bench.e2e import _produce, _wait, cluster_processes
from orbitmq.bench.figures import Figure
from orbitmq.client.admin import Admin
from orbitmq.client.pull_consumer import PullConsumer

TOPIC = "SparkBench"
QUEUES = 8
PULL_BATCH = 1024
MAX_OFFSETS_PER_TRIGGER = 100_000
WARM_UP_PER_QUEUE = 100


async def _create_topic(namesrv: str) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    await asyncio.sleep(0.5)


async def _pull_all(namesrv: str) -> tuple[int, float, dict[str, int]]:
    """(messages, seconds, max offset per ``broker:queue``) of pulling the whole topic."""
    async with PullConsumer("bench-spark-baseline", namesrv) as consumer:
        queues = await consumer.queues(TOPIC, refresh=True)
        ends = {mq: await consumer.max_offset(mq) for mq in queues}

        async def drain(mq: Any) -> int:
            offset, count = await consumer.min_offset(mq), 0
            while offset < ends[mq]:
                result = await consumer.pull(mq, offset, max_nums=PULL_BATCH)
                count += len(result.messages)
                offset = result.next_begin_offset
            return count

        started = time.perf_counter()
        total = sum(await asyncio.gather(*(drain(mq) for mq in queues)))
        elapsed = time.perf_counter() - started
    return total, elapsed, {f"{mq.broker_name}:{mq.queue_id}": end for mq, end in ends.items()}


def _session() -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    import orbitmq_spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("orbitmq-bench-spark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    orbitmq_spark.register(spark)
    return spark


def _batch_count(spark: Any, namesrv: str, ends: dict[str, int], expected: int) -> float:
    """Seconds of a full ``count()``, after a warm-up read of a few messages per queue."""
    warm = {TOPIC: {key: min(end, WARM_UP_PER_QUEUE) for key, end in ends.items()}}
    reader = spark.read.format("orbitmq").option("namesrv", namesrv).option("topic", TOPIC)
    reader.option("endingOffsets", json.dumps(warm)).load().count()
    started = time.perf_counter()
    counted = reader.option("endingOffsets", json.dumps({TOPIC: ends})).load().count()
    elapsed = time.perf_counter() - started
    if counted != expected:
        raise RuntimeError(f"the Spark count found {counted} messages, expected {expected}")
    return elapsed


def _stream_rate(spark: Any, namesrv: str, expected: int, per_trigger: int, checkpoint: Path) -> float:
    """msg/s of the micro-batches after the first, from the query's progress reports."""
    query = (
        spark.readStream.format("orbitmq")
        .option("namesrv", namesrv)
        .option("topic", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        progress: list[dict[str, Any]] = []
        while sum(p["numInputRows"] for p in progress) < expected:
            if query.exception() is not None:
                raise RuntimeError(f"the streaming query failed: {query.exception()}")
            time.sleep(0.5)
            progress = [p for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    if len(progress) < 2:
        raise RuntimeError(f"the stream read the backlog in {len(progress)} batch; need at least two")
    later = progress[1:]

    def at(report: dict[str, Any]) -> float:
        return datetime.fromisoformat(report["timestamp"].replace("Z", "+00:00")).timestamp()

    span = at(later[-1]) + later[-1]["durationMs"]["triggerExecution"] / 1000 - at(later[0])
    return sum(p["numInputRows"] for p in later) / span


def _load() -> Figure:
    return Figure("load_average_1m", os.getloadavg()[0], "", None, target=f"{os.cpu_count()} cores")


def run(
    emit: Callable[[Figure], None],
    *,
    messages: int,
    work_dir: Path | None,
    max_offsets_per_trigger: int = MAX_OFFSETS_PER_TRIGGER,
) -> None:
    if messages < 2 * max_offsets_per_trigger:
        raise ValueError(
            f"--messages {messages} must be at least twice --max-offsets-per-trigger "
            f"{max_offsets_per_trigger}: the sustained rate leaves the first micro-batch out"
        )
    emit(_load())
    scratch = Path(tempfile.mkdtemp(prefix="orbitmq-bench-spark-", dir=work_dir))
    try:
        with cluster_processes("spark", work_dir) as (namesrv, _broker):
            asyncio.run(_create_topic(namesrv))
            started = time.perf_counter()
            _wait(_produce(namesrv, TOPIC, messages))
            emit(Figure("spark_backlog_produce", messages / (time.perf_counter() - started), "msg/s", None))
            pulled, pull_s, ends = asyncio.run(_pull_all(namesrv))
            if pulled != messages:
                raise RuntimeError(f"the pull consumer found {pulled} messages, expected {messages}")
            baseline = messages / pull_s
            spark = _session()
            try:
                count_s = _batch_count(spark, namesrv, ends, messages)
                emit(
                    Figure(
                        "spark_batch_count",
                        messages / count_s,
                        "msg/s",
                        baseline,
                        "PullConsumer, one process, 1024 per pull",
                        "ratio >= 0.5",
                    )
                )
                rate = _stream_rate(spark, namesrv, messages, max_offsets_per_trigger, scratch / "checkpoint")
                emit(
                    Figure(
                        "spark_stream_sustained",
                        rate,
                        "msg/s",
                        baseline,
                        f"PullConsumer; maxOffsetsPerTrigger {max_offsets_per_trigger}",
                    )
                )
            finally:
                spark.stop()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    emit(_load())
