"""The official RocketMQ 5 Python client's PushConsumer through ``orbitmq proxy``: it finds its
queues with QueryAssignment, receives (auto-renewed invisibility), acks what its listener
consumed, and a message the listener fails comes back later with its delivery attempt counted
(the client hides it for its backoff with ChangeInvisibleDuration)."""

from __future__ import annotations

import asyncio
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from rocketmq.v5.consumer import ConsumeResult, MessageListener, PushConsumer
from rocketmq.v5.model import FilterExpression
from v2kit import ClientConfiguration, Credentials, call, message, official_producer, v2_cluster

pytestmark = pytest.mark.timeout(120)

TOPIC = "V2PushConsumer"


class Listener(MessageListener):
    """Fails the first delivery of ``fail_once``; records (body, attempt) of every delivery."""

    def __init__(self, fail_once: bytes, expected: int) -> None:
        self.fail_once = fail_once
        self.seen: list[tuple[bytes, int]] = []
        self.expected = expected
        self.done = threading.Event()
        self._lock = threading.Lock()

    def consume(self, message):  # type: ignore[no-untyped-def]
        with self._lock:
            self.seen.append((message.body, message.delivery_attempt))
            if len(self.seen) >= self.expected:
                self.done.set()
        if message.body == self.fail_once and message.delivery_attempt == 1:
            return ConsumeResult.FAILURE
        return ConsumeResult.SUCCESS


async def test_push_consumer_consumes_and_gets_a_failed_message_again(tmp_path: Path) -> None:
    async with v2_cluster(tmp_path) as cluster:
        async with official_producer(cluster.endpoint, [TOPIC]) as producer:
            for body in (b"p1", b"p2", b"p3"):
                await call(producer.send, message(TOPIC, body))
        listener = Listener(fail_once=b"p2", expected=4)
        consumer = PushConsumer(
            ClientConfiguration(cluster.endpoint, Credentials()),
            "v2-push",
            listener,
            {TOPIC: FilterExpression()},
            consumption_thread_count=2,
        )
        await call(consumer.startup)
        try:
            await asyncio.to_thread(listener.done.wait, 60)
            await asyncio.sleep(1.0)  # nothing else may arrive: the others were acked
        finally:
            await call(consumer.shutdown)
        assert sorted(listener.seen) == [(b"p1", 1), (b"p2", 1), (b"p2", 2), (b"p3", 1)]
        assert await cluster.metric("orbitmq_proxy_requests_total", rpc="QueryAssignment", code="OK") >= 1
