"""The official RocketMQ 5 Java client's SimpleConsumer through ``orbitmq proxy``: ReceiveMessage
(long polling), AckMessage, ChangeInvisibleDuration, expiry of an unacknowledged message, and tag
and SQL92 subscriptions, for messages sent by orbitmq's own producer.

Each test names the protocol behaviour it checks; one JVM runs each consumer's whole scenario
(a receive loop that stops by itself), and the tests assert on the events it printed.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from javakit import sha256
from v2kit import V2Cluster, v2_cluster

from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.interop import java_client

pytestmark = pytest.mark.timeout(120)

PRECISION_MS = 100
"""How much earlier than its invisible time a message may come back (the broker's revive scan)."""


async def send_all(cluster: V2Cluster, messages: list[Message]) -> list[str]:
    """Send with orbitmq's own producer, all at once; the message ids (UNIQ_KEY) in order."""
    async with Producer("java-interop-sender", cluster.namesrv.address) as producer:
        results = await asyncio.gather(*(producer.send(message) for message in messages))
    return [result.msg_id for result in results]


def by_message(events: java_client.Events, name: str) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for event in events.of(name):
        grouped[event["message_id"]].append(event)
    return grouped


async def test_receive_and_ack_deliver_every_message_once_as_sent(tmp_path: Path) -> None:
    """ReceiveMessage then AckMessage: each message is delivered once (attempt 1) with its body,
    tag, keys, user properties, born host and the producer's message id, and once acknowledged
    never again (a further 1.5 s of receiving gets nothing)."""
    async with v2_cluster(tmp_path / "cluster") as cluster:
        bodies = [f"simple-{i}".encode() + bytes(range(i)) for i in range(30)]
        messages = [
            Message("JSimple", body, tags=f"T{i % 3}", keys=[f"k{i}"], properties={"n": str(i)})
            for i, body in enumerate(bodies)
        ]
        ids = await send_all(cluster, messages)
        events = await java_client.run(
            tmp_path / "java", "simple-consume", endpoint=cluster.endpoint, group="j-simple",
            topic="JSimple", count=30, await_ms=1_000, settle_ms=1_500,
        )  # fmt: skip
    received = by_message(events, "received")
    assert set(received) == set(ids), "every message, under the id its producer gave it"
    assert all(len(deliveries) == 1 for deliveries in received.values()), "one delivery each"
    assert set(by_message(events, "acked")) == set(ids)
    assert events.of("ack_failed") == []
    for i, message_id in enumerate(ids):
        [seen] = received[message_id]
        assert (seen["body_sha256"], seen["body_size"]) == (sha256(bodies[i]), len(bodies[i]))
        assert (seen["tag"], seen["keys"], seen["properties"]) == (f"T{i % 3}", [f"k{i}"], {"n": str(i)})
        assert (seen["delivery_attempt"], seen["corrupted"], seen["topic"]) == (1, False, "JSimple")
        assert seen["born_host"].startswith("127.0.0.1")


async def test_change_invisible_duration_and_expiry_redeliver_counting_the_attempt(tmp_path: Path) -> None:
    """ChangeInvisibleDuration: a message received for 30 s but set to 1 s is delivered again
    ~1 s after the change (not 30 s), with delivery attempt 2. Expiry: a message nobody
    acknowledges comes back once its invisible time (2 s) is over, attempt 2. Both then ack."""
    async with v2_cluster(tmp_path / "cluster") as cluster:
        ids = await send_all(cluster, [Message("JInvisible", f"m{i}".encode(), tags="T") for i in range(3)])
        common = {"endpoint": cluster.endpoint, "topic": "JInvisible", "count": 3, "await_ms": 1_000}
        changed, expired = await asyncio.gather(
            java_client.run(
                tmp_path / "java", "simple-consume", name="change", group="j-change",
                invisible_ms=30_000, first_attempt="change:1000", **common,
            ),
            java_client.run(
                tmp_path / "java", "simple-consume", name="expiry", group="j-expiry",
                invisible_ms=2_000, first_attempt="ignore", **common,
            ),
        )  # fmt: skip
    for events, hidden_ms in ((changed, 1_000), (expired, 2_000)):
        received = by_message(events, "received")
        assert set(received) == set(ids)
        assert set(by_message(events, "acked")) == set(ids)
        for message_id, (first, second, *more) in received.items():
            assert more == []
            assert (first["delivery_attempt"], second["delivery_attempt"]) == (1, 2)
            # hidden for its invisible time from the change (or the first receive), not longer
            if hidden_ms == 1_000:
                [change] = by_message(events, "changed")[message_id]
                began, ended = change["call_started_ms"], change["at_ms"]
            else:
                began, ended = first["receive_started_ms"], first["at_ms"]
            assert began + hidden_ms - PRECISION_MS <= second["at_ms"], (first, second)
            assert second["receive_started_ms"] <= ended + hidden_ms + 5_000, (first, second)
    assert changed.of("change_failed") == []


async def test_tag_and_sql92_subscriptions_receive_exactly_their_messages(tmp_path: Path) -> None:
    """ReceiveMessage with a TAG filter (``TagA || TagB``) and with a SQL92 filter (``a > 5 AND
    region = 'eu'`` on user properties): each group gets exactly the messages that match,
    evaluated on the broker (the others are never delivered: nothing else arrives in 1.5 s)."""
    async with v2_cluster(tmp_path / "cluster") as cluster:
        messages = [
            Message(
                "JFilter", f"m{i}".encode(), tags=("TagA", "TagB", "TagC")[i % 3],
                properties={"a": str(i), "region": "eu" if i % 2 else "us"},
            )
            for i in range(12)
        ] + [Message("JFilter", b"bare")]  # fmt: skip
        await send_all(cluster, messages)
        tagged = [m.body for m in messages if m.tags in ("TagA", "TagB")]
        matching = [b"m7", b"m9", b"m11"]
        common = {"endpoint": cluster.endpoint, "topic": "JFilter", "await_ms": 1_000, "settle_ms": 1_500}
        by_tag, by_sql = await asyncio.gather(
            java_client.run(
                tmp_path / "java", "simple-consume", name="tag", group="j-tag",
                filter_tag="TagA || TagB", count=len(tagged), **common,
            ),
            java_client.run(
                tmp_path / "java", "simple-consume", name="sql", group="j-sql",
                filter_sql="a > 5 AND region = 'eu'", count=len(matching), **common,
            ),
        )  # fmt: skip
    by_hash = {sha256(m.body): m.body for m in messages}
    assert sorted(by_hash[e["body_sha256"]] for e in by_tag.of("received")) == sorted(tagged)
    assert sorted(by_hash[e["body_sha256"]] for e in by_sql.of("received")) == sorted(matching)
