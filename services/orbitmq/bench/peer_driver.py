"""``python -m orbitmq.bench.peer_driver``: orbitmq's driver for ``orbitmq bench peer``.

It runs one workload of :mod:`orbitmq.bench.peer_workloads` through the public client only
(:class:`~orbitmq.client.producer.Producer` ``send`` / ``send_batch`` and a clustering
:class:`~orbitmq.client.consumer.PushConsumer` with a coroutine listener that only counts), so
what it measures is what an application gets. It prints the ``timed`` mark, then the
:class:`~orbitmq.bench.peer_workloads.DriverResult` JSON as its last line.
"""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import time
from collections.abc import Awaitable, Callable

import click

from orbitmq.bench.peer_workloads import TIMED_MARK, WORKLOADS, DriverResult, Workload
from orbitmq.client.consumer import PushConsumer
from orbitmq.client.consumer_types import ConsumeFromWhere, ConsumeStatus
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.store.record import StoredMessage

STALL_S = 60.0
"""A consume run that sees no message for this long ends with the rest counted as errors."""
LATENCY_GRACE_S = 10.0
"""How long a latency run waits for its last message after the last send (the contract's)."""
WARM_WAIT_S = 30.0
"""How long a latency run waits for its first warm-up message before the timed sends."""


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _mark() -> float:
    """Tell the orchestrator the timed phase starts; returns this process's CPU seconds so far.

    A full collection first: a young process's first full pass comes soon after start-up
    whatever the load (the collector's oldest generation starts empty, so its "a quarter new"
    rule holds at once) and walked the driver's ~46 000 start-up objects in 15-28 ms of CPU
    (17-166 ms of wall time on the loaded bench machine) inside the timed window of every
    ``latency_1000`` run, a start-up cost like the JIT's that the warm-up is there to absorb.
    Taken here, the timed phase sees the full passes a running application would: at
    1 000 msg/s none in ten seconds, at 10 000 msg/s several (counted as before).
    """
    gc.collect()
    print(TIMED_MARK, flush=True)
    return time.process_time()


def _latency_result(
    w: Workload, seconds: float, latencies_ms: list[float], errors: int, cpu_s: float
) -> DriverResult:
    return DriverResult(
        workload=w.workload,
        messages=w.messages,
        seconds=seconds,
        msg_per_s=w.messages / seconds if seconds > 0 else 0.0,
        p50_ms=percentile(latencies_ms, 0.50),
        p99_ms=percentile(latencies_ms, 0.99),
        errors=errors,
        extra={"cpu_s": cpu_s, "p999_ms": percentile(latencies_ms, 0.999) or 0.0},
    )


async def _closed_loop(
    call: Callable[[int], Awaitable[object]], messages: int, per_call: int, in_flight: int
) -> tuple[list[float], int]:
    """``messages`` sent by ``in_flight`` workers, each awaiting ``call(count)`` (``per_call``
    messages at most) in turn; the latency of every call in ms, and how many calls failed."""
    remaining = messages
    latencies: list[float] = []
    errors = 0

    async def worker() -> None:
        nonlocal remaining, errors
        while remaining > 0:
            count = min(per_call, remaining)
            remaining -= count
            started = time.perf_counter()
            try:
                await call(count)
            except Exception as error:  # counted and reported; the run goes on
                errors += 1
                if errors == 1:
                    print(f"first send error: {error}", file=sys.stderr)
                continue
            latencies.append((time.perf_counter() - started) * 1000)

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return latencies, errors


async def run_sends(w: Workload, namesrv: str, topic: str, group: str) -> DriverResult:
    """``send`` (one message a call) or ``batch`` (``w.batch`` a call), ``w.in_flight`` workers."""
    body = os.urandom(w.size)
    per_call = w.batch if w.workload == "batch" else 1
    async with Producer(group, namesrv) as producer:
        if w.workload == "batch":

            async def call(count: int) -> object:
                return await producer.send_batch([Message(topic, body) for _ in range(count)])
        else:

            async def call(count: int) -> object:
                return await producer.send(Message(topic, body))

        if w.warmup:
            await _closed_loop(call, w.warmup, per_call, w.in_flight)
        cpu = _mark()
        started = time.perf_counter()
        latencies, errors = await _closed_loop(call, w.messages, per_call, w.in_flight)
        seconds = time.perf_counter() - started
        cpu = time.process_time() - cpu
    return DriverResult(
        workload=w.workload,
        messages=w.messages,
        seconds=seconds,
        msg_per_s=w.messages / seconds,
        p50_ms=percentile(latencies, 0.50),
        p99_ms=percentile(latencies, 0.99),
        errors=errors,
        extra={"cpu_s": cpu, "calls": float(len(latencies))},
    )


