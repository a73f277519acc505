"""``orbitmq bench sidecar``: messages per second an application gets through the sidecar.

A name server, a broker and the sidecar run as child processes; the backlog is loaded by an
``orbitmq produce`` child. Figure (1 KiB bodies, a topic of 8 queues):

* ``sidecar_delivery`` — an application behind the sidecar (the thin client, acknowledging each
  delivery) draining the backlog; baseline: a push consumer in this process draining the same
  backlog directly, in the same run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from orbitmq.bench.broker import Process, cli
from orbitmq.bench.e2e import _consume, _produce, _wait, cluster_processes
from orbitmq.bench.figures import Figure
from orbitmq.client.admin import Admin
from orbitmq.sidecar.client import SidecarClient

TOPIC = "SidecarBench"


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


async def _measure(namesrv: str, emit: Callable[[Figure], None], messages: int, max_in_flight: int) -> None:
    async with Admin(namesrv) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=8, write_queue_nums=8)
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


def run(emit: Callable[[Figure], None], *, messages: int, max_in_flight: int, work_dir: Path | None) -> None:
    with cluster_processes("sidecar", work_dir) as (namesrv, _):
        asyncio.run(_measure(namesrv, emit, messages, max_in_flight))
