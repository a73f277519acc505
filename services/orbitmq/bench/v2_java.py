"""The official Apache RocketMQ 5 *Java* client's part of ``orbitmq bench v2``.

The client runs the interop program's ``bench-send`` and ``bench-receive`` subcommands
(``clients/java-interop``, :mod:`orbitmq.interop.java_client`), one JVM for all sends and one
for all receives, started once and kept warm: each timed round is a line written to the JVM's
standard input and answered by one event, so its rounds alternate with the baseline's (orbitmq's
own client in this process) in the same minutes. The JVM runs with its default options (as an
application does), and the sends' JVM first sends :data:`WARMUP_FACTOR` times ``--messages``
untimed messages (the client's send path runs interpreted and half-compiled for its first
thousands of calls; ``orbitmq bench peer`` found RocketMQ's client needs about 20 000).

CPU per message is read from ``/proc`` (utime + stime of each process and its children,
:func:`orbitmq.bench.peer.process_tree_cpu_s`) just before a round's line is written and just
after its answer, for the JVM, the proxy and the broker; the baseline's client is this process
(``time.process_time``: its children are the cluster). Between rounds every side is idle, so a
round's CPU is its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import click

from orbitmq.bench.figures import Figure
from orbitmq.bench.peer import process_tree_cpu_s
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.interop import java_client

BODY_SIZE = 1024
SEND_THREADS = 8
"""Threads of the Java application, each a blocking ``send`` at a time; the baseline has as many
orbitmq tasks each awaiting one send."""
WARMUP_FACTOR = 5
"""Untimed Java sends per timed one, and messages of the Java consumer's untimed first drain
per backlog message (25 000 at the default ``--messages``): on this 2-core machine the client's
CPU a message kept falling until about 25 000 sends (15 000: 190-260 us a send, the next 5 000
130-190) or acks (10 000 warm: 250-470 us a message, the next 10 000 110-250)."""
RECEIVE_BATCH = 32
RECEIVES_IN_FLIGHT = 4
ACKS_IN_FLIGHT = 64
ROUND_TIMEOUT_S = 300.0
"""A round that does not answer within this fails the run instead of hanging it."""
STDERR_TAIL_CHARS = 3000


def build() -> None:
    """Build (or find cached) the Java program before the cluster starts: a cold Maven build
    blocks for tens of seconds."""
    try:
        java_client.build()
    except java_client.JavaClientError as error:
        raise click.ClickException(f"orbitmq bench v2 --clients java: {error}") from None


def cpu_seconds(pids: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds so far of each named process and its live children; this process by its own
    clock, since its children are the cluster's processes."""
    me = os.getpid()
    return {name: time.process_time() if pid == me else process_tree_cpu_s(pid) for name, pid in pids.items()}


@dataclass(slots=True)
class Tally:
    """One side's timed rounds added up: messages, seconds, CPU seconds by process, and each
    round's p99 send latency."""

    messages: int = 0
    seconds: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)
    p99_ms: list[float] = field(default_factory=list)

    def add(
        self, messages: int, seconds: float, before: Mapping[str, float], after: Mapping[str, float]
    ) -> None:
        self.messages += messages
        self.seconds += seconds
        for name, value in after.items():
            self.cpu_s[name] = self.cpu_s.get(name, 0.0) + value - before[name]

    @property
    def per_s(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0

    def cpu_us(self, name: str, messages: int) -> float | None:
        """µs of ``name``'s CPU per message over ``messages`` (every message the CPU was spent on)."""
        return self.cpu_s[name] / messages * 1e6 if name in self.cpu_s and messages else None


class JavaBench:
    """One bench subcommand of the Java program in its own JVM, driven line by line:
    :meth:`ask` writes a line and returns the event that answers it."""

    def __init__(self, work_dir: Path, subcommand: str, **options: Any) -> None:
        self.name = subcommand
        self.argv = [*java_client.command(work_dir, jvm_options=()), subcommand, *java_client.flags(options)]
        self._stderr = work_dir / f"{subcommand}.stderr"
        self._process: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int:
        assert self._process is not None
        return self._process.pid

    async def __aenter__(self) -> JavaBench:
        with self._stderr.open("wb") as stderr:
            self._process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,
            )
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        process = self._process
        if process is None:
            return
        if process.returncode is None and process.stdin is not None:
            process.stdin.close()  # the end of input ends the run
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(process.wait(), 10)
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()

    async def event(self, name: str, timeout_s: float = ROUND_TIMEOUT_S) -> dict[str, Any]:
        """The next event called ``name`` (earlier ones are skipped)."""
        assert self._process is not None and self._process.stdout is not None
        try:
            async with asyncio.timeout(timeout_s):
                while line := await self._process.stdout.readline():
                    event = json.loads(line)
                    if event["event"] == name:
                        return event
        except TimeoutError:
            raise click.ClickException(
                f"Java {self.name}: no {name} within {timeout_s:.0f} s\n{self._tail()}"
            ) from None
        await self._process.wait()
        raise click.ClickException(
            f"Java {self.name} exited with {self._process.returncode} before {name}\n{self._tail()}"
        )

    async def ask(self, line: str, answer: str) -> dict[str, Any]:
        """Write ``line`` (one round) and return its answer, failing on errors it counted."""
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write(line.encode() + b"\n")
        await self._process.stdin.drain()
        event = await self.event(answer)
        if event.get("errors"):
            raise click.ClickException(
                f"Java {self.name}: {event['errors']} errors, first {event['first_error']}"
            )
        return event

    def _tail(self) -> str:
        with contextlib.suppress(OSError):
            return (
                f"--- its stderr ({self._stderr}):\n"
                + self._stderr.read_text(errors="replace")[-STDERR_TAIL_CHARS:]
            )
        return ""


