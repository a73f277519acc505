"""Backlog redistribution (the emergency scale-out): copy a consumer group's unconsumed backlog
of a topic onto a topic with more queues, keeping per-sharding-key order, then move the group's
offsets past it so the backlog is consumed once, from the new topic.

    spark-submit --master local[2] spark-jobs/jobs/redistribute_backlog.py \\
        --namesrv 127.0.0.1:9876 --topic Orders --group billing \\
        --target Orders-wide --create-queues 16 --order-by key

The procedure this automates (``docs/how-to/move-backlog-with-spark.md`` walks through it): stop
the group's consumers; copy the backlog onto a topic with several times the queues; start more
consumers of the group on it (they subscribe the target too, and keep the old topic for what
arrives after the copy); scale back once it is drained.

What the job does, in this order (each step is safe to repeat, so a failed run is rerun as is):

1. On the driver, before Spark starts: check the arguments, that the topic and the group exist
   and that no consumer of the group is online (it would commit over the moved offsets); create
   the target (``--create-queues N``: N read/write queues on every broker holding the topic) or
   require that it exists; snapshot, per source queue, the group's committed offset (the
   queue's min offset where it never committed) and the max offset: the backlog is
   ``[committed, max)``, fixed for this run whatever producers send meanwhile.
2. Read back what earlier runs already copied: every copy carries the property
   ``orbitmqCopyFrom`` = ``<topic>/<broker>/<queue>/<offset>`` of its source message (and
   ``orbitmqCopyMsgId``, the source's message id), so a rerun skips those messages — no
   duplicates, no loss. Skipped only when the target is empty.
3. Copy: one Spark task per source queue reads the backlog in queue order (the ``orbitmq`` data
   source) and sends it with batch sends, each message to the target queue its sharding key
   hashes to (crc32 modulo the write queues, the producer's ordered-send rule), a queue's
   buffer always sent before the next batch of that queue. So the messages of a key that sat on
   one source queue land on one target queue in source order. Spark task retries are off
   (``spark.task.maxFailures=1``): a retried task would send its first messages again; the
   rerun of the job is the retry, and it skips what was sent.
4. Give the group an offset on the target's queues where it has none: where this copy (or an
   earlier run's) begins, so a consumer starting there reads the copy instead of jumping to
   the max offset.
5. Move the group's committed offsets on the topic to the snapshot's max offsets (never
   backwards), so its consumers resume after the copied backlog.

Order. ``--order-by`` names what an orderly producer hashed to pick the queue, which the
messages must still carry: ``key`` (the first of the message's keys, the default),
``property:<name>`` (a user property), or ``queue`` (the source queue: its whole backlog on one
target queue — order of everything kept, no spreading). A message without that key is routed
by its source queue, so messages without keys also keep their relative order. The guarantee is
per source queue, as the source's own: when a key's messages sit on several source queues
(queues were added while producing, which moved the key), each queue's part keeps its order.

Size. The source offsets already copied (step 2) are collected on the driver and broadcast to
the tasks, a few dozen bytes per copied message: fine for tens of millions of messages. A batch
send that timed out on the client but was stored may be stored twice (the producer retries);
such a copy carries the same ``orbitmqCopyFrom``, by which consumers can drop it.

Stdout ends with one JSON line: ``{"job": "redistribute_backlog", "status": "ok", "backlog": N,
"copied": sent by this run, "already_copied": skipped, "expired": committed messages retention
removed, "offsets": {"broker:queue": [committed before, after]}, "target_offsets": {where the
group starts on the target}, "consumed_meanwhile": N, ...}``, or ``"status": "error"`` with
``"error"``. Exit status 2 is bad arguments, an unknown topic or group, or online consumers;
1 any other failure (rerun the job as is: it picks up where this one stopped).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import grpc

from orbitmq.client.admin import Admin
from orbitmq.client.channels import Channels
from orbitmq.client.pull_consumer import PullConsumer
from orbitmq.client.queue import MessageQueue
from orbitmq.common.errors import OrbitError
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.v1 import broker_pb2
from orbitmq.v1.broker_pb2 import ErrorReason
from orbitmq_spark.jobkit import JobArgumentParser, UsageError, group_arg, run_job, spark_session, topic_arg

JOB = "redistribute_backlog"
MARK_FROM = "orbitmqCopyFrom"
"""Property of every copy: ``<topic>/<broker>/<queue>/<offset>`` of its source message."""
MARK_MSG_ID = "orbitmqCopyMsgId"
"""Property of every copy: the source message's id (the producer's unique key)."""
MAX_QUEUES = 1024
TARGET_ROUTE_WAIT_S = 30.0
"""How long a created target may take to appear in the name servers' routes."""

