"""The official RocketMQ 5 Python client's PushConsumer in FIFO mode through ``orbitmq proxy``.

Protocol behaviour checked: a group configured ``consume_message_orderly`` gets
``settings.subscription.fifo`` (the client switches to its FIFO consume service); messages of
several message groups come out in per-group order; a failing listener has the *same* message
retried locally (the client sleeps the settings' backoff between attempts while the proxy
renews the message's invisibility, so the broker neither hands it out again nor lets the next
message of its queue through); after ``backoff_policy.max_attempts`` the client calls
``ForwardMessageToDeadLetterQueue`` with the receipt handle of the first delivery, the message
lands in ``%DLQ%<group>`` and its message group continues.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
from rocketmq.v5.consumer import ConsumeResult, MessageListener, PushConsumer
from rocketmq.v5.model import FilterExpression
from v2kit import ClientConfiguration, Credentials, call, message, official_producer, v2_cluster

from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2

pytestmark = pytest.mark.timeout(150)

TOPIC = "V2FifoPush"
GROUP = "v2-fifo-push"
MESSAGE_GROUPS = ("order-a", "order-b", "order-c", "order-d")
PER_GROUP = 5
POISON = b"order-b:2"
MAX_ATTEMPTS = 3
SLICE_MS = 1_500
"""The proxy hides auto-renewed messages this long at a time: the poison's local retries (1 s
apart) outlast it, so it stays with its consumer only because the proxy renews it."""


class Listener(MessageListener):
    """Fails ``POISON`` every time; records every delivery per message group, and whether two
    deliveries of one message group ever overlapped (a FIFO consumer must never do that)."""

    def __init__(self, expected: int) -> None:
        self.by_group: dict[str, list[tuple[bytes, int]]] = defaultdict(list)
        self.busy: set[str] = set()
        self.overlaps: list[str] = []
        self.expected = expected
        self.done = threading.Event()
        self._lock = threading.Lock()

    def consume(self, message):  # type: ignore[no-untyped-def]
        group = message.message_group
        with self._lock:
            if group in self.busy:
                self.overlaps.append(group)
            self.busy.add(group)
            self.by_group[group].append((message.body, message.delivery_attempt))
        time.sleep(0.05)  # a real listener takes a while: overlaps would show
        with self._lock:
            self.busy.discard(group)
            if sum(len(v) for v in self.by_group.values()) >= self.expected:
                self.done.set()
        return ConsumeResult.FAILURE if message.body == POISON else ConsumeResult.SUCCESS


async def test_fifo_push_consumer_keeps_group_order_retries_in_place_and_dead_letters(tmp_path: Path) -> None:
    async with v2_cluster(tmp_path, {"auto_renew_slice_ms": SLICE_MS}) as cluster:
        await cluster.broker.stub.CreateSubscriptionGroup(
            broker_pb2.CreateSubscriptionGroupRequest(
                group=broker_pb2.SubscriptionGroupConfig(
                    group_name=GROUP,
                    consume_enable=True,
                    consume_message_orderly=True,
                    retry_max_times=MAX_ATTEMPTS - 1,
                )
            )
        )
        async with official_producer(cluster.endpoint, [TOPIC]) as producer:
            for i in range(PER_GROUP):  # interleaved: order-a:0, order-b:0, ..., order-a:1, ...
                for group in MESSAGE_GROUPS:
                    sent = message(TOPIC, f"{group}:{i}".encode())
                    sent.message_group = group
                    await call(producer.send, sent)
        expected = len(MESSAGE_GROUPS) * PER_GROUP + MAX_ATTEMPTS - 1
        listener = Listener(expected)
        consumer = PushConsumer(
            ClientConfiguration(cluster.endpoint, Credentials()),
            GROUP,
            listener,
            {TOPIC: FilterExpression()},
            consumption_thread_count=4,
        )
        await call(consumer.startup)
        try:
            assert consumer.fifo, "the proxy's settings must say subscription.fifo for an orderly group"
            assert await asyncio.to_thread(listener.done.wait, 90), f"only got {dict(listener.by_group)}"
            dead = await _dead_letters(cluster, within_s=20)
            await asyncio.sleep(1.5)  # nothing more may come: every other message was acked
        finally:
            await asyncio.wait_for(call(consumer.shutdown), 60)

        for group in MESSAGE_GROUPS:
            bodies = [f"{group}:{i}".encode() for i in range(PER_GROUP)]
            if group == "order-b":  # the poison three times in a row, then its group goes on
                bodies[2:3] = [POISON] * MAX_ATTEMPTS
            assert [b for b, _ in listener.by_group[group]] == bodies, group
        # local retries: the broker delivered every message once (no expiry, no redelivery)
        assert {a for deliveries in listener.by_group.values() for _, a in deliveries} == {1}
        assert listener.overlaps == []
        assert dead == [POISON]
        assert await cluster.metric("orbitmq_proxy_invisibility_renewals_total", outcome="renewed") >= 1
        assert (
            await cluster.metric(
                "orbitmq_proxy_requests_total", rpc="ForwardMessageToDeadLetterQueue", code="OK"
            )
            == 1
        )


async def _dead_letters(cluster, within_s: float) -> list[bytes]:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + within_s
    while True:
        reply = await cluster.broker.stub.PullMessage(
            broker_pb2.PullMessageRequest(
                consumer_group="dlq-reader", topic=f"%DLQ%{GROUP}", queue_id=0, max_msg_nums=32
            )
        )
        if reply.records or time.monotonic() > deadline:
            return [decode(r).body for r in reply.records]
        await asyncio.sleep(0.2)
