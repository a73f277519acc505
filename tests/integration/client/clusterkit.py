"""A real cluster in the test process (name server + brokers on free ports, real files) and a
thread-safe collector of what consumers' listeners received."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
from brokerkit import RunningBroker, start_broker, stop_broker

from orbitmq.client.consumer import PushConsumer
from orbitmq.client.consumer_types import ConsumeFromWhere, ConsumerSettings
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.store.record import StoredMessage

FAST = ConsumerSettings(
    rebalance_ms=2_000,
    heartbeat_ms=1_000,
    persist_ms=500,
    route_refresh_ms=1_000,
    lock_renew_ms=1_000,
    orderly_recheck_ms=200,
    suspend_orderly_ms=200,
    exception_delay_ms=300,
    suspend_timeout_ms=2_000,
    shutdown_timeout_ms=5_000,
)
"""Consumer timings shortened so tests see rebalances, renewals and commits in seconds."""


@dataclass
class Cluster:
    root: Path
    namesrv: NameServer
    brokers: dict[str, RunningBroker] = field(default_factory=dict)
    options: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return self.namesrv.address

    async def start_broker(self, name: str, **overrides: Any) -> RunningBroker:
        self.options.setdefault(name, overrides)
        options = {"broker_name": name, **self.options[name]}
        running = await start_broker(self.root / name, namesrv=self.address, **options)
        self.brokers[name] = running
        return running

    async def stop_broker(self, name: str) -> None:
        await stop_broker(self.brokers.pop(name))

    async def restart_broker(self, name: str) -> RunningBroker:
        """Stop gracefully and start again on the same data and the same port."""
        port = self.brokers[name].broker.address.rsplit(":", 1)[1]
        await self.stop_broker(name)
        self.options[name] = {**self.options[name], "listen": f"127.0.0.1:{port}"}
        return await self.start_broker(name)

    async def close(self) -> None:
        for name in list(self.brokers):
            await self.stop_broker(name)
        await self.namesrv.close()


async def start_cluster(root: Path, brokers: tuple[str, ...] = ("broker-a",), **overrides: Any) -> Cluster:
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None))
    await namesrv.start()
    cluster = Cluster(root, namesrv)
    for name in brokers:
        await cluster.start_broker(name, **overrides)
    return cluster


async def run_cli(cluster: Cluster, *args: str) -> tuple[int, str, str]:
    """Run ``orbitmq ARGS`` as a user would, against ``cluster``: (exit status, stdout, stderr)."""

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "orbitmq.cli.main", *args],
            env={**os.environ, "ORBITMQ_NAMESRV": cluster.address, "HOME": str(cluster.root)},
            capture_output=True,
            text=True,
            timeout=60,
        )

    done = await asyncio.to_thread(run)
    return done.returncode, done.stdout, done.stderr


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """A /metrics page as {(sample name, sorted labels): value} (blocking: call in a thread)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=5) as reply:
        text = reply.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def eventually(
    condition: Callable[[], Any], within: float, explain: Callable[[], str] = lambda: "condition"
) -> Any:
    """Poll ``condition`` (a plain or async callable) until it is truthy; fail after ``within`` s."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {explain()}")
        await asyncio.sleep(0.05)


@dataclass
class Delivery:
    consumer: str
    message: StoredMessage
    at: float


class Collector:
    """Listeners for several consumers that record every delivery (called from pool threads)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.deliveries: list[Delivery] = []

    def listener(self, name: str, result: Any = None, before: Callable[[StoredMessage], Any] | None = None):  # type: ignore[no-untyped-def]
        def listen(messages: list[StoredMessage]) -> Any:
            outcome = result
            for message in messages:
                if before is not None:
                    outcome = before(message) or outcome
                with self._lock:
                    self.deliveries.append(Delivery(name, message, time.monotonic()))
            return outcome

        return listen

    def bodies(self, consumer: str | None = None) -> list[str]:
        with self._lock:
            return [d.message.body.decode() for d in self.deliveries if consumer in (None, d.consumer)]

    def count(self, consumer: str | None = None) -> int:
        return len(self.bodies(consumer))

    async def wait_for(self, count: int, within: float = 30, consumer: str | None = None) -> None:
        await eventually(
            lambda: self.count(consumer) >= count,
            within,
            lambda: f"{self.count(consumer)} of {count} messages delivered in {within} s",
        )

    async def settle(self, quiet: float = 1.0) -> None:
        """Wait until nothing new arrives for ``quiet`` seconds."""
        seen = -1
        while seen != self.count():
            seen = self.count()
            await asyncio.sleep(quiet)


@asynccontextmanager
async def consuming(namesrv: str, topic: str, group: str, collector: Collector) -> AsyncIterator[None]:
    """A push consumer of ``topic`` as ``group`` from the first offset, delivering to
    ``collector`` (named after the group) while the block runs."""
    consumer = PushConsumer(
        group,
        namesrv,
        listener=collector.listener(group),
        settings=FAST,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe(topic)
    await consumer.start()
    try:
        yield
    finally:
        await consumer.close()


async def consume_all(
    namesrv: str, topic: str, bodies: Iterable[str], group: str, within: float = 30
) -> None:
    """Consume ``topic`` from its first offset as a new ``group`` until every one of ``bodies``
    has been delivered (what a failover or a roll test checks of its acknowledged sends)."""
    expected = set(bodies)
    collector = Collector()
    async with consuming(namesrv, topic, group, collector):
        await eventually(
            lambda: expected <= set(collector.bodies()),
            within,
            lambda: f"{len(expected - set(collector.bodies()))} acknowledged messages not consumed",
        )
