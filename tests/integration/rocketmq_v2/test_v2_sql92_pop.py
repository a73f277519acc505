"""SQL92 subscriptions of the official RocketMQ 5 Python client through ``orbitmq proxy`` (issue
25): a SimpleConsumer and a PushConsumer subscribed with ``FilterExpression(condition,
FilterType.SQL)`` get exactly the messages whose user properties match, evaluated on the broker
before a message becomes invisible; the others are never delivered, yet the group's POP
progress passes them; an invalid condition is a ``BadRequestException`` naming it and the fault
(refused at each receive, not in the push consumer's Telemetry settings: the Java client applies
a settings answer whatever its status and the Python client drops a non-OK one, its push
consumer's start then failing after 10 s with no reason given)."""

from __future__ import annotations

import asyncio
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from rocketmq.grpc_protocol import FilterType
from rocketmq.v5.consumer import ConsumeResult, MessageListener, PushConsumer
from rocketmq.v5.exception import BadRequestException
from rocketmq.v5.model import FilterExpression
from v2kit import (
    CLIENT_LOG_HOME,
    ClientConfiguration,
    Credentials,
    SimpleConsumer,
    V2Cluster,
    call,
    message,
    official_producer,
    v2_cluster,
)

from orbitmq.v1 import broker_pb2

pytestmark = pytest.mark.timeout(120)

CONDITION = "a > 5 AND region = 'eu'"
SENT = 12
MATCHING = [b"m7", b"m9", b"m11"]
"""``a`` is the index, ``region`` is ``eu`` for odd ones: 7, 9 and 11 match."""
CLIENT_LOG = CLIENT_LOG_HOME / "logs" / "rocketmq_python" / "rocketmq_client.log"


async def send_all(cluster: V2Cluster, topic: str) -> None:
    async with official_producer(cluster.endpoint, [topic]) as producer:
        for i in range(SENT):
            region = "eu" if i % 2 else "us"
            await call(producer.send, message(topic, f"m{i}".encode(), a=str(i), region=region))
        await call(producer.send, message(topic, b"bare"))  # no properties: unknown, not a match


async def pop_progress(cluster: V2Cluster, group: str, topic: str) -> tuple[int, int]:
    """The group's POP consume offsets summed over the topic's queues (one never consumed, -1,
    counts 0), and the topic's messages."""
    stats = await cluster.broker.stub.GetConsumeStats(
        broker_pb2.GetConsumeStatsRequest(consumer_group=group, topic=topic)
    )
    return sum(max(0, q.consumer_offset) for q in stats.queues), sum(q.broker_offset for q in stats.queues)


def sql(expression: str) -> FilterExpression:
    return FilterExpression(expression, FilterType.SQL)


class Listener(MessageListener):
    """Records (body, attempt) of every delivery and consumes it."""

    def __init__(self) -> None:
        self.seen: list[tuple[bytes, int]] = []
        self.done = threading.Event()
        self._lock = threading.Lock()

    def consume(self, message):  # type: ignore[no-untyped-def]
        with self._lock:
            self.seen.append((message.body, message.delivery_attempt))
            if len(self.seen) >= len(MATCHING):
                self.done.set()
        return ConsumeResult.SUCCESS


async def refusals(cluster: V2Cluster) -> float:
    return await cluster.metric(
        "orbitmq_proxy_requests_total", rpc="ReceiveMessage", code="ILLEGAL_FILTER_EXPRESSION"
    )


async def test_simple_consumer_receives_only_the_matching_messages(tmp_path: Path) -> None:
    topic, group = "V2Sql92Simple", "v2-sql92-simple"
    async with v2_cluster(tmp_path) as cluster:
        await send_all(cluster, topic)
        consumer = SimpleConsumer(
            ClientConfiguration(cluster.endpoint, Credentials()), group, {topic: sql(CONDITION)}, 2
        )
        await call(consumer.startup)
        try:
            received: list[Any] = []
            deadline = time.monotonic() + 20
            while len(received) < len(MATCHING) and time.monotonic() < deadline:
                received.extend(await call(consumer.receive, 16, 30))
            assert sorted(m.body for m in received) == sorted(MATCHING)
            for m in received:
                assert m.delivery_attempt == 1 and m.properties["region"] == "eu"
                await call(consumer.ack, m)
            assert await call(consumer.receive, 16, 30) == []  # nothing else, not even later
            assert await pop_progress(cluster, group, topic) == (SENT + 1, SENT + 1)
        finally:
            await call(consumer.shutdown)


async def test_push_consumer_consumes_only_the_matching_messages(tmp_path: Path) -> None:
    topic, group = "V2Sql92Push", "v2-sql92-push"
    async with v2_cluster(tmp_path) as cluster:
        await send_all(cluster, topic)
        listener = Listener()
        consumer = PushConsumer(
            ClientConfiguration(cluster.endpoint, Credentials()),
            group,
            listener,
            {topic: sql(CONDITION)},
            consumption_thread_count=2,
        )
        await call(consumer.startup)
        try:
            await asyncio.to_thread(listener.done.wait, 60)
            deadline = time.monotonic() + 20  # the acks reach the broker: all messages are done
            while await pop_progress(cluster, group, topic) != (SENT + 1, SENT + 1):
                assert time.monotonic() < deadline, await pop_progress(cluster, group, topic)
                await asyncio.sleep(0.2)
            await asyncio.sleep(1.0)  # nothing else may arrive
        finally:
            await call(consumer.shutdown)
        assert sorted(listener.seen) == sorted((body, 1) for body in MATCHING)


async def test_an_invalid_condition_is_a_bad_request_naming_it(tmp_path: Path) -> None:
    topic, group = "V2Sql92Invalid", "v2-sql92-invalid"
    async with v2_cluster(tmp_path) as cluster:
        await send_all(cluster, topic)
        consumer = SimpleConsumer(
            ClientConfiguration(cluster.endpoint, Credentials()), group, {topic: sql("a >> 5")}, 2
        )
        await call(consumer.startup)
        try:
            with pytest.raises(BadRequestException, match=r"invalid SQL92 expression 'a >> 5' at column 4"):
                await call(consumer.receive, 16, 30)
            await call(consumer.subscribe, topic, sql(""))  # no condition is no "*" either
            with pytest.raises(BadRequestException, match="expected a condition, found an empty expression"):
                await call(consumer.receive, 16, 30)
        finally:
            await call(consumer.shutdown)
        assert await pop_progress(cluster, group, topic) == (0, SENT + 1)  # nothing skipped or taken

        # A push consumer subscribes in its settings and starts; each receive is refused, and
        # the client logs why (it keeps trying: the application may fix the subscription).
        push_group = "v2-sql92-invalid-push"
        listener = Listener()
        push = PushConsumer(
            ClientConfiguration(cluster.endpoint, Credentials()), push_group, listener, {topic: sql("a >> 5")}
        )
        before = await refusals(cluster)
        await call(push.startup)
        try:
            deadline = time.monotonic() + 20
            while await refusals(cluster) < before + 2:
                assert time.monotonic() < deadline, "the push consumer's receives were not refused"
                await asyncio.sleep(0.2)
        finally:
            await call(push.shutdown)
        assert listener.seen == []
        assert await pop_progress(cluster, push_group, topic) == (0, SENT + 1)
        logged = [line for line in CLIENT_LOG.read_text().splitlines() if push_group in line]
        assert any("invalid SQL92 expression 'a >> 5' at column 4" in line for line in logged)
