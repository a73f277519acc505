"""The official RocketMQ 5 Python client's SimpleConsumer through ``orbitmq proxy``: receive,
ack, change of invisible duration, and expiry (a message not acked in time comes back with a
higher delivery attempt), all kept by the broker's POP state."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol import service_pb2_grpc

sys.path.insert(0, str(Path(__file__).parent))
from v2kit import call, message, official_producer, official_simple_consumer, v2_cluster

from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2

pytestmark = pytest.mark.timeout(120)

TOPIC = "V2SimpleConsumer"
GROUP = "v2-simple"


async def receive_until(consumer: Any, count: int, invisible_s: int, within_s: float = 20.0) -> list[Any]:
    """Receive (long polling) until ``count`` messages came or ``within_s`` passed."""
    got: list[Any] = []
    deadline = time.monotonic() + within_s
    while len(got) < count and time.monotonic() < deadline:
        got.extend(await call(consumer.receive, 16, invisible_s))
    return got


async def test_simple_consumer_receives_acks_changes_invisibility_and_sees_expiry(tmp_path: Path) -> None:
    async with v2_cluster(tmp_path) as cluster:
        async with official_producer(cluster.endpoint, [TOPIC]) as producer:
            receipts = [
                await call(producer.send, message(TOPIC, f"m{i}".encode(), tag="T")) for i in (1, 2, 3)
            ]
        ids = {r.message_id: f"m{i}".encode() for i, r in zip((1, 2, 3), receipts, strict=True)}

        async with official_simple_consumer(cluster.endpoint, GROUP, [TOPIC]) as consumer:
            first = await receive_until(consumer, 3, invisible_s=30)
            assert sorted(m.body for m in first) == [b"m1", b"m2", b"m3"]
            for m in first:
                assert ids[m.message_id] == m.body and m.tag == "T"
                assert m.delivery_attempt == 1 and not m.corrupted
                assert m.transport_delivery_timestamp  # the delivery_timestamp frame came
            by_body = {m.body: m for m in first}
            assert await call(consumer.receive, 16, 30) == []  # all invisible: an empty long poll

            await call(consumer.ack, by_body[b"m1"])
            stale = by_body[b"m2"].receipt_handle
            await call(consumer.change_invisible_duration, by_body[b"m2"], 1)
            assert by_body[b"m2"].receipt_handle != stale  # the client took the new handle
            again = await receive_until(consumer, 1, invisible_s=30)
            assert [(m.body, m.delivery_attempt) for m in again] == [(b"m2", 2)]
            by_body[b"m2"].receipt_handle = stale
            with pytest.raises(Exception, match="stale"):  # delivered again since: refused
                await call(consumer.ack, by_body[b"m2"])
            await call(consumer.ack, again[0])
            await call(consumer.ack, again[0])  # a repeated ack is no error

            # m3 was received for 30 s: expire a new message instead, quicker.
            async with official_producer(cluster.endpoint, [TOPIC]) as producer:
                await call(producer.send, message(TOPIC, b"m4"))
            (m4,) = await receive_until(consumer, 1, invisible_s=1)
            assert (m4.body, m4.delivery_attempt) == (b"m4", 1)
            (back,) = await receive_until(consumer, 1, invisible_s=30)
            assert (back.body, back.delivery_attempt, back.message_id) == (b"m4", 2, m4.message_id)
            await call(consumer.ack, back)

            # m3 (still hidden) is given up on: forwarded to the group's dead letters, as the
            # official push consumer does past its maximum attempts (same request, same stub).
            async with grpc.aio.insecure_channel(cluster.endpoint) as channel:
                forwarded = await service_pb2_grpc.MessagingServiceStub(
                    channel
                ).ForwardMessageToDeadLetterQueue(
                    s.ForwardMessageToDeadLetterQueueRequest(
                        group=d.Resource(name=GROUP),
                        topic=d.Resource(name=TOPIC),
                        receipt_handle=by_body[b"m3"].receipt_handle,
                        message_id=by_body[b"m3"].message_id,
                        delivery_attempt=1,
                        max_delivery_attempts=1,
                    ),
                    metadata=(("x-mq-client-id", "test-client@1"),),
                    timeout=5,
                )
            assert forwarded.status.code == d.OK, forwarded.status.message
            dead = await cluster.broker.stub.PullMessage(
                broker_pb2.PullMessageRequest(
                    consumer_group="dlq-reader", topic=f"%DLQ%{GROUP}", queue_id=0, max_msg_nums=8
                )
            )
            assert [decode(r).body for r in dead.records] == [b"m3"]
            assert await call(consumer.receive, 16, 30) == []  # nothing left in flight or new

        assert await cluster.metric("orbitmq_proxy_requests_total", rpc="ReceiveMessage", code="OK") >= 3
