"""``orbitmq bench v2``: the official Apache RocketMQ 5 clients (Python and Java, ``--clients``)
through ``orbitmq proxy``, with orbitmq's own client doing the same work against the same
cluster in the same run.

Name server, broker and proxy run as child processes; the Python clients run in this process
(the official one on its own I/O thread, as it always does), the Java client in JVMs of its own
(:mod:`orbitmq.bench.v2_java`: ``v2_java_send_per_s`` with 8 threads of blocking sends against
orbitmq's producer with 8 sends in flight, ``v2_java_send_p99_ms``, ``v2_java_receive_ack_per_s``
draining the backlogs below with async acks, and each process's CPU per message). The Python
client's figures (1 KiB bodies):

* ``v2_send_per_s`` — sends with ``in_flight`` outstanding (the official client's
  ``send_async``); baseline: orbitmq's producer with as many sends in flight. Target ratio ≥ 0.5.
  Both throughput figures alternate rounds of each side, so a change of load hits both alike.
* ``v2_send_sequential_per_s`` — one send at a time (each waits for its receipt); baseline:
  orbitmq's producer the same way.
* ``v2_receive_ack_per_s`` — draining a backlog of ``messages`` (8 queues, loaded before):
  the official ``SimpleConsumer`` receives batches of up to 32 with ``RECEIVES_IN_FLIGHT``
  receives outstanding (its future API) and acks every message, ``ACKS_IN_FLIGHT`` acks
  outstanding on ``ACK_THREADS`` threads (its ``ack_async`` is unusable in 5.1.x); baseline:
  orbitmq's push consumer of another group draining the same backlog
  (offsets committed as it goes). Rate of each side from its first delivered batch to its
  last message (the first batch's messages not counted), so the consumers' different start-ups
  (settings and routes; rebalance) are left out alike. The two groups alternate which drains
  first over ``DRAIN_ROUNDS`` backlogs. Target ratio ≥ 0.5.
* ``v2_produce_to_receive_p99_ms`` — sends paced at 1 000 msg/s, latency from before the send
  to an orbitmq push consumer's listener; baseline: the same with orbitmq's producer.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import click

from orbitmq.bench import v2_java
from orbitmq.bench.broker import Process, cli
from orbitmq.bench.e2e import _produce, _wait, cluster
from orbitmq.bench.figures import Figure
from orbitmq.client.admin import Admin
from orbitmq.client.consumer import PushConsumer
from orbitmq.client.consumer_types import ConsumeFromWhere, ConsumeStatus
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.store.record import StoredMessage

BODY = bytes(1024)
SENT_AT = "bench_sent_us"
"""User property: wall-clock microseconds just before the send (latency figure)."""
PACED_RATE = 1_000
PACED_SECONDS = 5
ROUNDS = 4
"""Throughput is measured in this many alternating rounds per side."""
DRAIN_ROUNDS = 2
"""Backlogs drained by both consumers, each side first once."""
RECEIVE_BATCH = 32
RECEIVES_IN_FLIGHT = 4
ACKS_IN_FLIGHT = 64
ACK_THREADS = 16
INVISIBLE_S = 60
"""Longer than a drain takes, so no message comes back before its ack."""
BACKLOG_QUEUES = 8
STALL_S = 60
"""A drain that makes no progress this long fails the run instead of hanging."""
CLIENTS = ("python", "java")
"""The official clients ``--clients`` picks from."""


def _official() -> Any:
    """The official client's modules; it logs under $HOME/logs on import, so HOME is a temporary
    directory for the import."""
    home = os.environ.get("HOME")
    os.environ["HOME"] = str(Path(tempfile.gettempdir()) / "orbitmq-rocketmq-python-client")
    try:
        import rocketmq.v5.client as client
        import rocketmq.v5.model as model
        import rocketmq.v5.producer as producer
    except ImportError:
        raise click.ClickException(
            "orbitmq bench v2 needs the official client: pip install 'rocketmq-python-client>=5.1.2,<5.2' "
            "(it comes with orbitmq's test extra)"
        ) from None
    finally:
        if home is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = home
    return client, model, producer


def _official_message(model: Any, topic: str, **properties: str) -> Any:
    message = model.Message()
    message.topic = topic
    message.body = BODY
    for key, value in properties.items():
        message.add_property(key, value)
    return message


class _OfficialSender:
    """A started official producer; each method blocks (call it in a thread)."""

    def __init__(self, proxy: str, topic: str) -> None:
        client, self._model, producer_module = _official()
        self._topic = topic
        self._producer = producer_module.Producer(
            client.ClientConfiguration(proxy, client.Credentials()), [topic]
        )
        self._producer.startup()
        self._producer.send(self._message())  # routes and channel warm

    def _message(self) -> Any:
        return _official_message(self._model, self._topic)

    def one_at_a_time(self, count: int) -> float:
        """Seconds for ``count`` sends, each waiting for its receipt."""
        started = time.perf_counter()
        for _ in range(count):
            self._producer.send(self._message())
        return time.perf_counter() - started

    def in_flight(self, count: int, in_flight: int) -> float:
        """Seconds for ``count`` sends with ``in_flight`` outstanding (``send_async``)."""
        started = time.perf_counter()
        window: list[Any] = []
        for _ in range(count):
            window.append(self._producer.send_async(self._message()))
            if len(window) >= in_flight:
                window.pop(0).result()
        for future in window:
            future.result()
        return time.perf_counter() - started

    def close(self) -> None:
        self._producer.shutdown()


async def _orbitmq_one_at_a_time(producer: Producer, topic: str, count: int) -> float:
    started = time.perf_counter()
    for _ in range(count):
        await producer.send(Message(topic, BODY))
    return time.perf_counter() - started


async def _orbitmq_in_flight(producer: Producer, topic: str, count: int, in_flight: int) -> float:
    slots = asyncio.Semaphore(in_flight)

    async def one() -> None:
        async with slots:
            await producer.send(Message(topic, BODY))

    started = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(count)))
    return time.perf_counter() - started


async def _throughput(
    namesrv: str, proxy: str, messages: int, in_flight: int
) -> dict[str, tuple[float, float]]:
    """msg/s (official, orbitmq) one at a time and with ``in_flight`` outstanding, measured in
    alternating rounds so a change of the machine's load hits both sides alike."""
    official = await asyncio.to_thread(_OfficialSender, proxy, "BenchV2Official")
    seconds = {"one": [0.0, 0.0], "flight": [0.0, 0.0]}
    per_round = max(1, messages // ROUNDS)
    try:
        async with Producer("bench-v2", namesrv) as ours:
            await ours.send(Message("BenchV2Orbitmq", BODY))
            for _ in range(ROUNDS):
                seconds["one"][0] += await asyncio.to_thread(official.one_at_a_time, per_round)
                seconds["one"][1] += await _orbitmq_one_at_a_time(ours, "BenchV2Orbitmq", per_round)
                seconds["flight"][0] += await asyncio.to_thread(official.in_flight, per_round, in_flight)
                seconds["flight"][1] += await _orbitmq_in_flight(ours, "BenchV2Orbitmq", per_round, in_flight)
    finally:
        await asyncio.to_thread(official.close)
    total = per_round * ROUNDS
    return {name: (total / theirs, total / mine) for name, (theirs, mine) in seconds.items()}


class _OfficialDrainer:
    """A started official ``SimpleConsumer`` of one topic; :meth:`drain` blocks (call it in a
    thread)."""

    def __init__(self, proxy: str, topic: str, group: str) -> None:
        client, _model, _producer = _official()
        from rocketmq.v5.consumer import SimpleConsumer
        from rocketmq.v5.model import FilterExpression

        self._consumer = SimpleConsumer(
            client.ClientConfiguration(proxy, client.Credentials()),
            group,
            {topic: FilterExpression()},
            await_duration=1,
        )
        self._consumer.startup()
        self._ackers = ThreadPoolExecutor(ACK_THREADS, thread_name_prefix="bench-v2-ack")

    def drain(self, total: int) -> tuple[int, float]:
        """(messages after the first batch, seconds from the first batch to the last ack) of
        receiving and acking ``total`` messages.

        ``SimpleConsumer.ack_async`` (5.1.x) drops the future it makes (and makes an asyncio
        future, which needs an event loop in the calling thread), so acks are blocking
        ``ack`` calls on ``ACK_THREADS`` threads, ``ACKS_IN_FLIGHT`` outstanding."""
        receives: list[Any] = []
        acks: list[Any] = []
        received = acked = 0
        first: tuple[int, float] | None = None
        progress = time.monotonic()
        while acked < total:
            if time.monotonic() - progress > STALL_S:
                raise RuntimeError(f"official consumer: nothing for {STALL_S} s ({acked}/{total} acked)")
            while received < total and len(receives) < RECEIVES_IN_FLIGHT:
                receives.append(self._consumer.receive_async(RECEIVE_BATCH, INVISIBLE_S))
            if receives and (receives[0].done() or not acks):
                messages = receives.pop(0).result()
                if messages:
                    progress = time.monotonic()
                if first is None and messages:
                    first = (len(messages), time.perf_counter())
                received += len(messages)
                for message in messages:
                    acks.append(self._ackers.submit(self._consumer.ack, message))
                    if len(acks) >= ACKS_IN_FLIGHT:
                        acks.pop(0).result()
                        acked += 1
                continue
            acks.pop(0).result()
            acked += 1
        finished = time.perf_counter()
        for future in receives:  # long polls past the backlog end within await_duration
            future.exception()
        assert first is not None
        return total - first[0], finished - first[1]

    def close(self) -> None:
        self._ackers.shutdown()
        self._consumer.shutdown()


async def _orbitmq_drain(namesrv: str, topic: str, group: str, total: int) -> tuple[int, float]:
    """(messages after the first batch, seconds from the first batch to the last message) of
    orbitmq's push consumer draining ``total`` messages from the first offset."""
    done = asyncio.Event()
    seen = 0
    first: tuple[int, float] | None = None

    async def listener(messages: list[StoredMessage]) -> ConsumeStatus:
        nonlocal seen, first
        if first is None:
            first = (len(messages), time.perf_counter())
        seen += len(messages)
        if seen >= total:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, namesrv, listener=listener, consume_from=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic)
    await consumer.start()
    try:
        try:
            await asyncio.wait_for(done.wait(), STALL_S * 10)
        except TimeoutError:
            raise RuntimeError(f"orbitmq's push consumer got {seen} of {total} in {STALL_S * 10} s") from None
        finished = time.perf_counter()
    finally:
        await consumer.close()
    assert first is not None
    return total - first[0], finished - first[1]


