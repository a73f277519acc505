"""A real orbitmq cluster behind an ``orbitmq proxy``, and the official Apache RocketMQ 5 Python
client (``rocketmq-python-client``) talking to it.

The cluster (name server, broker) and the proxy run on the test's event loop; the official
client is synchronous (its own I/O thread), so every call into it goes through
``asyncio.to_thread`` and the loop keeps serving. The client writes its log under
``$HOME/logs/rocketmq_python`` when imported: HOME points at a temporary directory for that import.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import tempfile
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
from brokerkit import RunningBroker, start_broker, stop_broker
from prometheus_client.parser import text_string_to_metric_families

from orbitmq.client.pull_consumer import PullConsumer, PullStatus
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.proxy.server import Proxy
from orbitmq.proxy.settings import ProxySettings
from orbitmq.store.record import StoredMessage

CLIENT_LOG_HOME = Path(tempfile.gettempdir()) / "orbitmq-rocketmq-python-client"
_home = os.environ.get("HOME")
os.environ["HOME"] = str(CLIENT_LOG_HOME)
try:
    from rocketmq.grpc_protocol import TransactionResolution
    from rocketmq.v5.client import ClientConfiguration, Credentials
    from rocketmq.v5.consumer import SimpleConsumer
    from rocketmq.v5.model import FilterExpression, Message
    from rocketmq.v5.producer import Producer, TransactionChecker
finally:
    if _home is None:
        del os.environ["HOME"]
    else:
        os.environ["HOME"] = _home

__all__ = [
    "ClientConfiguration",
    "Credentials",
    "Message",
    "SimpleConsumer",
    "TransactionResolution",
    "V2Cluster",
    "official_producer",
    "official_simple_consumer",
    "v2_cluster",
]


@dataclass
class V2Cluster:
    namesrv: NameServer
    broker: RunningBroker
    proxy: Proxy
    broker_dir: Path
    broker_options: dict[str, Any]

    async def stop_broker(self) -> str:
        """Stop the broker gracefully; returns its address, for :meth:`start_broker`."""
        address = self.broker.broker.address
        await stop_broker(self.broker)
        return address

    async def start_broker(self, address: str) -> None:
        """Start the broker again on its data and its old address."""
        self.broker = await start_broker(
            self.broker_dir, namesrv=self.namesrv.address, listen=address, **self.broker_options
        )

    @property
    def endpoint(self) -> str:
        """What a RocketMQ 5 application is configured with: the proxy's address."""
        return self.proxy.address

    async def metric(self, name: str, **labels: str) -> float:
        """One sample of the proxy's /metrics page (0 when the series does not exist)."""

        def scrape() -> str:
            assert self.proxy.grpc.metrics_url is not None
            with urllib.request.urlopen(self.proxy.grpc.metrics_url, timeout=5) as reply:
                return reply.read().decode()

        for family in text_string_to_metric_families(await asyncio.to_thread(scrape)):
            for sample in family.samples:
                if sample.name == name and sample.labels == labels:
                    return sample.value
        return 0.0

    async def receive(self, topic: str, count: int, within_s: float = 20.0) -> list[StoredMessage]:
        """``count`` messages of ``topic`` read with orbitmq's own pull consumer (every queue
        from offset 0), in queue order; fails after ``within_s`` with what arrived so far."""
        async with PullConsumer("v2-check", self.namesrv.address) as consumer:
            received: dict[tuple[str, int], list[StoredMessage]] = {}
            deadline = asyncio.get_running_loop().time() + within_s
            while True:
                with contextlib.suppress(Exception):
                    for mq in await consumer.queues(topic, refresh=True):
                        got = received.setdefault((mq.broker_name, mq.queue_id), [])
                        result = await consumer.pull(mq, len(got), max_nums=256)
                        if result.status is PullStatus.FOUND:
                            got.extend(result.messages)
                messages = [m for key in sorted(received) for m in received[key]]
                if len(messages) >= count or asyncio.get_running_loop().time() > deadline:
                    return messages
                await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def v2_cluster(
    root: Path,
    proxy_overrides: dict[str, Any] | None = None,
    namesrv_overrides: dict[str, Any] | None = None,
    **broker_overrides: Any,
) -> AsyncIterator[V2Cluster]:
    namesrv = NameServer(
        NameServerSettings(listen="127.0.0.1:0", metrics_listen=None, **(namesrv_overrides or {}))
    )
    await namesrv.start()
    broker = await start_broker(
        root / "broker-a", namesrv=namesrv.address, broker_name="broker-a", **broker_overrides
    )
    proxy = Proxy(
        ProxySettings(
            listen="127.0.0.1:0",
            metrics_listen="127.0.0.1:0",
            namesrv=namesrv.address,
            grace_ms=200,
            **(proxy_overrides or {}),
        )
    )
    await proxy.start()
    try:
        cluster = V2Cluster(
            namesrv, broker, proxy, root / "broker-a", {"broker_name": "broker-a", **broker_overrides}
        )
        yield cluster
    finally:
        await proxy.close()
        if not cluster.broker.broker.closing:
            await stop_broker(cluster.broker)
        await namesrv.close()


