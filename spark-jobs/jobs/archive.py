"""Archive: a topic's messages to Parquet partitioned by date, resumable from the offsets of the
last archived run, with the rows written checked against the queues' offsets.

    spark-submit --master local[2] spark-jobs/jobs/archive.py \\
        --namesrv 127.0.0.1:9876 --topic Orders --output /data/orders-archive

Layout of ``--output`` (a path or URI Spark writes; files go through Hadoop's FileSystem)::

    date=2026-11-24/run=7/part-*.parquet   rows of run 7 stored (store timestamp, UTC) that day
    _offsets/run-000007.json               {"topic", "run", "offsets": {"Orders": {"broker-a:0": 120}}, ...}

Spark's Parquet reader skips names starting with ``_``, so ``spark.read.parquet(output)`` sees
the messages only (columns of the ``orbitmq`` source plus ``date`` and ``run``).

A run N reads, per queue, ``[end of run N-1, max offset now)`` — queues never archived (a queue
added to the topic) from 0 — with the ``orbitmq`` source, and writes it under ``run=N``. The
offsets file of run N is written (temporary name, then a rename) only after the Parquet commit
succeeded and the check below passed, so it is the commit record of the run: after a crash at
any point the next run is N again, which first deletes what the crashed attempt left (every
``date=*/run=N`` directory and Spark's ``_temporary``) and writes the range again. Every message
is in the archive exactly once, keyed by (broker, queue, queue_offset). One run at a time per
output.

The check reads run N back and, per queue, needs contiguous offsets ending at the planned end:
``rows == end - start - removed``, where ``removed`` (the slots from the start to the first
archived offset) must be explained by retention — the queue's min offset after the write is at
or past the first archived offset. A gap or a duplicate fails the run (exit 1) without writing
its offsets, so the next run writes it again. What retention removed is reported per queue.

Stdout ends with one JSON line (``{"job": "archive", ...}``). Exit status 2 is bad arguments or
an unknown topic, 1 any other failure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from orbitmq.common.errors import OrbitError
from orbitmq_spark.jobkit import JobArgumentParser, UsageError, run_job, spark_session, topic_arg

OFFSETS_DIR = "_offsets"
FAILPOINT_ENV = "ORBITMQ_ARCHIVE_FAILPOINT"
"""Test hook: ``before-offsets`` stalls a run after its Parquet commit and check, before its
offsets file (where a crash must not duplicate anything), so a test can SIGKILL it there."""


class CheckError(Exception):
    """The rows written do not match the queues' offsets: the run is not committed."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = JobArgumentParser(
        "archive",
        description="Archive a topic's messages to Parquet partitioned by date, from where the last "
        "run ended; check the rows against the queues' offsets; print a JSON summary line.",
    )
    parser.add_namesrv()
    parser.add_argument("--topic", required=True, type=topic_arg, help="the topic to archive")
    parser.add_argument(
        "--output",
        required=True,
        help="Parquet dataset (a path or URI Spark writes); offsets in <output>/_offsets",
    )
    parser.add_argument(
        "--min-partitions",
        type=int,
        default=None,
        help="cut the queues' ranges into at least this many Spark tasks (default: one per queue)",
    )
    args = parser.parse_args(argv)
    if args.min_partitions is not None and args.min_partitions < 1:
        parser.error(f"argument --min-partitions: {args.min_partitions} must be 1 or more")
    if not args.output.strip():
        parser.error("argument --output: must not be empty")
    args.output = args.output.rstrip("/")
    return args


# -- the archive's files (Hadoop FileSystem through Spark's JVM: local, HDFS, S3 alike) ----------


