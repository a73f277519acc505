"""``spark-jobs/jobs/redistribute_backlog.py`` as an operator runs it (``spark-submit --master
local[2]`` against a real cluster): the target topic checked message by message against the
group's backlog on the source (each copy once, its content, per-key order), the group's offsets
on both topics, a consumer of the group reading the copy and nothing more, and a rerun after a
failed copy ending with every message exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from clusterkit import FAST, Collector, eventually
from sparkkit import ThreadCluster

from orbitmq.client.admin import Admin
from orbitmq.client.consumer import PushConsumer
from orbitmq.client.consumer_types import ConsumeStatus
from orbitmq.client.message import Message
from orbitmq.client.pull_consumer import PullConsumer
from orbitmq.client.queue import MessageQueue
from orbitmq.store.record import StoredMessage

pytestmark = pytest.mark.timeout(300)

JOB = Path(__file__).resolve().parents[3] / "spark-jobs" / "jobs" / "redistribute_backlog.py"
BIN = Path(sys.executable).parent
MARK = "orbitmqCopyFrom"
Source = tuple[str, int, int]
"""(broker, queue, offset) of a message of the source topic."""


def _run(args: list[str], *, submit: bool = True) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    command = (
        [str(BIN / "spark-submit"), "--master", "local[2]", "--conf", "spark.ui.enabled=false", str(JOB)]
        if submit
        else [sys.executable, str(JOB)]
    )
    return subprocess.run([*command, *args], env=env, capture_output=True, text=True, timeout=240)


def _why(done: subprocess.CompletedProcess[str]) -> str:
    """The job's own error lines and the end of Spark's log, for a failed assertion."""
    mine = [line for line in done.stderr.splitlines() if "redistribute_backlog.py: error" in line]
    return "\n".join([*mine, done.stdout[-1000:], done.stderr[-2500:]])


def _summary(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    return json.loads(done.stdout.strip().splitlines()[-1])


def _read(cluster: ThreadCluster, topic: str) -> list[tuple[str, StoredMessage]]:
    """(broker, message) of every message of ``topic``, each queue in offset order."""

    async def read() -> list[tuple[str, StoredMessage]]:
        found = []
        async with PullConsumer("spark-test-check", cluster.namesrv) as consumer:
            for mq in await consumer.queues(topic, refresh=True):
                offset, end = await consumer.min_offset(mq), await consumer.max_offset(mq)
                while offset < end:
                    result = await consumer.pull(mq, offset, max_nums=256)
                    found.extend((mq.broker_name, m) for m in result.messages)
                    offset = result.next_begin_offset
        return found

    return cluster.run(read())


def _offsets(cluster: ThreadCluster, group: str, topic: str) -> dict[tuple[str, int], tuple[int, int]]:
    """(committed offset of ``group``, max offset) per queue of ``topic``."""

    async def look() -> dict[tuple[str, int], tuple[int, int]]:
        async with PullConsumer(group, cluster.namesrv) as consumer:
            return {
                (mq.broker_name, mq.queue_id): (
                    await consumer.committed_offset(mq),
                    await consumer.max_offset(mq),
                )
                for mq in await consumer.queues(topic, refresh=True)
            }

    return cluster.run(look())


def _commit(cluster: ThreadCluster, group: str, topic: str, offsets: dict[tuple[str, int], int]) -> None:
    async def commit() -> None:
        async with PullConsumer(group, cluster.namesrv) as consumer:
            for (broker, queue), offset in offsets.items():
                await consumer.commit_offset(MessageQueue(topic, broker, queue), offset)

    cluster.run(commit())


def _wait_for_queues(cluster: ThreadCluster, topic: str, count: int) -> None:
    async def routed() -> None:
        async with PullConsumer("spark-test-check", cluster.namesrv) as consumer:
            await eventually(
                lambda: _count_queues(consumer, topic, count),
                20,
                lambda: f"{topic} routed with {count} queues",
            )

    cluster.run(routed())


async def _count_queues(consumer: PullConsumer, topic: str, count: int) -> bool:
    return len(await consumer.queues(topic, refresh=True)) == count


def _backlog(cluster: ThreadCluster, topic: str, group: str) -> dict[Source, StoredMessage]:
    """The source messages from the group's committed offsets to the max offsets."""
    committed = _offsets(cluster, group, topic)
    return {
        (broker, m.queue_id, m.queue_offset): m
        for broker, m in _read(cluster, topic)
        if m.queue_offset >= committed[(broker, m.queue_id)][0]
    }