class Checker(TransactionChecker):
    """Answers check-backs with a fixed resolution and records what it was asked about."""

    def __init__(self, answer: int) -> None:
        self.answer = answer
        self.asked: list[Message] = []

    def check(self, message: Message) -> int:
        self.asked.append(message)
        return self.answer


@contextlib.asynccontextmanager
async def official_producer(
    endpoint: str,
    topics: list[str],
    checker: TransactionChecker | None = None,
    namespace: str = "",
    credentials: Credentials | None = None,
) -> AsyncIterator[Producer]:
    """The official client's producer, started (QueryRoute, Telemetry) and shut down in a thread;
    ``credentials``: its session credentials (none by default)."""
    config = ClientConfiguration(endpoint, credentials or Credentials(), namespace)
    producer = Producer(config, topics, checker)
    await asyncio.to_thread(producer.startup)
    try:
        yield producer
    finally:
        await asyncio.to_thread(producer.shutdown)


@contextlib.asynccontextmanager
async def official_simple_consumer(
    endpoint: str,
    group: str,
    topics: list[str],
    await_s: int = 2,
    tag: str = "*",
    credentials: Credentials | None = None,
) -> AsyncIterator[SimpleConsumer]:
    """The official client's SimpleConsumer subscribed to ``topics``, started and shut down in a
    thread; ``await_s`` is its long-polling time per receive; ``credentials`` as the producer's."""
    config = ClientConfiguration(endpoint, credentials or Credentials())
    consumer = SimpleConsumer(
        config, group, {t: FilterExpression(tag) for t in topics}, await_duration=await_s
    )
    await asyncio.to_thread(consumer.startup)
    try:
        yield consumer
    finally:
        await asyncio.to_thread(consumer.shutdown)


def message(
    topic: str, body: bytes, *, tag: str | None = None, keys: tuple[str, ...] = (), **props: str
) -> Message:
    built = Message()
    built.topic = topic
    built.body = body
    if tag is not None:
        built.tag = tag
    for key in keys:
        built.keys = key
    for name, value in props.items():
        built.add_property(name, value)
    return built


async def call(function: Callable[..., Any], *args: Any) -> Any:
    """Call the official client (blocking) off the event loop."""
    return await asyncio.to_thread(function, *args)


def assert_message_groups_in_order(received: list[StoredMessage], groups: list[str], per_group: int) -> None:
    """FIFO sends of ``groups`` (bodies ``<group>:<seq>``) as stored: each message group (the
    sharding key) in one queue, in send order."""
    for group in groups:
        mine = [m for m in received if m.properties.get("__SHARDINGKEY") == group]
        assert len({m.queue_id for m in mine}) == 1, f"group {group} spread over queues"
        assert [m.body for m in sorted(mine, key=lambda m: m.queue_offset)] == [
            f"{group}:{seq}".encode() for seq in range(per_group)
        ]