async def run_consume(w: Workload, namesrv: str, topic: str, group: str) -> DriverResult:
    """Drain ``w.messages`` stored messages from the first offset; the rate runs from the first
    message to the ``N``-th."""
    seen = 0
    first: float | None = None
    last = 0.0
    done = asyncio.Event()

    async def listener(messages: list[StoredMessage]) -> ConsumeStatus:
        nonlocal seen, first, last
        last = time.perf_counter()
        if first is None:
            first = last
        seen += len(messages)
        if seen >= w.messages:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, namesrv, listener=listener, consume_from=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic)
    cpu = _mark()
    started = time.perf_counter()
    await consumer.start()
    try:
        while not done.is_set():
            before = seen
            try:
                await asyncio.wait_for(done.wait(), STALL_S)
            except TimeoutError:
                if seen == before:
                    print(f"consume stalled at {seen} of {w.messages}", file=sys.stderr)
                    break
        cpu = time.process_time() - cpu
    finally:
        await consumer.close()
    seconds = last - first if first is not None else 0.0
    return DriverResult(
        workload=w.workload,
        messages=min(seen, w.messages),
        seconds=seconds,
        msg_per_s=w.messages / seconds if seconds > 0 and seen >= w.messages else 0.0,
        first_message_s=None if first is None else first - started,
        errors=max(0, w.messages - seen),
        extra={"cpu_s": cpu, "seen": float(seen)},
    )


async def run_latency(w: Workload, namesrv: str, topic: str, group: str) -> DriverResult:
    """Open-loop paced sends (a task per send at ``start + i / rate``); latency from the send's
    wall clock, written in the body, to the listener. Messages stamped before the timed phase
    began are the warm-up and not counted."""
    if w.rate <= 0:
        raise click.UsageError("the latency workload needs --rate > 0")
    pad = os.urandom(max(0, w.size - 8))
    latencies: list[float] = []
    timed_from_ns = 2**63
    all_seen = asyncio.Event()
    warm = asyncio.Event()

    async def listener(messages: list[StoredMessage]) -> ConsumeStatus:
        now = time.time_ns()
        warm.set()
        for message in messages:
            sent = int.from_bytes(message.body[:8], "big")
            if sent >= timed_from_ns:
                latencies.append((now - sent) / 1e6)
        if len(latencies) >= w.messages:
            all_seen.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, namesrv, listener=listener, consume_from=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(topic)
    send_errors = 0
    async with Producer(group, namesrv) as producer:
        await consumer.start()
        pending: set[asyncio.Task[None]] = set()

        async def send_one() -> None:
            nonlocal send_errors
            body = time.time_ns().to_bytes(8, "big") + pad
            try:
                await producer.send(Message(topic, body))
            except Exception as error:  # counted and reported; the run goes on
                send_errors += 1
                if send_errors == 1:
                    print(f"first send error: {error}", file=sys.stderr)

        async def paced(count: int) -> None:
            began = time.perf_counter()
            for i in range(count):
                delay = began + i / w.rate - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.ensure_future(send_one())
                pending.add(task)
                task.add_done_callback(pending.discard)

        try:
            await paced(w.warmup)
            if w.warmup:
                try:
                    await asyncio.wait_for(warm.wait(), WARM_WAIT_S)
                except TimeoutError:
                    print(f"latency: no warm-up message after {WARM_WAIT_S:.0f} s", file=sys.stderr)
            cpu = _mark()
            timed_from_ns = time.time_ns()
            started = time.perf_counter()
            await paced(w.messages)
            seconds = time.perf_counter() - started
            if pending:
                await asyncio.wait(list(pending))
            try:
                await asyncio.wait_for(all_seen.wait(), LATENCY_GRACE_S)
            except TimeoutError:
                print(f"latency: saw {len(latencies)} of {w.messages}", file=sys.stderr)
            cpu = time.process_time() - cpu
        finally:
            await consumer.close()
    counted = latencies[: w.messages]
    errors = max(send_errors, w.messages - len(counted))
    return _latency_result(w, seconds, counted, errors, cpu)


RUNNERS: dict[str, Callable[[Workload, str, str, str], Awaitable[DriverResult]]] = {
    "send": run_sends,
    "batch": run_sends,
    "consume": run_consume,
    "latency": run_latency,
}


@click.command()
@click.option("--namesrv", required=True, help="HOST:PORT of the name server.")
@click.option("--topic", required=True)
@click.option("--group", required=True, help="Producer and consumer group (fresh per run).")
@click.option("--workload", required=True, type=click.Choice(WORKLOADS))
@click.option("--messages", required=True, type=click.IntRange(1))
@click.option("--size", default=1024, show_default=True, type=click.IntRange(8))
@click.option("--in-flight", default=1, show_default=True, type=click.IntRange(1))
@click.option("--batch", default=128, show_default=True, type=click.IntRange(1))
@click.option("--rate", default=0, show_default=True, type=click.IntRange(0))
@click.option("--warmup", default=0, show_default=True, type=click.IntRange(0))
@click.option("--auto-batch", is_flag=True, help="RocketMQ's producer option; orbitmq coalesces by default.")
def main(
    namesrv: str,
    topic: str,
    group: str,
    workload: str,
    messages: int,
    size: int,
    in_flight: int,
    batch: int,
    rate: int,
    warmup: int,
    auto_batch: bool,
) -> None:
    """Run one workload against an orbitmq cluster and print its DriverResult JSON line."""
    w = Workload(workload, messages, size, in_flight, batch, rate, warmup, auto_batch)
    result = asyncio.run(RUNNERS[workload](w, namesrv, topic, group))
    print(result.to_json(), flush=True)


if __name__ == "__main__":
    main()
