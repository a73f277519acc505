"""Stream copy: a streaming query that copies a topic's messages into a Parquet directory, with
its read offsets per queue in a checkpoint, so it can be killed at any moment and restarted.

    spark-submit --master local[2] spark-jobs/jobs/stream_copy.py \\
        --namesrv 127.0.0.1:9876 --topic Orders --output /data/orders --checkpoint /data/orders-ckpt

Exactly once, without coordination: each micro-batch's queue ranges go to the checkpoint's
offset log before the batch runs, and Spark's file sink lists the files of a batch in
``<output>/_spark_metadata`` only when the batch is complete. A killed query leaves at most
files no log names; restarted on the same checkpoint it runs the logged but uncommitted batch
again over the same ranges, and readers of ``<output>`` (``spark.read.parquet`` reads the log)
see each message once. Queues added to the topic are picked up at the next trigger.

Without ``--available-now`` the query runs until it is stopped (killing it is safe); with it,
the query reads what the queues held at its start (in batches of ``--max-offsets-per-trigger``)
and stops. Stdout ends with one JSON line (``{"job": "stream_copy", ...}``) when the query ends.
Exit status 2 is bad arguments or an unknown topic, 1 a failed query.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from orbitmq.common.errors import OrbitError
from orbitmq_spark.jobkit import JobArgumentParser, UsageError, run_job, spark_session, topic_arg


class QueryFailedError(Exception):
    """The streaming query stopped with an error (Spark's message): exit status 1."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = JobArgumentParser(
        "stream_copy",
        description="Copy a topic's messages into Parquet with a checkpointed streaming query "
        "(exactly once across kills and restarts); print a JSON summary line when it ends.",
    )
    parser.add_namesrv()
    parser.add_argument("--topic", required=True, type=topic_arg, help="the topic to copy")
    parser.add_argument("--output", required=True, help="Parquet directory of the file sink")
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint directory")
    parser.add_argument(
        "--starting-offsets",
        choices=("earliest", "latest"),
        default="earliest",
        help="where a new checkpoint starts (a restart resumes from its checkpoint; default earliest)",
    )
    parser.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        default=None,
        help="queue slots per micro-batch over all queues (default: everything available)",
    )
    parser.add_argument(
        "--trigger-ms", type=int, default=1000, help="milliseconds between micro-batches (default 1000)"
    )
    parser.add_argument("--available-now", action="store_true", help="read what is there now, then stop")
    args = parser.parse_args(argv)
    if args.max_offsets_per_trigger is not None and args.max_offsets_per_trigger < 1:
        parser.error(f"argument --max-offsets-per-trigger: {args.max_offsets_per_trigger} must be 1 or more")
    if args.trigger_ms < 0:
        parser.error(f"argument --trigger-ms: {args.trigger_ms} must be 0 or more")
    return args


def _check_topic(namesrv: str, topic: str) -> None:
    """An unknown topic or a silent name server fails before Spark starts."""
    from orbitmq_spark.brokers import ClusterView
    from orbitmq_spark.options import OptionError, parse_read_options

    try:
        view = ClusterView(parse_read_options({"namesrv": namesrv, "topic": topic}, streaming=True))
        try:
            view.queues(refresh=True)
        finally:
            view.close()
    except OptionError as error:
        raise UsageError(f"--{error.option}: {error}") from None


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    _check_topic(args.namesrv, args.topic)
    import orbitmq_spark

    spark = spark_session(f"orbitmq-stream-copy-{args.topic}")
    orbitmq_spark.register(spark)
    try:
        reader = (
            spark.readStream.format("orbitmq")
            .option("namesrv", args.namesrv)
            .option("topic", args.topic)
            .option("startingOffsets", args.starting_offsets)
        )
        if args.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        writer = (
            reader.load()
            .writeStream.format("parquet")
            .option("path", args.output)
            .option("checkpointLocation", args.checkpoint)
            .queryName(f"stream_copy_{args.topic}")
        )
        if args.available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{args.trigger_ms} milliseconds")
        query = writer.start()
        from pyspark.errors import StreamingQueryException

        try:
            query.awaitTermination()
        except StreamingQueryException as error:
            raise QueryFailedError(str(error)) from None
        # Spark keeps the last 100 progress reports (spark.sql.streaming.numRecentProgressUpdates).
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        last = query.lastProgress
    finally:
        spark.stop()
    return {
        "job": "stream_copy",
        "status": "ok",
        "topic": args.topic,
        "output": args.output,
        "batches_with_rows": len(progress),
        "rows": sum(p["numInputRows"] for p in progress),
        "end_offsets": json.loads(last["sources"][0]["endOffset"]) if last else None,
        "seconds": round(time.monotonic() - started, 2),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return run_job("stream_copy", lambda: run(args), (QueryFailedError, OrbitError, ValueError, OSError))


if __name__ == "__main__":
    sys.exit(main())
