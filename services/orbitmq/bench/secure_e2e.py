"""``orbitmq bench e2e --secure``: a cluster with TLS, authentication and authorization against
the same cluster without, in one run (see :mod:`orbitmq.bench.secure`).

Two clusters (a name server and a broker each, child processes); the secure one's clients act
as the normal user over TLS. Figures (1 KiB bodies, topics of 8 queues), secure as the value and
plain as the baseline:

* ``secure_e2e_produce_batched`` — ``orbitmq produce --batch 128`` children loading a backlog
  (process start included, as ``bench e2e``'s producer-alone figure), rounds alternating.
* ``secure_e2e_consume`` — a push consumer (default settings) draining that backlog, a round's
  topic each, rounds alternating; msg/s from consumer start to the last message.
* ``secure_send_p50_us`` / ``secure_send_p99_us`` — a sync ``Producer.send`` (auto batch on, one
  send in flight: each is a call of its own), the two clusters' sends interleaved one by one at
  500 msg/s each, so both sides see the same moments of the machine; the ratio is secure latency
  over plain (lower is better).
* ``secure_e2e_latency_p99_ms`` — born timestamp to the listener of those sends.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from orbitmq.bench.e2e import BODY, QUEUES, _consume, _p, _produce, _wait, cluster
from orbitmq.bench.figures import Figure
from orbitmq.bench.secure import APP_USER, SecureSetup, alternate, make_setup, spread
from orbitmq.client.admin import Admin
from orbitmq.client.consumer import PushConsumer
from orbitmq.client.consumer_types import ConsumeStatus
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.common.tls import ClientTls
from orbitmq.store.record import StoredMessage

ROUNDS = 5
LATENCY_TOPIC = "SecureLatency"


def _topics() -> tuple[str, ...]:
    return (*(f"SecureE2E{index}" for index in range(ROUNDS)), LATENCY_TOPIC)


def _plain_env() -> dict[str, str]:
    """This process's environment without TLS or credentials: the plain side's children."""
    drop = ("ORBITMQ_TLS_", "ORBITMQ_ACCESS_KEY", "ORBITMQ_SECRET_KEY")
    return {name: value for name, value in os.environ.items() if not name.startswith(drop)}


class Side:
    """One cluster as the bench's clients reach it."""

    def __init__(self, namesrv: str, setup: SecureSetup | None) -> None:
        self.namesrv = namesrv
        self.setup = setup
        self.client: dict[str, Any] = (
            {"tls": setup.tls, "credentials": setup.app_credentials} if setup else {"tls": ClientTls()}
        )
        self.child_env = setup.client_env() if setup else _plain_env()

    async def prepare(self) -> None:
        """The topics (as the super user on the secure side), and there the user and its ACL."""
        setup = self.setup
        keywords: dict[str, Any] = (
            {"tls": setup.tls, "credentials": setup.super_credentials} if setup else {"tls": ClientTls()}
        )
        async with Admin(self.namesrv, **keywords) as admin:
            for topic in _topics():
                await admin.create_topic(topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
            if setup is not None:
                await admin.create_user(APP_USER, setup.app_secret)
                await admin.create_acl(setup.acl_document())

    async def produce(self, topic: str, count: int) -> float:
        started = time.perf_counter()
        await asyncio.to_thread(_wait, _produce(self.namesrv, topic, count, self.child_env))
        return count / (time.perf_counter() - started)

    async def consume(self, topic: str, group: str, count: int, label: str) -> float:
        return count / await _consume(self.namesrv, topic, group, count, label, **self.client)


async def _measure(
    secure: Side, plain: Side, emit: Callable[[Figure], None], messages: int, latency_s: float
) -> None:
    await asyncio.gather(secure.prepare(), plain.prepare())
    await asyncio.sleep(0.5)
    topics = _topics()
    done: dict[Side, int] = {secure: 0, plain: 0}
    """Rounds each side has run: round ``n`` of either side uses topic ``n``."""

    async def produce_round(side: Side) -> float:
        index, done[side] = done[side], done[side] + 1
        return await side.produce(topics[index], messages)

    secure_rates, plain_rates = await alternate(
        lambda: produce_round(secure), lambda: produce_round(plain), ROUNDS
    )
    emit(_figure("secure_e2e_produce_batched", secure_rates, plain_rates, "orbitmq produce --batch 128", 0.8))

    done.update({secure: 0, plain: 0})

    async def consume_round(side: Side) -> float:
        index, done[side] = done[side], done[side] + 1
        label = f"{'secure' if side is secure else 'plain'} drain {index + 1}/{ROUNDS}"
        return await side.consume(topics[index], f"bench-secure-e2e-{index}", messages, label)

    secure_rates, plain_rates = await alternate(
        lambda: consume_round(secure), lambda: consume_round(plain), ROUNDS
    )
    emit(_figure("secure_e2e_consume", secure_rates, plain_rates, "push consumer draining a backlog", 0.8))

    sends, ends = await _interleaved_latency(secure, plain, latency_s)
    for quantile, name in ((0.5, "secure_send_p50_us"), (0.99, "secure_send_p99_us")):
        emit(
            Figure(
                name,
                _p(sends[secure], quantile) * 1000,
                "us",
                _p(sends[plain], quantile) * 1000,
                "plain cluster's sync send, interleaved one by one at 500 msg/s each",
                "ratio <= 1.67 (throughput ratio >= 0.6)" if quantile == 0.5 else "",
            )
        )
    emit(
        Figure(
            "secure_e2e_latency_p99_ms",
            _p(ends[secure], 0.99),
            "ms",
            _p(ends[plain], 0.99),
            "plain cluster, born timestamp to listener, same sends",
        )
    )


async def _interleaved_latency(
    secure: Side, plain: Side, seconds: float
) -> tuple[dict[Side, list[float]], dict[Side, list[float]]]:
    """Send-call latencies (ms) and born-to-listener latencies (ms) per side."""
    sides = (secure, plain)
    ends: dict[Side, list[float]] = {side: [] for side in sides}
    sends: dict[Side, list[float]] = {side: [] for side in sides}
    lock = threading.Lock()

    def listener_of(side: Side) -> Callable[[list[StoredMessage]], ConsumeStatus]:
        def listener(messages: list[StoredMessage]) -> ConsumeStatus:
            now = time.time() * 1000
            with lock:
                ends[side].extend(now - m.born_timestamp_ms for m in messages)
            return ConsumeStatus.CONSUME_SUCCESS

        return listener

    consumers = [
        PushConsumer("bench-secure-latency", side.namesrv, listener=listener_of(side), **side.client)
        for side in sides
    ]
    for consumer in consumers:
        consumer.subscribe(LATENCY_TOPIC)
        await consumer.start()
    await asyncio.sleep(0.5)
    count = int(seconds * 500)
    async with (
        Producer("bench-secure-latency", secure.namesrv, **secure.client) as secure_producer,
        Producer("bench-secure-latency", plain.namesrv, **plain.client) as plain_producer,
    ):
        producers = {secure: secure_producer, plain: plain_producer}
        for side in sides:  # routes and connections before the clock starts
            await producers[side].send(Message(LATENCY_TOPIC, bytes(BODY)))
        started = time.perf_counter()
        for index in range(count):
            delay = started + index / 500 - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            order = sides if index % 2 == 0 else sides[::-1]
            for side in order:
                before = time.perf_counter()
                await producers[side].send(Message(LATENCY_TOPIC, bytes(BODY)))
                sends[side].append((time.perf_counter() - before) * 1000)
    deadline = time.monotonic() + 10
    while min(len(ends[s]) for s in sides) < count and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    for consumer in consumers:
        await consumer.close()
    return sends, ends


def _figure(name: str, secure: list[float], plain: list[float], how: str, target: float) -> Figure:
    return Figure(
        name,
        statistics.median(secure),
        "msg/s",
        statistics.median(plain),
        f"plain cluster, {how}, rounds alternating (secure {spread(secure)}, plain {spread(plain)})",
        f"ratio >= {target}",
    )


def run(emit: Callable[[Figure], None], *, messages: int, latency_s: float, work_dir: Path | None) -> None:
    with ExitStack() as stack:
        root = Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="orbitmq-bench-pki-", dir=work_dir))
        )
        setup = make_setup(root, _topics())
        secure_namesrv, _ = stack.enter_context(cluster("secure", work_dir, setup))
        plain_namesrv, _ = stack.enter_context(cluster("plain", work_dir))
        asyncio.run(
            _measure(
                Side(secure_namesrv.address, setup),
                Side(plain_namesrv.address, None),
                emit,
                messages,
                latency_s,
            )
        )