QueueId = tuple[str, int]
"""(broker name, queue id) of one queue of a known topic."""


def _order_by(text: str) -> str:
    text = text.strip()
    if text in ("key", "queue"):
        return text
    if text.startswith("property:") and text.removeprefix("property:").strip():
        return "property:" + text.removeprefix("property:").strip()
    raise argparse.ArgumentTypeError(f"{text!r} must be key, queue or property:<name>")


def _count(low: int, high: int) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} must be a whole number from {low} to {high}")
        return value

    parse.__name__ = "count"
    return parse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = JobArgumentParser(
        JOB,
        description="Copy a consumer group's unconsumed backlog of a topic onto a topic with more "
        "queues (per-sharding-key order kept), then move the group's offsets on the topic past "
        "it. Stop the group's consumers first; rerun as is after a failure (copies are marked, "
        "a rerun skips them). Prints a JSON summary line last.",
    )
    parser.add_namesrv()
    parser.add_argument("--topic", required=True, type=topic_arg, help="the backlogged topic")
    parser.add_argument(
        "--group",
        required=True,
        type=group_arg,
        help="the consumer group that lags",
    )
    parser.add_argument(
        "--target",
        required=True,
        type=topic_arg,
        help="the topic to copy the backlog to (more write queues than --topic)",
    )
    parser.add_argument(
        "--create-queues",
        type=_count(1, MAX_QUEUES),
        metavar="N",
        help="create --target with N read/write queues on every broker holding --topic if it does "
        "not exist (default: it must exist)",
    )
    parser.add_argument(
        "--order-by",
        type=_order_by,
        default="key",
        help="what decides order: key (the message's first key; default), property:<name>, or "
        "queue (the source queue); messages without it go by their source queue",
    )
    parser.add_argument(
        "--producer-group",
        type=group_arg,
        default="orbitmq-redistribute",
        help="producer group of the copy's sends (default orbitmq-redistribute)",
    )
    parser.add_argument(
        "--batch-size", type=_count(1, 1024), default=128, help="messages per batch send (default 128)"
    )
    parser.add_argument(
        "--fail-after",
        type=_count(1, 2**62),
        metavar="N",
        help="rehearse a failure: a copy task fails once it has sent N messages (offsets stay unmoved)",
    )
    args = parser.parse_args(argv)
    if args.target == args.topic:
        parser.error(f"--target {args.target!r} must differ from --topic (the copy goes to another topic)")
    return args


# -- the driver's look-ups -----------------------------------------------------------------------


@dataclass
class Plan:
    """What the run copies and where it leaves offsets (all from the snapshot of step 1)."""

    starts: dict[QueueId, int]
    ends: dict[QueueId, int]
    expired: dict[QueueId, int]
    """Per source queue, committed messages that retention already removed (not copyable)."""
    target_queues: int
    target_bounds: dict[QueueId, tuple[int, int]]
    target_committed: dict[QueueId, int]
    created_target: bool
    copied: dict[QueueId, set[int]] = field(default_factory=dict)
    """Source offsets earlier runs already copied (step 2)."""
    target_first: dict[QueueId, int] = field(default_factory=dict)
    """Per target queue, the offset of the first copy of this topic found there (step 2)."""

    @property
    def backlog(self) -> int:
        return sum(self.ends[q] - self.starts[q] for q in self.starts)


def _reason(error: Exception) -> int | None:
    if isinstance(error, RpcFailure):
        return error.reason
    if isinstance(error, grpc.aio.AioRpcError):
        failure = failure_of(error)
        return failure.reason if failure is not None else None
    return getattr(error, "reason", None)


async def _route_masters(admin: Admin, topic: str, option: str) -> dict[str, str]:
    """{broker name: master address} of ``topic``; an unknown topic is a usage error."""
    try:
        route = await admin.route(topic)
    except (OrbitError, grpc.aio.AioRpcError) as error:
        if _reason(error) == ErrorReason.TOPIC_NOT_EXIST:
            raise UsageError(f"{option} {topic!r}: the topic does not exist") from None
        raise
    return {d.broker_name: d.broker_addrs[0] for d in route.broker_datas if 0 in d.broker_addrs}