def _check_copy(
    cluster: ThreadCluster, target: str, backlog: dict[Source, StoredMessage], order_key: str
) -> list[tuple[str, StoredMessage]]:
    """The target holds each backlog message exactly once, with its content, and the messages
    of one order key from one source queue sit on one target queue in source order."""
    copies = _read(cluster, target)
    sources: list[Source] = []
    for _, copy in copies:
        topic, broker, queue, offset = copy.properties[MARK].rsplit("/", 3)
        assert topic != target
        sources.append((broker, int(queue), int(offset)))
    assert len(sources) == len(set(sources)), "a message was copied twice"
    assert set(sources) == set(backlog), (
        f"missing {sorted(set(backlog) - set(sources))[:5]}, extra {sorted(set(sources) - set(backlog))[:5]}"
    )
    placed: dict[str, list[tuple[tuple[str, int], int, Source]]] = {}
    for (target_broker, copy), source in zip(copies, sources, strict=True):
        original = backlog[source]
        assert copy.body == original.body
        assert copy.tags == original.tags
        assert list(copy.keys) == list(original.keys)
        assert copy.properties["seq"] == original.properties["seq"]
        assert copy.properties["orbitmqCopyMsgId"] == original.properties["UNIQ_KEY"]
        key = (list(original.keys) or [None])[0] if order_key == "key" else original.properties.get(order_key)
        group = key if key else f"unkeyed {source[0]}:{source[1]}"
        placed.setdefault(group, []).append(((target_broker, copy.queue_id), copy.queue_offset, source))
    for group, where in placed.items():
        assert len({queue for queue, _, _ in where}) == 1, f"{group} spread over target queues: {where}"
        in_target_order = [source for _, _, source in sorted(where, key=lambda w: w[1])]
        for source_queue in {s[:2] for s in in_target_order}:
            offsets = [s[2] for s in in_target_order if s[:2] == source_queue]
            assert offsets == sorted(offsets), f"{group} from {source_queue} out of order: {offsets}"
    return copies