Drainer = Callable[[str, str, int], Awaitable[tuple[int, float]]]
"""One side of the drains: (topic, group, backlog size) -> (messages after the first batch,
seconds from the first batch to the last message)."""


async def _official_drain(proxy: str, topic: str, group: str, total: int) -> tuple[int, float]:
    official = await asyncio.to_thread(_OfficialDrainer, proxy, topic, group)
    try:
        return await asyncio.to_thread(official.drain, total)
    finally:
        await asyncio.to_thread(official.close)


async def _load_backlog(namesrv: str, topic: str, messages: int) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic(topic, read_queue_nums=BACKLOG_QUEUES, write_queue_nums=BACKLOG_QUEUES)
    await asyncio.sleep(0.5)
    await asyncio.to_thread(_wait, _produce(namesrv, topic, messages))


async def _receive_throughput(namesrv: str, messages: int, drainers: dict[str, Drainer]) -> dict[str, float]:
    """msg/s of each side draining the same backlogs of ``messages`` (a group of its own each),
    alternating which side drains first."""
    counts = dict.fromkeys(drainers, 0)
    seconds = dict.fromkeys(drainers, 0.0)
    for round_ in range(DRAIN_ROUNDS):
        topic = f"BenchV2Backlog{round_}"
        await _load_backlog(namesrv, topic, messages)
        for side in list(drainers) if round_ % 2 == 0 else list(reversed(drainers)):
            count, spent = await drainers[side](topic, f"bench-v2-{side}-{round_}", messages)
            counts[side] += count
            seconds[side] += spent
    return {side: counts[side] / seconds[side] for side in drainers}