async def _online_consumers(namesrv: str, group: str, addresses: list[str]) -> list[str]:
    channels = Channels(namesrv)
    try:
        found: set[str] = set()
        for address in addresses:
            reply = await channels.broker(address).GetConsumerList(
                broker_pb2.GetConsumerListRequest(consumer_group=group), timeout=10
            )
            found.update(reply.client_ids)
        return sorted(found)
    finally:
        await channels.close()


async def _ensure_target(admin: Admin, args: argparse.Namespace, masters: dict[str, str]) -> bool:
    """Create the target if asked and missing; True when this run created it."""
    try:
        await admin.route(args.target)
        exists = True
    except (OrbitError, grpc.aio.AioRpcError) as error:
        if _reason(error) != ErrorReason.TOPIC_NOT_EXIST:
            raise
        exists = False
    if not exists and args.create_queues is None:
        raise UsageError(
            f"--target {args.target!r}: the topic does not exist; create it or pass --create-queues N"
        )
    if args.create_queues is None:
        return False
    source = sum(q.write_queue_nums for q in (await admin.route(args.topic)).queue_datas)
    if args.create_queues * len(masters) <= source:
        raise UsageError(
            f"--create-queues {args.create_queues} on {len(masters)} broker(s) gives --target "
            f"{args.create_queues * len(masters)} queues, --topic {args.topic!r} has {source}: "
            "the target must have more queues to spread the backlog over"
        )
    created = False
    for address in masters.values():
        for report in await admin.create_topic(
            args.target,
            read_queue_nums=args.create_queues,
            write_queue_nums=args.create_queues,
            broker_addr=address,
        ):
            if report.outcome == "exists_different":
                have = report.change.before
                raise UsageError(
                    f"--target {args.target!r} exists on {address} with {have.write_queue_nums} write "
                    f"queues, not the {args.create_queues} of --create-queues; drop --create-queues "
                    "to use it as it is"
                )
            created = created or report.outcome == "created"
    deadline = time.monotonic() + TARGET_ROUTE_WAIT_S
    while True:  # brokers register the new topic with the name servers on their next beat
        try:
            route = await admin.route(args.target)
            if {q.broker_name for q in route.queue_datas} >= set(masters):
                return created
        except (OrbitError, grpc.aio.AioRpcError) as error:
            if _reason(error) != ErrorReason.TOPIC_NOT_EXIST:
                raise
        if time.monotonic() > deadline:
            raise OrbitError(
                f"topic {args.target} was created but no name server routes it "
                f"after {TARGET_ROUTE_WAIT_S:.0f} s"
            )
        await asyncio.sleep(0.2)


async def prepare(args: argparse.Namespace) -> Plan:
    """Step 1: checks, the target, and the snapshot of the backlog (see the module docstring)."""
    async with Admin(args.namesrv) as admin:
        masters = await _route_masters(admin, args.topic, "--topic")
        try:
            await admin.consume_progress(args.group, args.topic)
        except (OrbitError, grpc.aio.AioRpcError) as error:
            if _reason(error) == ErrorReason.SUBSCRIPTION_GROUP_NOT_EXIST:
                raise UsageError(f"--group {args.group!r}: {error}") from None
            raise
        online = await _online_consumers(args.namesrv, args.group, list(masters.values()))
        if online:
            raise UsageError(
                f"--group {args.group!r} has {len(online)} consumer(s) online ({', '.join(online[:3])}); "
                "stop them first, or they commit over the moved offsets"
            )
        created = await _ensure_target(admin, args, masters)
    async with PullConsumer(args.group, args.namesrv) as consumer:
        source = await consumer.queues(args.topic, refresh=True)
        target = await consumer.queues(args.target, refresh=True)

        async def look(mq: MessageQueue) -> tuple[int, int, int]:
            low, high, committed = await asyncio.gather(
                consumer.min_offset(mq), consumer.max_offset(mq), consumer.committed_offset(mq)
            )
            return low, high, committed

        source_looks = await asyncio.gather(*(look(mq) for mq in source))
        target_looks = await asyncio.gather(*(look(mq) for mq in target))
    if len(target) <= len(source):
        raise UsageError(
            f"--target {args.target!r} has {len(target)} queues, --topic {args.topic!r} {len(source)}: "
            "the target must have more queues to spread the backlog over"
        )
    starts, ends, expired = {}, {}, {}
    for mq, (low, high, committed) in zip(source, source_looks, strict=True):
        queue = (mq.broker_name, mq.queue_id)
        start = low if committed < 0 else min(committed, high)
        expired[queue] = max(0, low - start)
        starts[queue], ends[queue] = max(start, low), high
    return Plan(
        starts=starts,
        ends=ends,
        expired={q: n for q, n in expired.items() if n},
        target_queues=len(target),
        target_bounds={
            (mq.broker_name, mq.queue_id): (lo, hi)
            for mq, (lo, hi, _) in zip(target, target_looks, strict=True)
        },
        target_committed={
            (mq.broker_name, mq.queue_id): c for mq, (_, _, c) in zip(target, target_looks, strict=True)
        },
        created_target=created,
    )


