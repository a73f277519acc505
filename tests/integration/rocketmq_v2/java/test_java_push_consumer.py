"""The official RocketMQ 5 Java client's PushConsumer through ``orbitmq proxy``: concurrent
consumption of thousands of random bodies (the client checks every body's digest: none may look
corrupted, none dead-lettered), tag and SQL92 subscriptions, and FIFO consumption of message
groups with a failed message retried in place.

Each test names the protocol behaviour it checks; one JVM runs each client's whole scenario.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from javakit import FORMER_VICTIM, body_of, dead_letters, random_bodies, sha256, spec
from v2kit import V2Cluster, v2_cluster

from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.interop import java_client
from orbitmq.v1 import broker_pb2

pytestmark = pytest.mark.timeout(180)

RANDOM_BODIES = 3_000


async def forwarded_to_dead_letters(cluster: V2Cluster) -> float:
    return await cluster.metric(
        "orbitmq_proxy_requests_total", rpc="ForwardMessageToDeadLetterQueue", code="OK"
    )


async def test_push_consumer_gets_thousands_of_random_bodies_intact(tmp_path: Path) -> None:
    """SendMessage then ReceiveMessage/AckMessage by a concurrent PushConsumer (QueryAssignment,
    8 consumption threads), for 3 000 bodies of random sizes (1 byte to 16 KiB) and contents,
    ``d-TagB-1`` among them: the Java client verifies each body against the digest the proxy
    sends (a mismatch is "corrupted": the client dead-letters it unseen by the listener), so
    every body must reach the listener intact, and nothing may be forwarded to the dead letters."""
    bodies = random_bodies(RANDOM_BODIES, seed=25)
    assert FORMER_VICTIM in bodies
    async with v2_cluster(tmp_path / "cluster") as cluster:
        sent = await java_client.run(
            tmp_path / "java", "send", endpoint=cluster.endpoint, topic="JRandom", in_flight=32,
            messages=[spec("JRandom", body, tag=f"Tag{'ABC'[i % 3]}") for i, body in enumerate(bodies)],
        )  # fmt: skip
        assert (sent.summary["sent"], sent.summary["failed"]) == (RANDOM_BODIES, 0)
        consumed = await java_client.run(
            tmp_path / "java", "push-consume", endpoint=cluster.endpoint, group="j-push-random",
            topic="JRandom", threads=8, count=RANDOM_BODIES, settle_ms=1_000, timeout_s=120,
        )  # fmt: skip
        dead = await dead_letters(cluster, "j-push-random")
        forwarded = await forwarded_to_dead_letters(cluster)
    deliveries = consumed.of("consumed")
    assert [e for e in deliveries if e["corrupted"]] == []
    got = Counter(e["body_sha256"] for e in deliveries)
    missing = [body[:40] for body in bodies if sha256(body) not in got]
    assert missing == [], f"{len(missing)} bodies never reached the listener (judged corrupted?)"
    assert set(got) == {sha256(body) for body in bodies}
    assert {e["result"] for e in deliveries} == {"SUCCESS"}
    sizes = {e["body_sha256"]: e["body_size"] for e in deliveries}
    assert all(sizes[sha256(body)] == len(body) for body in bodies)
    assert (dead, forwarded) == ([], 0)
    assert set(e["message_id"] for e in sent.of("sent")) == set(e["message_id"] for e in deliveries)


async def test_push_consumers_with_tag_and_sql92_filters_get_exactly_their_messages(tmp_path: Path) -> None:
    """QueryAssignment and ReceiveMessage with a TAG filter (``TagB``) and with a SQL92 filter
    (``a > 5 AND region = 'eu'``): each concurrent PushConsumer's listener is handed exactly
    the messages that match (the broker filters; nothing else arrives within 1.5 s)."""
    async with v2_cluster(tmp_path / "cluster") as cluster:
        messages = [
            Message(
                "JPushFilter", f"d-Tag{'ABC'[i % 3]}-{i}".encode(), tags=f"Tag{'ABC'[i % 3]}",
                properties={"a": str(i), "region": "eu" if i % 2 else "us"},
            )
            for i in range(15)
        ] + [Message("JPushFilter", b"bare", tags="TagB")]  # fmt: skip
        async with Producer("java-interop-sender", cluster.namesrv.address) as producer:
            await asyncio.gather(*(producer.send(message) for message in messages))
        tagged = sorted(m.body for m in messages if m.tags == "TagB")
        matching = [b"d-TagB-7", b"d-TagA-9", b"d-TagC-11", b"d-TagB-13"]
        common = {"endpoint": cluster.endpoint, "topic": "JPushFilter", "settle_ms": 1_500}
        by_tag, by_sql = await asyncio.gather(
            java_client.run(
                tmp_path / "java", "push-consume", name="tag", group="j-push-tag",
                filter_tag="TagB", count=len(tagged), **common,
                with_bodies=True,
            ),
            java_client.run(
                tmp_path / "java", "push-consume", name="sql", group="j-push-sql",
                filter_sql="a > 5 AND region = 'eu'", count=len(matching), **common,
                with_bodies=True,
            ),
        )  # fmt: skip
    assert sorted(bodies_of(by_tag)) == tagged
    assert sorted(bodies_of(by_sql)) == sorted(matching)


def bodies_of(events: java_client.Events) -> list[bytes]:
    return [body_of(event) for event in events.of("consumed")]


FIFO_GROUP = "j-push-fifo"
MESSAGE_GROUPS = ("order-a", "order-b", "order-c", "order-d")
PER_GROUP = 6
POISON = "order-b:2"


async def test_fifo_push_consumer_keeps_message_group_order_and_retries_in_place(tmp_path: Path) -> None:
    """A group configured ``consume_message_orderly`` gets ``settings.subscription.fifo``: the Java
    PushConsumer consumes each message group in send order, never two of one group at once; a
    message its listener fails is retried in place (same message, attempt 2, after the
    settings' 1 s backoff) before the rest of its group, and nothing is dead-lettered."""
    async with v2_cluster(tmp_path / "cluster") as cluster:
        await cluster.broker.stub.CreateSubscriptionGroup(
            broker_pb2.CreateSubscriptionGroupRequest(
                group=broker_pb2.SubscriptionGroupConfig(
                    group_name=FIFO_GROUP,
                    consume_enable=True,
                    consume_message_orderly=True,
                    consume_from_min_enable=True,  # begins at the first message, sent before it starts
                    retry_max_times=2,
                )
            )
        )
        messages = [  # interleaved: order-a:0, order-b:0, ..., order-a:1, ...
            spec("JPushFifo", f"{group}:{i}".encode(), message_group=group)
            for i in range(PER_GROUP)
            for group in MESSAGE_GROUPS
        ]
        sent = await java_client.run(tmp_path / "java", "send", endpoint=cluster.endpoint, messages=messages)
        assert sent.summary["sent"] == len(messages)
        consumed = await java_client.run(
            tmp_path / "java", "push-consume", endpoint=cluster.endpoint, group=FIFO_GROUP,
            topic="JPushFifo", threads=4, consume_ms=20, fail_body=POISON, fail_times=1,
            count=len(messages), settle_ms=1_000, with_bodies=True,
        )  # fmt: skip
        dead = await dead_letters(cluster, FIFO_GROUP)
    by_group: dict[str, list[tuple[str, int, str, int]]] = defaultdict(list)
    for event in consumed.of("consumed"):
        seen = (body_of(event).decode(), event["delivery_attempt"], event["result"], event["at_ms"])
        by_group[event["message_group"]].append(seen)
    assert consumed.summary["distinct"] == len(messages), consumed.lines[-3:]
    for group in MESSAGE_GROUPS:
        expected = [f"{group}:{i}" for i in range(PER_GROUP)]
        if group == "order-b":
            expected[2:3] = [POISON, POISON]
        assert [body for body, *_ in by_group[group]] == expected, group
    poison = [(attempt, result, at) for body, attempt, result, at in by_group["order-b"] if body == POISON]
    assert [(attempt, result) for attempt, result, _ in poison] == [(1, "FAILURE"), (2, "SUCCESS")]
    assert poison[1][2] - poison[0][2] >= 900, "retried before the backoff"
    assert consumed.summary["overlaps"] == 0 and consumed.of("overlap") == []
    assert dead == []