def _paced_official(proxy: str, topic: str) -> None:
    client, model, producer_module = _official()
    producer = producer_module.Producer(client.ClientConfiguration(proxy, client.Credentials()), [topic])
    producer.startup()
    try:
        _pace(
            lambda: producer.send(_official_message(model, topic, **{SENT_AT: str(time.time_ns() // 1000)}))
        )
    finally:
        producer.shutdown()


async def _paced_orbitmq(namesrv: str, topic: str) -> None:
    async with Producer("bench-v2-paced", namesrv) as producer:
        started = time.perf_counter()
        for i in range(PACED_RATE * PACED_SECONDS):
            delay = started + i / PACED_RATE - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await producer.send(Message(topic, BODY, properties={SENT_AT: str(time.time_ns() // 1000)}))


def _pace(send: Callable[[], object]) -> None:
    started = time.perf_counter()
    for i in range(PACED_RATE * PACED_SECONDS):
        delay = started + i / PACED_RATE - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        send()


async def _latency_p99(namesrv: str, topic: str, produce: Callable[[], Any]) -> float:
    """p99 ms from before a send to the listener, for sends paced by ``produce``."""
    latencies: list[float] = []
    lock = threading.Lock()

    def listener(messages: list[StoredMessage]) -> ConsumeStatus:
        now_us = time.time_ns() // 1000
        with lock:
            latencies.extend((now_us - int(m.properties[SENT_AT])) / 1000 for m in messages)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(f"bench-v2-{topic}", namesrv, listener=listener)
    consumer.subscribe(topic)
    await consumer.start()
    await asyncio.sleep(0.5)
    await produce()
    deadline = time.monotonic() + 10
    while len(latencies) < PACED_RATE * PACED_SECONDS and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.05)
    await consumer.close()
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else float("nan")


async def _receive_figures(
    namesrv: str, proxy: str, pids: dict[str, int], messages: int, clients: tuple[str, ...], work_dir: Path
) -> list[Figure]:
    """Every client in ``clients`` and orbitmq's push consumer drain the same backlogs."""
    push, push_pids = v2_java.Tally(), {"client": os.getpid(), "broker": pids["broker"]}

    async def push_drain(topic: str, group: str, total: int) -> tuple[int, float]:
        before = v2_java.cpu_seconds(push_pids)
        count, spent = await _orbitmq_drain(namesrv, topic, group, total)
        push.add(count, spent, before, v2_java.cpu_seconds(push_pids))
        return count, spent

    drainers: dict[str, Drainer] = {}
    if "python" in clients:
        drainers["official"] = functools.partial(_official_drain, proxy)
    java: v2_java.JavaDrainer | None = None
    async with contextlib.AsyncExitStack() as stack:
        if "java" in clients:
            client = await stack.enter_async_context(v2_java.receiver(work_dir, proxy))
            await client.event("started")
            java = v2_java.JavaDrainer(client, pids)
            warm = v2_java.WARMUP_FACTOR * messages  # class loading, JIT
            await _load_backlog(namesrv, "BenchV2JavaWarm", warm)
            await java.warm("BenchV2JavaWarm", warm)
            drainers["java"] = java.drain
        drainers["push"] = push_drain
        rates = await _receive_throughput(namesrv, messages, drainers)
    baseline = f"orbitmq's push consumer draining the same backlog ({BACKLOG_QUEUES} queues)"
    figures = []
    if "official" in rates:
        figures.append(
            Figure(
                "v2_receive_ack_per_s", rates["official"], "msg/s", rates["push"], baseline, "ratio >= 0.5"
            )
        )
    if java is not None:
        figures.append(
            Figure(
                "v2_java_receive_ack_per_s", rates["java"], "msg/s", rates["push"], baseline, "ratio >= 0.3"
            )
        )
        figures += v2_java.cpu_figures(
            "v2_java_receive",
            java.tally,
            java.drained,
            push,
            DRAIN_ROUNDS * messages,
            "orbitmq's push consumer",
        )
    return figures


async def _measure(
    namesrv: str,
    proxy: str,
    pids: dict[str, int],
    emit: Callable[[Figure], None],
    messages: int,
    in_flight: int,
    clients: tuple[str, ...],
    work_dir: Path,
) -> None:
    topics = ("BenchV2Official", "BenchV2Orbitmq", "BenchV2Java", "BenchV2LatOfficial", "BenchV2LatOrbitmq")
    for topic in topics:
        async with Producer("bench-v2-setup", namesrv) as producer:
            await producer.send(Message(topic, b"create"))
    if "python" in clients:
        rates = await _throughput(namesrv, proxy, messages, in_flight)
        baseline = "orbitmq's producer, same work"
        flight, one = rates["flight"], rates["one"]
        emit(
            Figure(
                "v2_send_per_s",
                flight[0],
                "msg/s",
                flight[1],
                f"{baseline}, {in_flight} in flight",
                "ratio >= 0.5",
            )
        )
        emit(Figure("v2_send_sequential_per_s", one[0], "msg/s", one[1], f"{baseline}, one at a time"))
    if "java" in clients:
        java, ours = await v2_java.sends(namesrv, proxy, pids, work_dir, messages, ROUNDS)
        for figure in v2_java.send_figures(java, ours):
            emit(figure)
    for figure in await _receive_figures(namesrv, proxy, pids, messages, clients, work_dir):
        emit(figure)
    if "python" not in clients:
        return
    p99_theirs = await _latency_p99(
        namesrv, "BenchV2LatOfficial", lambda: asyncio.to_thread(_paced_official, proxy, "BenchV2LatOfficial")
    )
    p99_ours = await _latency_p99(
        namesrv, "BenchV2LatOrbitmq", lambda: _paced_orbitmq(namesrv, "BenchV2LatOrbitmq")
    )
    emit(
        Figure(
            "v2_produce_to_receive_p99_ms",
            p99_theirs,
            "ms",
            p99_ours,
            "orbitmq's producer at 1 000 msg/s, same consumer",
        )
    )


def run(
    emit: Callable[[Figure], None],
    *,
    messages: int,
    in_flight: int,
    work_dir: Path | None,
    clients: tuple[str, ...] = CLIENTS,
) -> None:
    """The figures of each official client in ``clients`` ("python", "java")."""
    if "python" in clients:
        _official()  # fail before starting anything when the client is missing
    if "java" in clients:
        v2_java.build()
    with (
        tempfile.TemporaryDirectory(prefix="orbitmq-bench-v2-java-", dir=work_dir) as java_dir,
        cluster("v2", work_dir) as (namesrv, broker),
    ):
        proxy = Process(
            cli("proxy", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--namesrv", namesrv.address)
        )
        pids = {"proxy": proxy.popen.pid, "broker": broker.popen.pid}
        try:
            asyncio.run(
                _measure(
                    namesrv.address, proxy.address, pids, emit, messages, in_flight, clients, Path(java_dir)
                )
            )
        finally:
            proxy.stop()