# -- Spark ---------------------------------------------------------------------------------------


def _marker(topic: str, broker: str, queue: int, offset: int) -> str:
    return f"{topic}/{broker}/{queue}/{offset}"


def parse_marker(text: str) -> tuple[str, str, int, int] | None:
    """``(topic, broker, queue, offset)`` of an ``orbitmqCopyFrom`` value, None if malformed."""
    head, _, offset = text.rpartition("/")
    head, _, queue = head.rpartition("/")
    topic, _, broker = head.partition("/")
    if not topic or not broker or not queue.isdigit() or not offset.isdigit():
        return None
    return topic, broker, int(queue), int(offset)


def read_copied(spark: Any, args: argparse.Namespace, plan: Plan) -> None:
    """Step 2: what earlier runs copied, from the target's markers (read with the data source)."""
    if all(high <= low for low, high in plan.target_bounds.values()):
        return
    from pyspark.sql import functions as F

    found = (
        spark.read.format("orbitmq")
        .option("namesrv", args.namesrv)
        .option("topic", args.target)
        .load()
        .select("broker", "queue", "queue_offset", F.col("properties")[MARK_FROM].alias("mark"))
        .where(F.col("mark").startswith(f"{args.topic}/"))
        .collect()
    )
    for row in found:
        source = parse_marker(row.mark)
        if source is None or source[0] != args.topic:
            continue
        plan.copied.setdefault((source[1], source[2]), set()).add(source[3])
        first = plan.target_first.get((row.broker, row.queue))
        if first is None or row.queue_offset < first:
            plan.target_first[(row.broker, row.queue)] = row.queue_offset


def _offsets_json(topic: str, offsets: dict[QueueId, int]) -> str:
    return json.dumps({topic: {f"{b}:{q}": o for (b, q), o in sorted(offsets.items())}})


def copy_task(args: argparse.Namespace, plan: Plan, copied: Any) -> Any:
    """The function each task runs over its source queue's rows (in queue order); it returns
    ``(broker, queue, sent, skipped)`` per source queue. Rows rather than Arrow batches:
    ``mapInArrow`` would need pandas on every executor for nothing."""
    topic, target, order_by = args.topic, args.target, args.order_by
    starts, ends, fail_after = plan.starts, plan.ends, args.fail_after

    def sharding_key(broker: str, queue: int, keys: list[str], properties: dict[str, str]) -> str:
        if order_by == "key" and keys:
            return keys[0]
        if order_by.startswith("property:"):
            value = properties.get(order_by.removeprefix("property:"))
            if value is not None:
                return value
        return f"{topic}/{broker}:{queue}"  # no key: keep the source queue's order

    def run(rows: Iterator[Any]) -> Iterator[tuple[str, int, int, int]]:
        from orbitmq.client.message import Message
        from orbitmq_spark.brokers import BatchSender
        from orbitmq_spark.options import WriteOptions

        sender = BatchSender(
            WriteOptions(args.namesrv, target, producer_group=args.producer_group, batch_size=args.batch_size)
        )
        done = copied.value
        counts: dict[QueueId, list[int]] = {}
        try:
            for row in rows:
                queue, offset = (row.broker, row.queue), row.queue_offset
                if queue not in starts or not starts[queue] <= offset < ends[queue]:
                    continue  # a queue added or a message stored after the snapshot
                count = counts.setdefault(queue, [0, 0])
                if offset in done.get(queue, ()):
                    count[1] += 1
                    continue
                keys = list(row.keys or ())
                properties = dict(row.properties or {})
                properties[MARK_FROM] = _marker(topic, row.broker, row.queue, offset)
                properties[MARK_MSG_ID] = row.msg_id
                message = Message(
                    target, bytes(row.body), tags=row.tags, keys=keys or None, properties=properties
                )
                sender.add(message, sharding_key(row.broker, row.queue, keys, properties))
                count[0] += 1
                if fail_after is not None and sender.sent >= fail_after:
                    raise RuntimeError(f"--fail-after {fail_after}: failing the copy task on purpose")
            sender.finish()
        finally:
            sender.close()
        return iter([(b, q, sent, skipped) for (b, q), (sent, skipped) in counts.items()])

    return run