class ArchiveFiles:
    """The Parquet dataset's run directories and the offsets files beside it."""

    def __init__(self, spark: Any, output: str) -> None:
        jvm = spark._jvm
        self._path = jvm.org.apache.hadoop.fs.Path
        self._io = jvm.org.apache.commons.io.IOUtils
        self.output = output
        self._fs = self._path(output).getFileSystem(spark._jsc.hadoopConfiguration())

    def last_run(self) -> tuple[int, dict[str, Any] | None]:
        """The highest committed run and its offsets document (0, None: never archived)."""
        folder = self._path(f"{self.output}/{OFFSETS_DIR}")
        if not self._fs.exists(folder):
            return 0, None
        runs = []
        for status in self._fs.listStatus(folder):
            name = status.getPath().getName()
            if name.startswith("run-") and name.endswith(".json"):
                runs.append((int(name[4:-5]), status.getPath()))
        if not runs:
            return 0, None
        number, path = max(runs)
        stream = self._fs.open(path)
        try:
            document = json.loads(self._io.toString(stream, "UTF-8"))
        finally:
            stream.close()
        return number, document

    def clear_run(self, run: int) -> int:
        """Delete what an uncommitted attempt of ``run`` left; returns the directories removed."""
        removed = 0
        for pattern in (f"{self.output}/date=*/run={run}", f"{self.output}/_temporary"):
            for status in self._fs.globStatus(self._path(pattern)) or []:
                self._fs.delete(status.getPath(), True)
                removed += 1
        return removed

    def run_paths(self, run: int) -> list[str]:
        return [
            str(s.getPath()) for s in self._fs.globStatus(self._path(f"{self.output}/date=*/run={run}")) or []
        ]

    def commit_offsets(self, run: int, document: dict[str, Any]) -> str:
        """Write run ``run``'s offsets file whole (temporary name, then rename): its commit record."""
        final = self._path(f"{self.output}/{OFFSETS_DIR}/run-{run:06d}.json")
        temporary = self._path(f"{self.output}/{OFFSETS_DIR}/.run-{run:06d}.json.tmp")
        stream = self._fs.create(temporary, True)
        try:
            stream.writeBytes(json.dumps(document, sort_keys=True))  # ASCII: json escapes the rest
        finally:
            stream.close()
        if not self._fs.rename(temporary, final):
            raise OSError(f"could not rename {temporary} to {final}")
        return str(final)


# -- planning and checking (pure) -------------------------------------------------------------


@dataclass(frozen=True)
class QueuePlan:
    broker: str
    queue_id: int
    start: int
    end: int

    @property
    def key(self) -> str:
        return f"{self.broker}:{self.queue_id}"


def plan(topic: str, previous: dict[str, Any] | None, max_offsets: dict[str, int]) -> list[QueuePlan]:
    """Per listed queue: from the previous run's end (0 for a queue never archived) to its max."""
    done = ((previous or {}).get("offsets") or {}).get(topic, {})
    plans = []
    for key, end in sorted(max_offsets.items()):
        broker, _, queue = key.rpartition(":")
        start = int(done.get(key, 0))
        plans.append(QueuePlan(broker, int(queue), start, max(start, end)))
    return plans


@dataclass(frozen=True)
class QueueWritten:
    rows: int
    distinct: int
    first: int
    last: int


def check(
    plans: list[QueuePlan], written: dict[str, QueueWritten], min_after: dict[str, int]
) -> dict[str, int]:
    """What retention removed per queue; raises CheckError when the rows do not match the offsets."""
    removed = {}
    unknown = sorted(set(written) - {p.key for p in plans})
    if unknown:
        raise CheckError(f"rows of queue {unknown[0]}, which the run did not plan")
    for p in plans:
        got = written.get(p.key)
        floor = max(p.start, min_after.get(p.key, 0))  # retention may have removed [start, floor)
        if got is None or got.rows == 0:
            if p.end > floor:
                raise CheckError(
                    f"queue {p.key}: no rows archived, expected offsets {floor}..{p.end - 1} "
                    f"(planned {p.start}..{p.end - 1})"
                )
            removed[p.key] = p.end - p.start
            continue
        if got.distinct != got.rows:
            raise CheckError(f"queue {p.key}: {got.rows - got.distinct} offsets archived more than once")
        if got.last != p.end - 1 or got.first < p.start or got.first > floor:
            raise CheckError(
                f"queue {p.key}: archived offsets {got.first}..{got.last}, expected {floor}..{p.end - 1} "
                f"(planned {p.start}..{p.end - 1}; offsets before {floor} may have been removed by retention)"
            )
        if got.rows != got.last - got.first + 1:
            raise CheckError(
                f"queue {p.key}: {got.rows} rows for offsets {got.first}..{got.last}: "
                f"{got.last - got.first + 1 - got.rows} missing"
            )
        removed[p.key] = got.first - p.start
    return removed


# -- the run ------------------------------------------------------------------------------------


def _cluster_offsets(namesrv: str, topic: str) -> tuple[dict[str, int], dict[str, int]]:
    """(max offsets, min offsets) per ``broker:queue`` of the topic's readable queues."""
    from orbitmq_spark.brokers import ClusterView
    from orbitmq_spark.options import OptionError, parse_read_options

    try:
        view = ClusterView(parse_read_options({"namesrv": namesrv, "topic": topic}, streaming=False))
        try:
            bounds = view.bounds(view.queues(refresh=True))
        finally:
            view.close()
    except OptionError as error:
        raise UsageError(f"--{error.option}: {error}") from None
    highs = {f"{b}:{q}": bound.max_offset for (_, b, q), bound in bounds.items()}
    lows = {f"{b}:{q}": bound.min_offset for (_, b, q), bound in bounds.items()}
    return highs, lows


