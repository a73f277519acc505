"""The broker timer's figures against a real ``orbitmq broker`` process, each printed with a
baseline measured in the same run:

``timer_send_rate`` (msg/s)
    Unbatched sends of timed messages (``TIMER_DELIVER_MS``), ``--in-flight`` at a time.
    Baseline: plain sends of the same bodies to another topic, same concurrency, rounds
    alternating (plain, timed, plain, timed ...); the figure is the median of the timed rounds,
    the baseline the median of the plain ones. Timed sends take the broker's Python path (a
    detour through ``rmq_sys_wheel_timer``); plain ones the C path.
``timer_lateness_p50_ms``, ``timer_lateness_p99_ms``, ``timer_lateness_max_ms``
    Every timed message sent above asks for a time spread evenly over ``--spread-s`` seconds,
    starting after the sends end (estimated from a warm-up round; ``--lead-s`` to set it), so
    no time is past when sent.
    Lateness = the delivered message's store time minus its requested time (both on the
    broker's clock), for every one of them; each must arrive exactly once and never early.
    Baseline: the broker's ``timer_precision_ms`` (the longest its loop sleeps unwoken).

Progress goes to stderr, figures to stdout (one JSON object a line with ``--json``, as
``orbitmq bench``).

    .venv/bin/python benchmarks/timer_bench.py [--json] [--timers 10000] [--spread-s 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import grpc

from orbitmq.bench.figures import Figure, emit
from orbitmq.store.record import StoredMessage, decode
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2

TIMED, PLAIN = "TimerBench", "PlainBench"
QUEUES = 4
PRECISION_MS = 100


def note(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def start_broker(data: Path) -> tuple[asyncio.subprocess.Process, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "orbitmq.cli.main",
        "broker",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "",
        "--broker-name",
        "timer-bench",
        "--data-dir",
        str(data),
        "--segment-bytes",
        str(256 * 1024 * 1024),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
        env={**os.environ, "ORBITMQ_BROKER_TIMER_PRECISION_MS": str(PRECISION_MS)},
    )
    assert process.stdout is not None
    line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
    if " listening on " not in line:
        raise RuntimeError(f"broker did not start: {line!r}")
    return process, line.split()[4]


def request(topic: str, body: bytes, properties: dict[str, str]) -> broker_pb2.SendMessageRequest:
    return broker_pb2.SendMessageRequest(
        producer_group="bench",
        topic=topic,
        queue_id=-1,
        messages=[common_pb2.Message(topic=topic, body=body, properties=properties)],
    )


async def send_round(
    stub: broker_pb2_grpc.BrokerStub, requests: list[broker_pb2.SendMessageRequest], in_flight: int
) -> float:
    """Send every request, ``in_flight`` at a time; messages per second."""
    pending = iter(requests)

    async def worker() -> None:
        for item in pending:
            reply = await stub.SendMessage(item)
            if reply.status != broker_pb2.SEND_OK:
                raise RuntimeError(f"send answered {reply.status}")

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return len(requests) / (time.perf_counter() - started)


async def read_topic(stub: broker_pb2_grpc.BrokerStub, topic: str) -> list[StoredMessage]:
    found: list[StoredMessage] = []
    for queue_id in range(QUEUES):
        offset = 0
        while True:
            reply = await stub.PullMessage(
                broker_pb2.PullMessageRequest(
                    consumer_group="bench-reader",
                    topic=topic,
                    queue_id=queue_id,
                    queue_offset=offset,
                    max_msg_nums=1024,
                    commit_offset=-1,
                )
            )
            if reply.status != broker_pb2.FOUND:
                break
            batch = [decode(r) for r in reply.records]
            found += batch
            offset += len(batch)
    return found


def percentile(ordered: list[int], fraction: float) -> float:
    return float(ordered[min(len(ordered) - 1, int(len(ordered) * fraction))])


async def bench(args: argparse.Namespace) -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="timer-bench-") as tmp:
        process, address = await start_broker(Path(tmp) / "data")
        try:
            async with grpc.aio.insecure_channel(address) as channel:
                stub = broker_pb2_grpc.BrokerStub(channel)
                return await measure(stub, args)
        finally:
            process.send_signal(signal.SIGTERM)
            await asyncio.wait_for(process.wait(), 60)


async def measure(stub: broker_pb2_grpc.BrokerStub, args: argparse.Namespace) -> list[Figure]:
    for topic in (TIMED, PLAIN):
        await stub.CreateTopic(
            broker_pb2.CreateTopicRequest(
                topic=common_pb2.TopicConfig(
                    topic_name=topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES, perm=6
                )
            )
        )
    body = os.urandom(args.body_bytes)
    count, rounds = args.timers, args.rounds
    per_round = -(-count // rounds)
    plain = [request(PLAIN, b"%d:" % i + body, {}) for i in range(count)]
    warm = await send_round(stub, plain[:500], args.in_flight)  # connection, routes; the lead
    lead_s = args.lead_s or 2 * count / warm * 1.5 + 2
    first_due = int(time.time() * 1000) + int(lead_s * 1000)
    due = [first_due + i * int(args.spread_s * 1000) // count for i in range(count)]
    timed = [request(TIMED, b"%d:" % i + body, {"TIMER_DELIVER_MS": str(at)}) for i, at in enumerate(due)]
    note(f"warm-up {warm:,.0f} msg/s; the first timer is due in {lead_s:.1f} s")
    plain_rates, timed_rates = [], []
    for r in range(rounds):
        chunk = slice(r * per_round, (r + 1) * per_round)
        plain_rates.append(await send_round(stub, plain[chunk], args.in_flight))
        timed_rates.append(await send_round(stub, timed[chunk], args.in_flight))
        note(
            f"round {r + 1}/{rounds}: plain {plain_rates[-1]:,.0f} msg/s, timed {timed_rates[-1]:,.0f} msg/s"
        )
    if int(time.time() * 1000) > first_due:
        note(f"sends ended after the first due time: raise --lead-s (now {lead_s:.1f} s)")
    wait_s = (due[-1] - time.time() * 1000) / 1000 + 2
    note(f"all sent; waiting {wait_s:.1f} s for the last timer")
    await asyncio.sleep(max(0.0, wait_s))
    delivered = await read_topic(stub, TIMED)
    copies = Counter(m.body.split(b":", 1)[0] for m in delivered)
    if len(copies) != count or max(copies.values()) != 1:
        raise RuntimeError(f"{len(copies)} of {count} timers delivered, {sum(copies.values())} copies")
    lateness = sorted(m.store_timestamp_ms - int(m.properties["TIMER_DELIVER_MS"]) for m in delivered)
    if lateness[0] < 0:
        raise RuntimeError(f"a timer was delivered {-lateness[0]} ms early")
    note(f"{count} timers delivered once each, none early; lateness min {lateness[0]} ms")
    bound = f"baseline = timer_precision_ms; {count} timers over {args.spread_s} s"
    return [
        Figure(
            "timer_send_rate",
            statistics.median(timed_rates),
            "msg/s",
            statistics.median(plain_rates),
            f"plain sends, {args.in_flight} in flight, {args.body_bytes} B bodies",
        ),
        Figure("timer_lateness_p50_ms", percentile(lateness, 0.50), "ms", PRECISION_MS, bound),
        Figure("timer_lateness_p99_ms", percentile(lateness, 0.99), "ms", PRECISION_MS, bound),
        Figure("timer_lateness_max_ms", float(lateness[-1]), "ms", PRECISION_MS, bound),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object a line")
    parser.add_argument("--timers", type=int, default=10_000, help="timed messages (and as many plain ones)")
    parser.add_argument("--spread-s", type=float, default=3.0, help="their due times span this many seconds")
    parser.add_argument(
        "--lead-s",
        type=float,
        default=None,
        help="the first is due this long after the start (default: after the sends)",
    )
    parser.add_argument("--rounds", type=int, default=5, help="alternating plain/timed send rounds")
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--body-bytes", type=int, default=1024)
    args = parser.parse_args()
    for name, value in (
        ("--timers", args.timers),
        ("--rounds", args.rounds),
        ("--in-flight", args.in_flight),
    ):
        if value < 1:
            parser.error(f"{name} {value} must be at least 1")
    if args.spread_s <= 0 or (args.lead_s is not None and args.lead_s <= 0):
        parser.error(f"--spread-s {args.spread_s} and --lead-s {args.lead_s} must be positive")
    for figure in asyncio.run(bench(args)):
        emit(figure, args.json, print)


if __name__ == "__main__":
    main()