def copy_backlog(spark: Any, args: argparse.Namespace, plan: Plan) -> tuple[int, int]:
    """Step 3; returns (messages sent, messages skipped as already copied)."""
    source = (
        spark.read.format("orbitmq")
        .option("namesrv", args.namesrv)
        .option("topic", args.topic)
        .option("startingOffsets", _offsets_json(args.topic, plan.starts))
        .option("endingOffsets", _offsets_json(args.topic, plan.ends))
        .load()
        .select("broker", "queue", "queue_offset", "msg_id", "keys", "tags", "properties", "body")
    )
    copied = spark.sparkContext.broadcast(plan.copied)
    stats = source.rdd.mapPartitions(copy_task(args, plan, copied)).collect()
    return sum(s[2] for s in stats), sum(s[3] for s in stats)


# -- offsets -------------------------------------------------------------------------------------


async def move_offsets(args: argparse.Namespace, plan: Plan) -> dict[str, Any]:
    """Steps 4 and 5: the group's start on the target, then its offsets on the topic."""
    async with PullConsumer(args.group, args.namesrv) as consumer:
        target_set = {}
        for mq in await consumer.queues(args.target, refresh=True):
            queue = (mq.broker_name, mq.queue_id)
            if await consumer.committed_offset(mq) >= 0:
                continue  # the group already reads this queue: never move it
            low, high = plan.target_bounds.get(queue, (0, 0))
            start = min(plan.target_first.get(queue, high), high)
            await consumer.commit_offset(mq, max(start, low))
            target_set[f"{mq.broker_name}:{mq.queue_id}"] = max(start, low)
        moved, consumed_meanwhile = {}, 0
        for (broker, queue_id), end in sorted(plan.ends.items()):
            mq = MessageQueue(args.topic, broker, queue_id)
            now = await consumer.committed_offset(mq)
            consumed_meanwhile += max(0, min(now, end) - plan.starts[(broker, queue_id)])
            if now < end:
                await consumer.commit_offset(mq, end)
            moved[f"{broker}:{queue_id}"] = [now, max(now, end)]
    return {"target_offsets": target_set, "offsets": moved, "consumed_meanwhile": consumed_meanwhile}


# -- the job -------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    plan = asyncio.run(prepare(args))
    sent = skipped = 0
    if plan.backlog:  # nothing to copy (a rerun after success): no Spark at all
        import orbitmq_spark

        # Task retries off: the job's rerun is the retry (module docstring).
        spark = spark_session("orbitmq-redistribute-backlog", {"spark.task.maxFailures": "1"})
        try:
            orbitmq_spark.register(spark)
            read_copied(spark, args, plan)
            sent, skipped = copy_backlog(spark, args, plan)
        finally:
            spark.stop()
    offsets = asyncio.run(move_offsets(args, plan))
    return {
        "job": JOB,
        "status": "ok",
        "topic": args.topic,
        "target": args.target,
        "group": args.group,
        "created_target": plan.created_target,
        "source_queues": len(plan.starts),
        "target_queues": plan.target_queues,
        "order_by": args.order_by,
        "backlog": plan.backlog,
        "copied": sent,
        "already_copied": skipped,
        "expired": sum(plan.expired.values()),
        **offsets,
        "seconds": round(time.monotonic() - started, 2),
    }


def headline(error: BaseException) -> str:
    """What went wrong in one line: for a failed Spark task, the task's own exception (the last
    ``SomeError: message`` line of the worker's traceback), not Spark's wrapper text."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception): ", line)]
    return (raised[-1] if raised else lines[0])[:2000]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # Spark's errors too: the JSON line is the scheduler's interface
    return run_job(JOB, lambda: run(args), (Exception,), describe=headline)


if __name__ == "__main__":
    sys.exit(main())
