"""``orbitmq bench e2e``: producers and push consumers against a live name server and broker.

The name server and broker run as child processes; producers run as ``orbitmq produce`` child
processes; consumers run in this process (and, for the memory figure, in a child of their own).
Figures (1 KiB bodies, a topic of 8 queues):

* ``e2e_consume`` — a push consumer (default settings, concurrent listener) draining a backlog;
  baseline: bare gRPC pulls of the same backlog (32 per call, one puller per queue, no decoding).
* ``e2e_consume_client_us`` / ``e2e_consume_broker_us`` — CPU microseconds per message of that
  drain in this process (the consumer) and in the broker process, from consumer start to the
  last message; baseline: the same for the bare pulls.
* ``e2e_produce_and_consume`` — a producer child and the consumer at the same time, msg/s until
  the last message is consumed; baseline: the producer alone (the backlog's load rate).
* ``e2e_latency_p99_ms`` — sends paced at 1 000 msg/s, latency from the born timestamp to the
  listener; baseline: the p99 of the send call itself in the same run.
* ``consumer_peak_rss_mb`` — a consumer process with a slow listener over a large backlog: its
  peak resident memory; baseline: the same process just before the consumer starts. Flow control
  (1 000 messages / 100 MiB per queue) must keep the difference near 8 queues x 1 000 x 1 KiB.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
from tqdm import tqdm

from orbitmq.bench.broker import Process, broker_process, cli, drain_queue
from orbitmq.bench.figures import Figure
from orbitmq.bench.secure import SecureSetup
from orbitmq.client.admin import Admin
from orbitmq.client.consumer import PushConsumer
from orbitmq.client.consumer_types import ConsumeFromWhere, ConsumeStatus
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.common.server import GRPC_OPTIONS
from orbitmq.store.record import StoredMessage
from orbitmq.v1 import broker_pb2_grpc

QUEUES = 8
BODY = 1024


def _produce(
    namesrv: str, topic: str, count: int, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``orbitmq produce`` of ``count`` 1 KiB messages in batches of 128 (``env``: the child's
    environment, e.g. TLS and credentials; default this process's)."""
    return subprocess.Popen(
        cli(
            "produce",
            "--namesrv",
            namesrv,
            "--topic",
            topic,
            "--count",
            str(count),
            "--size",
            str(BODY),
            "--batch",
            "128",
            "--json",
        ),
        stdout=subprocess.DEVNULL,
        env=env,
    )


def _wait(process: subprocess.Popen[bytes]) -> None:
    if process.wait() != 0:
        raise RuntimeError(f"producer exited with {process.returncode}")


async def _bare_pulls(broker: str, topic: str, total: int) -> float:
    """Seconds for bare PullMessage loops (one per queue) to fetch ``total`` messages."""
    async with grpc.aio.insecure_channel(broker, options=GRPC_OPTIONS) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        started = time.perf_counter()
        fetched = sum(
            await asyncio.gather(*(drain_queue(stub, "bench-bare", topic, q) for q in range(QUEUES)))
        )
        elapsed = time.perf_counter() - started
    if fetched != total:
        raise RuntimeError(f"bare pulls found {fetched} messages, expected {total}")
    return elapsed


def _cpu_s(pid: int | None = None) -> float:
    """User plus system CPU seconds of process ``pid`` (default: this one), from /proc."""
    with open(f"/proc/{pid or 'self'}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _consume(
    namesrv: str,
    topic: str,
    group: str,
    total: int,
    label: str,
    during: Callable[[], object] | None = None,
    **client: Any,
) -> float:
    """Seconds from consumer start until ``total`` messages were consumed (``client``: more
    keywords of the consumer, e.g. ``tls`` and ``credentials``)."""
    done = asyncio.Event()
    seen = 0
    bar = tqdm(total=total, desc=label, unit="msg", unit_scale=True, leave=False, file=sys.stderr)

    async def listener(messages: list[StoredMessage]) -> ConsumeStatus:
        nonlocal seen
        seen += len(messages)
        bar.update(len(messages))
        if seen >= total:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        group, namesrv, listener=listener, consume_from=ConsumeFromWhere.FIRST_OFFSET, **client
    )
    consumer.subscribe(topic)
    started = time.perf_counter()
    if during is not None:
        during()
    await consumer.start()
    await done.wait()
    elapsed = time.perf_counter() - started
    bar.close()
    await consumer.close()
    return elapsed


