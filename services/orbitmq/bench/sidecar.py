"""``orbitmq bench sidecar``: messages per second an application gets through the sidecar.

A name server, a broker and the sidecar run as child processes; the backlog is loaded by an
``orbitmq produce`` child. Figure (1 KiB bodies, a topic of 8 queues):

* ``sidecar_delivery`` — an application behind the sidecar (the thin client, acknowledging each
  delivery) draining the backlog; baseline: a push consumer in this process draining the same
  backlog directly, in the same run.
* ``sidecar_send`` — an application sending through the sidecar (``SidecarClient.send``, one
  ``Send`` call a message, ``SEND_IN_FLIGHT`` outstanding); baseline: orbitmq's ``Producer`` in
  this process with as many sends outstanding. The sides alternate ``SEND_ROUNDS`` rounds of
  ``--sends`` messages each, so a change of the machine's load hits both alike.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from orbitmq.bench.broker import Process, cli
from orbitmq.bench.e2e import _consume, _produce, _wait, cluster_processes
from orbitmq.bench.figures import Figure
from orbitmq.client.admin import Admin
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.sidecar.client import SidecarClient

TOPIC = "SidecarBench"
SEND_TOPIC = "SidecarBenchSend"
SEND_IN_FLIGHT = 32
SEND_ROUNDS = 2
BODY = bytes(1024)


async def _through_sidecar(address: str, total: int) -> float:
    received = 0
    started = time.perf_counter()
    async with SidecarClient(address) as client:
        async for delivery in client.deliveries(app_id="bench", max_in_flight=64):
            await delivery.ack()
            received += 1
            if received >= total:
                break
    return time.perf_counter() - started


async def _in_flight(send: Callable[[], Awaitable[object]], total: int) -> float:
    """Seconds for ``total`` sends with ``SEND_IN_FLIGHT`` outstanding (closed loops)."""
    left = total

    async def loop() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            await send()

    started = time.perf_counter()
    await asyncio.gather(*(loop() for _ in range(SEND_IN_FLIGHT)))
    return time.perf_counter() - started


async def _send_rates(namesrv: str, address: str, sends: int) -> tuple[float, float]:
    """(through the sidecar, direct) msg/s, the best of alternating rounds each."""
    through: list[float] = []
    direct: list[float] = []
    async with SidecarClient(address) as client, Producer("bench-sidecar-direct", namesrv) as producer:
        await client.send(SEND_TOPIC, BODY)  # routes and channels ready on both sides
        await producer.send(Message(SEND_TOPIC, BODY))
        for _ in range(SEND_ROUNDS):
            through.append(sends / await _in_flight(lambda: client.send(SEND_TOPIC, BODY), sends))
            direct.append(sends / await _in_flight(lambda: producer.send(Message(SEND_TOPIC, BODY)), sends))
    return max(through), max(direct)


async def _measure(
    namesrv: str, emit: Callable[[Figure], None], messages: int, max_in_flight: int, sends: int
) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=8, write_queue_nums=8)
        await admin.create_topic(SEND_TOPIC, read_queue_nums=8, write_queue_nums=8)
    await asyncio.sleep(0.5)
    await asyncio.to_thread(_wait, _produce(namesrv, TOPIC, messages))
    direct = messages / await _consume(namesrv, TOPIC, "bench-direct", messages, "direct push consumer")
    sidecar = await asyncio.to_thread(
        Process,
        cli(
            "sidecar",
            "--namesrv",
            namesrv,
            "--group",
            "bench-sidecar",
            "--subscribe",
            TOPIC,
            "--consume-from",
            "first",
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "",
            "--max-in-flight",
            str(max_in_flight),
        ),
    )
    try:
        seconds = await _through_sidecar(sidecar.address, messages)
        sent, sent_direct = await _send_rates(namesrv, sidecar.address, sends) if sends else (0.0, 0.0)
    finally:
        await asyncio.to_thread(sidecar.stop)
    emit(
        Figure(
            "sidecar_delivery",
            messages / seconds,
            "msg/s",
            direct,
            f"a push consumer draining the same backlog directly (sidecar max in flight {max_in_flight})",
            "ratio >= 0.5",
        )
    )
    if sends:
        emit(
            Figure(
                "sidecar_send",
                sent,
                "msg/s",
                sent_direct,
                f"orbitmq's producer sending directly, {SEND_IN_FLIGHT} in flight "
                f"(best of {SEND_ROUNDS} rounds each)",
            )
        )


def run(
    emit: Callable[[Figure], None],
    *,
    messages: int,
    max_in_flight: int,
    work_dir: Path | None,
    sends: int = 10_000,
) -> None:
    with cluster_processes("sidecar", work_dir) as (namesrv, _):
        asyncio.run(_measure(namesrv, emit, messages, max_in_flight, sends))
