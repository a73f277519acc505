"""Consumption semantics with the official RocketMQ 5 Python client's SimpleConsumer through
``orbitmq proxy``: dead letters after the group's maximum attempts, tag filters, one group's
consumers sharing messages, and messages sent with orbitmq's own client received intact."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from v2kit import V2Cluster, call, message, official_producer, official_simple_consumer, v2_cluster

from orbitmq.client import Message, Producer
from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2

pytestmark = pytest.mark.timeout(120)


async def receive_until(consumer: Any, count: int, invisible_s: int, within_s: float = 15.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + within_s
    while len(got) < count and time.monotonic() < deadline:
        got.extend(await call(consumer.receive, 16, invisible_s))
    return got


async def dead_letters(cluster: V2Cluster, group: str) -> list[bytes]:
    reply = await cluster.broker.stub.PullMessage(
        broker_pb2.PullMessageRequest(
            consumer_group="dlq-reader", topic=f"%DLQ%{group}", queue_id=0, max_msg_nums=32
        )
    )
    return [decode(r).body for r in reply.records]


async def test_a_message_never_acked_ends_in_the_dead_letter_topic_after_max_attempts(tmp_path: Path) -> None:
    """The group's retry maximum (here 1) bounds deliveries at 2: after the second expiry the
    message is in ``%DLQ%<group>`` and is not received again."""
    async with v2_cluster(tmp_path) as cluster:
        await cluster.broker.stub.CreateSubscriptionGroup(
            broker_pb2.CreateSubscriptionGroupRequest(
                group=broker_pb2.SubscriptionGroupConfig(
                    group_name="v2-dlq", consume_enable=True, retry_max_times=1
                )
            )
        )
        async with official_producer(cluster.endpoint, ["V2Dlq"]) as producer:
            await call(producer.send, message("V2Dlq", b"poison"))
        async with official_simple_consumer(cluster.endpoint, "v2-dlq", ["V2Dlq"]) as consumer:
            (first,) = await receive_until(consumer, 1, invisible_s=1)
            (second,) = await receive_until(consumer, 1, invisible_s=1)
            assert [(m.body, m.delivery_attempt) for m in (first, second)] == [(b"poison", 1), (b"poison", 2)]
            assert await receive_until(consumer, 1, invisible_s=1, within_s=4) == []
        assert await dead_letters(cluster, "v2-dlq") == [b"poison"]


async def test_tag_filter_and_two_consumers_of_one_group_share_without_duplicates(tmp_path: Path) -> None:
    async with v2_cluster(tmp_path) as cluster:
        async with official_producer(cluster.endpoint, ["V2Share"]) as producer:
            for i in range(12):
                await call(producer.send, message("V2Share", f"{i}".encode(), tag="A" if i % 3 else "B"))
        wanted = sorted(f"{i}".encode() for i in range(12) if i % 3)
        async with (
            official_simple_consumer(cluster.endpoint, "v2-share", ["V2Share"], tag="A") as one,
            official_simple_consumer(cluster.endpoint, "v2-share", ["V2Share"], tag="A") as two,
        ):
            first = await call(one.receive, 4, 30)
            second = await receive_until(two, len(wanted) - len(first), invisible_s=30)
            assert first and second  # both got a share
            bodies = [m.body for m in first + second]
            assert sorted(bodies) == wanted  # tag B filtered out, nothing twice
            assert {m.tag for m in first + second} == {"A"}
            for consumer, received in ((one, first), (two, second)):
                for m in received:
                    await call(consumer.ack, m)


async def test_message_sent_with_orbitmq_client_arrives_intact_in_the_official_consumer(
    tmp_path: Path,
) -> None:
    async with v2_cluster(tmp_path) as cluster:
        body = bytes(range(256)) * 4
        async with Producer("interop", cluster.namesrv.address) as producer:
            sent = await producer.send(
                Message("V2Interop", body, tags="T", keys=["k1", "k2"], properties={"color": "blue"})
            )
        async with official_simple_consumer(cluster.endpoint, "v2-interop", ["V2Interop"]) as consumer:
            (got,) = await receive_until(consumer, 1, invisible_s=30)
            await call(consumer.ack, got)
        assert got.body == body and not got.corrupted
        assert (got.tag, set(got.keys), dict(got.properties)) == ("T", {"k1", "k2"}, {"color": "blue"})
        assert got.message_id == sent.msg_id  # the producer's unique key names it on both sides