def test_help_bad_arguments_and_unknown_names_fail_before_spark(cluster: ThreadCluster) -> None:
    shown = _run(["--help"], submit=False)
    assert shown.returncode == 0 and "--target" in shown.stdout and "--create-queues" in shown.stdout
    base = ["--namesrv", cluster.namesrv, "--group", "spark-redist-bad"]
    bad = _run([*base, "--topic", "A", "--target", "B", "--create-queues", "0"], submit=False)
    assert bad.returncode == 2 and "--create-queues" in bad.stderr and "from 1 to 1024" in bad.stderr
    same = _run([*base, "--topic", "A", "--target", "A"], submit=False)
    assert same.returncode == 2 and "must differ from --topic" in same.stderr
    order = _run([*base, "--topic", "A", "--target", "B", "--order-by", "header"], submit=False)
    assert order.returncode == 2 and "key, queue or property:<name>" in order.stderr

    missing = _run([*base, "--topic", "NoSuchRedistTopic", "--target", "B"], submit=False)
    assert missing.returncode == 2, missing.stderr
    assert "--topic 'NoSuchRedistTopic': the topic does not exist" in _summary(missing)["error"]

    cluster.create_topic("SparkRedistBadInput", 1)
    cluster.send([Message("SparkRedistBadInput", b"x")])
    unknown = _run(
        [*base, "--topic", "SparkRedistBadInput", "--target", "B", "--create-queues", "4"], submit=False
    )
    assert unknown.returncode == 2 and "spark-redist-bad" in _summary(unknown)["error"], unknown.stderr
    queues = cluster.queues("SparkRedistBadInput")
    _commit(
        cluster, "spark-redist-bad", "SparkRedistBadInput", {(q.broker_name, q.queue_id): 0 for q in queues}
    )
    no_target = _run(
        [*base, "--topic", "SparkRedistBadInput", "--target", "NoSuchRedistTarget"], submit=False
    )
    assert no_target.returncode == 2, no_target.stderr
    assert "--target 'NoSuchRedistTarget': the topic does not exist" in _summary(no_target)["error"]
    narrow = _run(
        [*base, "--topic", "SparkRedistBadInput", "--target", "SparkRedistNarrow", "--create-queues", "1"],
        submit=False,
    )
    assert narrow.returncode == 2 and "the target must have more queues" in _summary(narrow)["error"]

    async def while_consuming() -> subprocess.CompletedProcess[str]:
        consumer = PushConsumer("spark-redist-bad", cluster.namesrv, listener=lambda _: None, settings=FAST)
        consumer.subscribe("SparkRedistBadInput")
        await consumer.start()
        try:
            return await asyncio.to_thread(
                _run,
                [*base, "--topic", "SparkRedistBadInput", "--target", "B", "--create-queues", "4"],
                submit=False,
            )
        finally:
            await consumer.close()

    online = asyncio.run(while_consuming())
    assert online.returncode == 2 and "consumer(s) online" in _summary(online)["error"], _why(online)

    async def topics() -> list[str]:
        async with Admin(cluster.namesrv) as admin:
            return await admin.topic_list()

    assert not {"B", "SparkRedistNarrow"} & set(cluster.run(topics()))  # refused before creating