async def _orbitmq_sends(producer: Producer, topic: str, count: int) -> tuple[float, float]:
    """(seconds, p99 ms) of ``count`` sends by :data:`SEND_THREADS` tasks, each awaiting one send
    at a time: the Java threads' work with orbitmq's producer."""
    body = bytes(BODY_SIZE)
    latencies: list[float] = []
    remaining = count

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            before = time.perf_counter()
            await producer.send(Message(topic, body))
            latencies.append(time.perf_counter() - before)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(SEND_THREADS)))
    seconds = time.perf_counter() - started
    latencies.sort()
    return seconds, latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] * 1000


async def sends(
    namesrv: str, proxy: str, pids: Mapping[str, int], work_dir: Path, messages: int, rounds: int
) -> tuple[Tally, Tally]:
    """(Java, orbitmq) sends of ``messages`` each in ``rounds`` alternating rounds on topics
    ``BenchV2Java`` and ``BenchV2Orbitmq``."""
    java, ours = Tally(), Tally()
    per_round = max(1, messages // rounds)
    options = {"endpoint": proxy, "topic": "BenchV2Java", "threads": SEND_THREADS, "size": BODY_SIZE}
    async with (
        JavaBench(work_dir, "bench-send", warmup=WARMUP_FACTOR * messages, **options) as client,
        Producer("bench-v2-java-baseline", namesrv) as producer,
    ):
        await _orbitmq_sends(producer, "BenchV2Orbitmq", min(messages, 2_000))  # warm, as the JVM is
        await client.event("started")
        java_pids = {**pids, "client": client.pid}
        ours_pids = {"client": os.getpid(), "broker": pids["broker"]}
        for _ in range(rounds):
            before = cpu_seconds(java_pids)
            answer = await client.ask(str(per_round), "round")
            java.add(per_round, answer["seconds"], before, cpu_seconds(java_pids))
            java.p99_ms.append(answer["p99_ms"])
            before = cpu_seconds(ours_pids)
            seconds, p99 = await _orbitmq_sends(producer, "BenchV2Orbitmq", per_round)
            ours.add(per_round, seconds, before, cpu_seconds(ours_pids))
            ours.p99_ms.append(p99)
    return java, ours


class JavaDrainer:
    """The Java SimpleConsumer side of the backlog drains (``bench-receive``): one warm JVM,
    a consumer of its own group per backlog."""

    def __init__(self, client: JavaBench, pids: Mapping[str, int]) -> None:
        self._client = client
        self._pids = {**pids, "client": client.pid}
        self.tally = Tally()
        self.drained = 0
        """Messages the CPU was spent on (whole backlogs, first batches included)."""

    async def warm(self, topic: str, messages: int) -> None:
        """An untimed drain (the JVM's first one loads and compiles the consumer's code)."""
        await self._client.ask(
            json.dumps({"topic": topic, "group": "bench-v2-java-warm", "messages": messages}), "drained"
        )

    async def drain(self, topic: str, group: str, messages: int) -> tuple[int, float]:
        before = cpu_seconds(self._pids)
        line = json.dumps({"topic": topic, "group": group, "messages": messages})
        answer = await self._client.ask(line, "drained")
        self.tally.add(answer["messages"], answer["seconds"], before, cpu_seconds(self._pids))
        self.drained += messages
        return answer["messages"], answer["seconds"]


def receiver(work_dir: Path, proxy: str) -> JavaBench:
    return JavaBench(
        work_dir,
        "bench-receive",
        endpoint=proxy,
        batch=RECEIVE_BATCH,
        receives_in_flight=RECEIVES_IN_FLIGHT,
        acks_in_flight=ACKS_IN_FLIGHT,
    )


def cpu_figures(
    prefix: str, java: Tally, java_messages: int, ours: Tally, ours_messages: int, baseline: str
) -> list[Figure]:
    """CPU µs per message of the Java client, the proxy and the broker; baselines orbitmq's
    client and broker (no proxy on its path)."""
    figures = []
    for process in ("client", "proxy", "broker"):
        value = java.cpu_us(process, java_messages)
        if value is None:
            continue
        theirs = ours.cpu_us(process, ours_messages)
        figures.append(
            Figure(
                f"{prefix}_{process}_cpu_us",
                value,
                "us/msg",
                theirs,
                f"{baseline}: its {process}" if theirs is not None else "",
            )
        )
    return figures


def send_figures(java: Tally, ours: Tally) -> list[Figure]:
    baseline = f"orbitmq's producer, {SEND_THREADS} tasks each awaiting its send"
    return [
        Figure("v2_java_send_per_s", java.per_s, "msg/s", ours.per_s, baseline, "ratio >= 0.5"),
        Figure(
            "v2_java_send_p99_ms",
            statistics.median(java.p99_ms),
            "ms",
            statistics.median(ours.p99_ms),
            f"{baseline} (median of the rounds' p99)",
        ),
        *cpu_figures("v2_java_send", java, java.messages, ours, ours.messages, baseline),
    ]