async def _latency(namesrv: str, topic: str, seconds: float) -> tuple[list[float], list[float]]:
    latencies: list[float] = []
    lock = threading.Lock()

    def listener(messages: list[StoredMessage]) -> ConsumeStatus:
        now = time.time() * 1000
        with lock:
            latencies.extend(now - m.born_timestamp_ms for m in messages)
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer("bench-latency", namesrv, listener=listener)
    consumer.subscribe(topic)
    await consumer.start()
    await asyncio.sleep(0.5)
    sends: list[float] = []
    count = int(seconds * 1000)
    async with Producer("bench-latency", namesrv) as producer:
        started = time.perf_counter()
        for i in range(count):
            delay = started + i / 1000 - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            before = time.perf_counter()
            await producer.send(Message(topic, bytes(BODY)))
            sends.append((time.perf_counter() - before) * 1000)
    deadline = time.monotonic() + 10
    while len(latencies) < count and time.monotonic() < deadline:  # noqa: ASYNC110 - a deadline too
        await asyncio.sleep(0.05)
    await consumer.close()
    return latencies, sends


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _measure(
    namesrv: str,
    broker: Process,
    emit: Callable[[Figure], None],
    messages: int,
    backlog: int,
    latency_s: float,
    rss_s: float,
    consume_only: bool,
) -> None:
    async with Admin(namesrv) as admin:
        for topic in ("E2E", "E2ELive", "E2ELatency", "E2ESlow"):
            await admin.create_topic(topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    await asyncio.sleep(0.5)

    started = time.perf_counter()
    await asyncio.to_thread(_wait, _produce(namesrv, "E2E", messages))
    produce_alone = messages / (time.perf_counter() - started)
    pid = broker.popen.pid
    broker_cpu, client_cpu = _cpu_s(pid), _cpu_s()
    bare = messages / await _bare_pulls(broker.address, "E2E", messages)
    bare_broker_us = (_cpu_s(pid) - broker_cpu) / messages * 1e6
    bare_client_us = (_cpu_s() - client_cpu) / messages * 1e6
    broker_cpu, client_cpu = _cpu_s(pid), _cpu_s()
    consumed = messages / await _consume(namesrv, "E2E", "bench-e2e", messages, "e2e_consume")
    broker_us = (_cpu_s(pid) - broker_cpu) / messages * 1e6
    client_us = (_cpu_s() - client_cpu) / messages * 1e6
    emit(Figure("e2e_consume", consumed, "msg/s", bare, "bare gRPC pulls of the backlog", ">= 50000"))
    emit(Figure("e2e_consume_client_us", client_us, "us/msg", bare_client_us, "bare pulls, no decoding"))
    emit(Figure("e2e_consume_broker_us", broker_us, "us/msg", bare_broker_us, "bare pulls of 32"))
    if consume_only:
        return

    live: list[subprocess.Popen[bytes]] = []
    seconds = await _consume(
        namesrv,
        "E2ELive",
        "bench-live",
        messages,
        "e2e_produce_and_consume",
        during=lambda: live.append(_produce(namesrv, "E2ELive", messages)),
    )
    await asyncio.to_thread(_wait, live[0])
    emit(
        Figure(
            "e2e_produce_and_consume",
            messages / seconds,
            "msg/s",
            produce_alone,
            "producer alone (batches of 128)",
        )
    )

    latencies, sends = await _latency(namesrv, "E2ELatency", latency_s)
    emit(Figure("e2e_latency_p50_ms", _p(latencies, 0.5), "ms", _p(sends, 0.5), "send call p50"))
    emit(
        Figure(
            "e2e_latency_p99_ms",
            _p(latencies, 0.99),
            "ms",
            _p(sends, 0.99),
            "send call p99",
            "reported at 1 000 msg/s",
        )
    )

    await asyncio.to_thread(_wait, _produce(namesrv, "E2ESlow", backlog))
    child = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "orbitmq.bench.e2e", namesrv, "E2ESlow", str(rss_s)],
        capture_output=True,
        text=True,
        check=True,
    )
    result = json.loads(child.stdout.strip().splitlines()[-1])
    bound = QUEUES * 1000 * BODY / 2**20
    emit(
        Figure(
            "consumer_peak_rss_mb",
            result["peak_mb"],
            "MB",
            result["before_mb"],
            f"same process before the consumer started; consumed {result['consumed']} of {backlog}",
            f"<= baseline + flow-control bound ({bound:.0f} MB of bodies) + overhead",
        )
    )


def run(
    emit: Callable[[Figure], None],
    *,
    messages: int,
    backlog: int,
    latency_s: float,
    rss_s: float,
    work_dir: Path | None,
    consume_only: bool = False,
) -> None:
    """Every figure, or with ``consume_only`` the backlog drain's three (e2e_consume and its CPU)."""
    with cluster("e2e", work_dir) as (namesrv, broker):
        asyncio.run(
            _measure(namesrv.address, broker, emit, messages, backlog, latency_s, rss_s, consume_only)
        )


@contextmanager
def cluster(
    name: str, work_dir: Path | None, secure: SecureSetup | None = None
) -> Iterator[tuple[Process, Process]]:
    """A name server and a broker as child processes on a temporary store; with ``secure``,
    both serve TLS with its certificate and have auth on with its super user."""
    data = Path(tempfile.mkdtemp(prefix=f"orbitmq-bench-{name}-", dir=work_dir))
    env = secure.server_env() if secure else None
    namesrv_flags = secure.server_flags("namesrv") if secure else []
    namesrv = Process(cli("namesrv", "--listen", "127.0.0.1:0", "--metrics-listen", "", *namesrv_flags), env)
    broker = None
    try:
        broker_flags = secure.server_flags("broker") if secure else []
        broker = broker_process(data, *broker_flags, namesrv=namesrv.address, env=env)
        yield namesrv, broker
    finally:
        if broker is not None:
            broker.stop()
        namesrv.stop()
        shutil.rmtree(data, ignore_errors=True)


@contextmanager
def cluster_processes(name: str, work_dir: Path | None) -> Iterator[tuple[str, str]]:
    """:func:`cluster`, yielding the name server's and the broker's addresses."""
    with cluster(name, work_dir) as (namesrv, broker):
        yield namesrv.address, broker.address


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def _slow_consumer(namesrv: str, topic: str, seconds: float) -> dict[str, float]:
    """The memory figure's child: a listener that takes 10 ms per message over a large backlog."""
    consumed = 0

    def slow(messages: list[StoredMessage]) -> ConsumeStatus:
        nonlocal consumed
        time.sleep(0.010 * len(messages))
        consumed += len(messages)
        return ConsumeStatus.CONSUME_SUCCESS

    before = _rss_mb()
    peak = before
    consumer = PushConsumer("bench-slow", namesrv, listener=slow, consume_from=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic)
    await consumer.start()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak = max(peak, _rss_mb())
        await asyncio.sleep(0.1)
    await consumer.close()
    peak = max(peak, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    return {"before_mb": before, "peak_mb": peak, "consumed": consumed}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_slow_consumer(sys.argv[1], sys.argv[2], float(sys.argv[3])))))