def test_redistribution_copies_the_backlog_once_in_key_order_and_moves_the_offsets(
    cluster: ThreadCluster,
) -> None:
    topic, target, group = "SparkRedistFrom", "SparkRedistTo", "spark-redist-group"
    cluster.create_topic(topic, 1)  # two queues over two brokers
    keys = [f"order-{k}" for k in range(8)]

    def produce(first: int, count: int) -> None:
        messages, sharding = [], {}
        for i in range(first, first + count):
            keyed = i % 10 != 9  # one in ten has no key: routed round robin
            key = keys[i % len(keys)]
            messages.append(
                Message(
                    topic,
                    f"body-{i}".encode(),
                    tags="even" if i % 2 == 0 else "odd",
                    keys=[key, f"id-{i}"] if keyed else None,
                    properties={"seq": str(i)},
                )
            )
            if keyed:
                sharding[len(messages) - 1] = key
        cluster.send(messages, sharding=sharding)

    produce(0, 60)
    cluster.create_topic(topic, 2)  # a queue added on each broker mid-way: some keys move
    _wait_for_queues(cluster, topic, 4)
    produce(60, 60)
    before = _offsets(cluster, group, topic)
    _commit(cluster, group, topic, {q: high // 3 for q, (_, high) in before.items()})
    backlog = _backlog(cluster, topic, group)
    assert 60 < len(backlog) < 120

    done = _run(
        [
            "--namesrv",
            cluster.namesrv,
            "--topic",
            topic,
            "--group",
            group,
            "--target",
            target,
            "--create-queues",
            "4",
            "--batch-size",
            "8",
        ]
    )
    assert done.returncode == 0, _why(done)
    summary = _summary(done)
    assert summary["status"] == "ok" and summary["created_target"] is True
    assert summary["backlog"] == summary["copied"] == len(backlog) and summary["already_copied"] == 0
    assert (summary["source_queues"], summary["target_queues"]) == (4, 8)

    copies = _check_copy(cluster, target, backlog, "key")
    assert len({(b, m.queue_id) for b, m in copies}) > 4  # spread over more queues than the source had
    after = _offsets(cluster, group, topic)
    assert {q: committed for q, (committed, _) in after.items()} == {
        q: high for q, (_, high) in before.items()
    }
    assert all(committed == 0 for committed, _ in _offsets(cluster, group, target).values())

    # The group's consumers, now subscribed to both topics, read the copy once — one message
    # failed on its first delivery comes back through the group's retry topic — and nothing of
    # the source's backlog again.
    collector = Collector()
    failed_once: set[str] = set()

    def fail_one(message: StoredMessage) -> ConsumeStatus | None:
        if message.properties.get("seq") == "100" and "100" not in failed_once:
            failed_once.add("100")
            return ConsumeStatus.RECONSUME_LATER
        return None

    async def consume() -> None:
        consumer = PushConsumer(
            group, cluster.namesrv, listener=collector.listener("c", before=fail_one), settings=FAST
        )
        consumer.subscribe(topic)
        consumer.subscribe(target)
        await consumer.start()
        try:
            await collector.wait_for(len(backlog) + 1, within=60)
            await collector.settle(2.0)
        finally:
            await consumer.close()

    asyncio.run(consume())  # a loop of its own: asyncio.run ends the consumer's leftover tasks
    delivered = [d.message for d in collector.deliveries]
    assert all(m.topic in (target, f"%RETRY%{group}") for m in delivered), {m.topic for m in delivered}
    seqs = sorted(int(m.properties["seq"]) for m in delivered)
    expected = sorted([int(m.properties["seq"]) for m in backlog.values()] + [100])
    assert seqs == expected


def test_a_rerun_after_a_failed_copy_copies_the_rest_without_duplicates(cluster: ThreadCluster) -> None:
    topic, target, group = "SparkRedistRetryFrom", "SparkRedistRetryTo", "spark-redist-retry"
    cluster.create_topic(topic, 1)
    cluster.create_topic(target, 3)  # the target exists: no --create-queues
    messages = [
        Message(topic, f"r-{i}".encode(), tags="t", properties={"seq": str(i), "shard": f"s{i % 5}"})
        for i in range(300)
    ]
    cluster.send(messages, sharding={i: f"s{i % 5}" for i in range(300)})
    before = _offsets(cluster, group, topic)
    _commit(cluster, group, topic, {q: 20 for q in before})
    backlog = _backlog(cluster, topic, group)
    args = [
        "--namesrv",
        cluster.namesrv,
        "--topic",
        topic,
        "--group",
        group,
        "--target",
        target,
        "--order-by",
        "property:shard",
        "--batch-size",
        "4",
    ]

    failed = _run([*args, "--fail-after", "40"])
    assert failed.returncode == 1, _why(failed)
    assert "--fail-after 40" in _summary(failed)["error"]
    partial = [m.properties[MARK] for _, m in _read(cluster, target)]
    assert len(partial) == len(set(partial)) and 40 <= len(partial) < len(backlog)
    assert {q: c for q, (c, _) in _offsets(cluster, group, topic).items()} == {q: 20 for q in before}

    done = _run(args)
    assert done.returncode == 0, _why(done)
    summary = _summary(done)
    assert summary["already_copied"] == len(partial) and summary["created_target"] is False
    assert summary["copied"] + summary["already_copied"] == summary["backlog"] == len(backlog)
    _check_copy(cluster, target, backlog, "shard")
    # The group starts on the target where the first run's copy began, not at its max offsets.
    assert {c for c, _ in _offsets(cluster, group, target).values()} == {0}
    assert {q: c for q, (c, _) in _offsets(cluster, group, topic).items()} == {
        q: high for q, (_, high) in before.items()
    }

    again = _run(args)  # nothing left: the offsets moved, the copy stays as it is
    assert again.returncode == 0 and _summary(again)["backlog"] == 0, _why(again)
    assert len(_read(cluster, target)) == len(backlog)