def _write_run(spark: Any, args: argparse.Namespace, run: int, plans: list[QueuePlan]) -> None:
    from pyspark.sql import functions as F

    todo = [p for p in plans if p.end > p.start]
    starts = {args.topic: {p.key: p.start for p in todo}}
    ends = {args.topic: {p.key: p.end for p in todo}}
    reader = (
        spark.read.format("orbitmq")
        .option("namesrv", args.namesrv)
        .option("topic", args.topic)
        .option("startingOffsets", json.dumps(starts))
        .option("endingOffsets", json.dumps(ends))
        .option("failOnDataLoss", "false")  # what retention removed is counted and reported
    )
    if args.min_partitions:
        reader = reader.option("minPartitions", str(args.min_partitions))
    planned = [p.key for p in todo]
    frame = (
        reader.load()
        # A queue added between the listing and the read is left to the next run.
        .where(F.concat_ws(":", "broker", F.col("queue").cast("string")).isin(planned))
        .withColumn("date", F.date_format("store_timestamp", "yyyy-MM-dd"))
        .withColumn("run", F.lit(run))
    )
    frame.write.mode("append").partitionBy("date", "run").parquet(args.output)


def _read_back(spark: Any, files: ArchiveFiles, run: int) -> dict[str, QueueWritten]:
    from pyspark.sql import functions as F

    paths = files.run_paths(run)
    if not paths:
        return {}
    rows = (
        spark.read.option("basePath", files.output)
        .parquet(*paths)
        .groupBy("broker", "queue")
        .agg(
            F.count("*").alias("rows"),
            F.countDistinct("queue_offset").alias("distinct"),
            F.min("queue_offset").alias("first"),
            F.max("queue_offset").alias("last"),
        )
        .collect()
    )
    return {f"{r.broker}:{r.queue}": QueueWritten(r.rows, r.distinct, r.first, r.last) for r in rows}


def _stall_if_asked(point: str) -> None:
    if os.environ.get(FAILPOINT_ENV) == point:
        print(f"archive.py: failpoint {point}: waiting to be killed", file=sys.stderr, flush=True)
        while True:
            time.sleep(60)


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    highs, _ = _cluster_offsets(args.namesrv, args.topic)  # an unknown topic fails before Spark starts

    import orbitmq_spark

    spark = spark_session(f"orbitmq-archive-{args.topic}")
    spark.conf.set("spark.sql.session.timeZone", "UTC")  # the date partition is the UTC day
    orbitmq_spark.register(spark)
    try:
        files = ArchiveFiles(spark, args.output)
        last, previous = files.last_run()
        if previous is not None and previous.get("topic") != args.topic:
            raise UsageError(
                f"--output {args.output} archives topic {previous.get('topic')!r}, not {args.topic!r} "
                "(one topic per archive)"
            )
        plans = plan(args.topic, previous, highs)
        summary: dict[str, Any] = {
            "job": "archive",
            "status": "ok",
            "topic": args.topic,
            "output": args.output,
        }
        expected = sum(p.end - p.start for p in plans)
        if expected == 0:
            return {
                **summary,
                "run": None,
                "last_run": last,
                "rows": 0,
                "expected": 0,
                "removed_by_retention": 0,
                "seconds": round(time.monotonic() - started, 2),
            }
        number = last + 1
        leftovers = files.clear_run(number)
        _write_run(spark, args, number, plans)
        written = _read_back(spark, files, number)
        _, lows = _cluster_offsets(args.namesrv, args.topic)
        removed = check(plans, written, lows)
        rows = sum(w.rows for w in written.values())
        _stall_if_asked("before-offsets")
        kept = ((previous or {}).get("offsets") or {}).get(args.topic, {})  # queues no longer listed
        document = {
            "topic": args.topic,
            "run": number,
            "at": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "offsets": {args.topic: {**kept, **{p.key: p.end for p in plans}}},
            "started_at": {args.topic: {p.key: p.start for p in plans}},
            "rows": rows,
            "removed_by_retention": {k: v for k, v in removed.items() if v},
        }
        offsets_file = files.commit_offsets(number, document)
    finally:
        spark.stop()
    return {
        **summary,
        "run": number,
        "queues": len(plans),
        "rows": rows,
        "expected": expected,
        "removed_by_retention": sum(removed.values()),
        "removed_by_queue": document["removed_by_retention"],
        "retried_leftovers": leftovers,
        "offsets_file": offsets_file,
        "seconds": round(time.monotonic() - started, 2),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_job("archive", lambda: run(args), (CheckError, OrbitError, ValueError, OSError))


if __name__ == "__main__":
    sys.exit(main())
