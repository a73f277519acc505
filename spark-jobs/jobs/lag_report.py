"""Lag report: per consumer group, topic and queue, the committed offset, the max offset and the
lag at the time of the run, appended to Parquet partitioned by date.

    spark-submit --master local[2] spark-jobs/jobs/lag_report.py \\
        --namesrv 127.0.0.1:9876 --group orders-service --output /data/lag

Each run appends one snapshot (column ``at``, partition column ``date``), so the Parquet
dataset becomes a lag history to chart or query. Stdout gets a summary table (lag per group and
topic) and, last, one JSON line (``{"job": "lag_report", ...}``) for the scheduler. The offsets
come from the brokers in one pass on the driver (a handful of rows per queue); Spark does the
writing, so the output lands wherever Spark can write (local files, HDFS, S3).
Exit status 2 is bad arguments or an unknown group, 1 any other failure.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from datetime import UTC, datetime
from typing import Any

import grpc

from orbitmq.client.admin import Admin
from orbitmq.common.errors import OrbitError
from orbitmq.v1.broker_pb2 import ErrorReason
from orbitmq_spark.jobkit import JobArgumentParser, UsageError, group_arg, run_job, spark_session, topic_arg

SCHEMA = (
    "at timestamp, group string, topic string, broker string, queue int, "
    "committed_offset long, max_offset long, lag long, last_timestamp timestamp, date string"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = JobArgumentParser(
        "lag_report",
        description="Append each consumer group's per-queue committed offset, max offset and lag "
        "to Parquet (partitioned by date); print a summary table and a JSON summary line.",
    )
    parser.add_namesrv()
    parser.add_argument(
        "--group",
        action="append",
        type=group_arg,
        default=[],
        help="a consumer group to report (repeat for several; default: every group the brokers know)",
    )
    parser.add_argument("--topic", type=topic_arg, help="only this topic")
    parser.add_argument(
        "--output", required=True, help="Parquet dataset to append to (a path or URI Spark writes)"
    )
    parser.add_argument(
        "--show",
        type=int,
        default=20,
        help="rows of the summary table, largest lag first (0: none; default 20)",
    )
    args = parser.parse_args(argv)
    if args.show < 0:
        parser.error(f"--show {args.show} must be 0 or more")
    return args


async def collect(namesrv: str, groups: list[str], topic: str | None) -> list[tuple[Any, ...]]:
    """(group, topic, broker, queue, committed, max, lag, last stored ms) of every queue."""
    async with Admin(namesrv) as admin:
        if not groups:
            groups = sorted(g for g in await admin.groups() if not g.startswith("%"))
        rows = []
        for group in groups:
            try:
                progress = await admin.consume_progress(group, topic)
            except OrbitError as error:
                if getattr(error, "reason", None) == ErrorReason.SUBSCRIPTION_GROUP_NOT_EXIST:
                    raise UsageError(f"--group {group!r}: {error}") from None
                raise
            rows.extend(
                (
                    group,
                    q.topic,
                    q.broker_name,
                    q.queue_id,
                    q.consumer_offset,
                    q.broker_offset,
                    q.lag,
                    q.last_timestamp_ms,
                )
                for q in progress
            )
    return sorted(rows)


def summary_table(found: list[tuple[Any, ...]], limit: int) -> str:
    """Lag per group and topic, largest first (computed here: a few rows, no Spark job)."""
    totals: dict[tuple[str, str], list[int]] = {}
    for group, topic, *_, lag, _last in found:
        entry = totals.setdefault((group, topic), [0, 0])
        entry[0] += 1
        entry[1] += lag
    rows = sorted(totals.items(), key=lambda item: (-item[1][1], item[0]))[:limit]
    header = ("group", "topic", "queues", "lag")
    cells = [header, *((g, t, str(q), str(lag)) for (g, t), (q, lag) in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    at = datetime.now(UTC).replace(microsecond=0)
    found = asyncio.run(collect(args.namesrv, args.group, args.topic))

    spark = spark_session("orbitmq-lag-report")
    try:
        data = [
            (
                at,
                group,
                topic,
                broker,
                queue,
                committed,
                maximum,
                lag,
                datetime.fromtimestamp(last_ms / 1000, UTC) if last_ms > 0 else None,
                at.date().isoformat(),
            )
            for group, topic, broker, queue, committed, maximum, lag, last_ms in found
        ]
        frame = spark.createDataFrame(data, SCHEMA).coalesce(1)
        frame.write.mode("append").partitionBy("date").parquet(args.output)
        if args.show and found:
            print(summary_table(found, args.show))
    finally:
        spark.stop()
    return {
        "job": "lag_report",
        "status": "ok",
        "at": at.isoformat(),
        "groups": len({row[0] for row in found}),
        "queues": len(found),
        "total_lag": sum(row[6] for row in found),
        "output": args.output,
        "seconds": round(time.monotonic() - started, 2),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_job("lag_report", lambda: run(args), (OrbitError, ValueError, grpc.aio.AioRpcError))


if __name__ == "__main__":
    sys.exit(main())
