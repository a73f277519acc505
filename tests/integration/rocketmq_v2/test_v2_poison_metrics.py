"""A poison message (its listener fails it every time) shows in the proxy's /metrics per group.

Two official push consumers through ``orbitmq proxy``, each failing one message forever:

* a concurrent group: the client hides the failed message for its backoff with
  ``ChangeInvisibleDuration`` after every failed delivery, so the proxy counts one first change
  and then repeated ones (``orbitmq_proxy_invisibility_changes_total{change="again"}``);
* a FIFO group: the client retries in place and, past its maximum attempts, gives up with
  ``ForwardMessageToDeadLetterQueue`` (``orbitmq_proxy_dead_letter_forwards_total``).

Messages the listeners consume are acked and counted nowhere here: the other group's series
and a healthy message's stay absent.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest
from rocketmq.v5.consumer import ConsumeResult, MessageListener, PushConsumer
from rocketmq.v5.model import FilterExpression
from v2kit import ClientConfiguration, Credentials, V2Cluster, call, message, official_producer, v2_cluster

from orbitmq.v1 import broker_pb2

pytestmark = pytest.mark.timeout(150)

TOPIC = "V2Poison"
FIFO_TOPIC = "V2PoisonFifo"
GROUP = "v2-poison"
FIFO_GROUP = "v2-poison-fifo"
POISON = b"poison"
FAST_LEVELS = " ".join(["1s"] * 18)
"""Retry delays for the concurrent group's backoff (the brokers' and the proxy's must agree; the
Python client rounds a backoff down to whole seconds, so not shorter)."""


class Listener(MessageListener):
    """Fails ``POISON`` every time; counts its deliveries."""

    def __init__(self, wanted: int) -> None:
        self.poison_deliveries = 0
        self.wanted = wanted
        self.done = threading.Event()
        self._lock = threading.Lock()

    def consume(self, message):  # type: ignore[no-untyped-def]
        if message.body != POISON:
            return ConsumeResult.SUCCESS
        with self._lock:
            self.poison_deliveries += 1
            if self.poison_deliveries >= self.wanted:
                self.done.set()
        return ConsumeResult.FAILURE


async def create_group(cluster: V2Cluster, name: str, *, orderly: bool, retry_max_times: int) -> None:
    await cluster.broker.stub.CreateSubscriptionGroup(
        broker_pb2.CreateSubscriptionGroupRequest(
            group=broker_pb2.SubscriptionGroupConfig(
                group_name=name,
                consume_enable=True,
                consume_message_orderly=orderly,
                retry_max_times=retry_max_times,
            )
        )
    )


async def consume_until(cluster: V2Cluster, group: str, topic: str, listener: Listener) -> None:
    consumer = PushConsumer(
        ClientConfiguration(cluster.endpoint, Credentials()),
        group,
        listener,
        {topic: FilterExpression()},
        consumption_thread_count=2,
    )
    await call(consumer.startup)
    try:
        assert await asyncio.to_thread(listener.done.wait, 60), f"{group}: {listener.poison_deliveries}"
    finally:
        await call(consumer.shutdown)


async def eventually(cluster: V2Cluster, name: str, labels: dict[str, str], at_least: float) -> float:
    """The sample once it reached ``at_least`` (the client's last call may still be on its way)."""
    deadline = time.monotonic() + 10
    while True:
        value = await cluster.metric(name, **labels)
        if value >= at_least or time.monotonic() > deadline:
            return value
        await asyncio.sleep(0.2)


async def test_a_poison_message_shows_as_repeated_changes_and_a_dead_letter_forward_per_group(
    tmp_path: Path,
) -> None:
    async with v2_cluster(tmp_path, {"delay_levels": FAST_LEVELS}, delay_levels=FAST_LEVELS) as cluster:
        await create_group(cluster, GROUP, orderly=False, retry_max_times=16)
        await create_group(cluster, FIFO_GROUP, orderly=True, retry_max_times=1)
        async with official_producer(cluster.endpoint, [TOPIC, FIFO_TOPIC]) as producer:
            for body in (b"fine-1", POISON, b"fine-2"):
                await call(producer.send, message(TOPIC, body))
                fifo = message(FIFO_TOPIC, body)
                fifo.message_group = "order-1"
                await call(producer.send, fifo)

        await consume_until(cluster, GROUP, TOPIC, Listener(wanted=3))
        await consume_until(cluster, FIFO_GROUP, FIFO_TOPIC, Listener(wanted=2))

        changes = "orbitmq_proxy_invisibility_changes_total"
        forwards = "orbitmq_proxy_dead_letter_forwards_total"
        assert await eventually(cluster, changes, {"group": GROUP, "change": "again"}, 2) >= 2
        assert await cluster.metric(changes, group=GROUP, change="first") == 1  # the poison only
        assert await eventually(cluster, forwards, {"group": FIFO_GROUP}, 1) == 1
        assert await cluster.metric(forwards, group=GROUP) == 0
        assert await cluster.metric(changes, group=FIFO_GROUP, change="first") == 0
