"""``orbitmq bench send --replication``: what synchronous replication costs
(docs/architecture.md, "Replication and failover").

Two master/slave pairs run as child processes. Figures (1 KiB bodies, 128 per send, 8 sends
in flight):

* ``send_sync_master`` — msg/s acknowledged by a ``SYNC_MASTER`` (each send waits until its
  slave holds it); baseline: the same load on an ``ASYNC_MASTER`` with a slave, in the same run.
* ``catchup_mb_per_s`` — an empty slave started against a master holding the async run's log:
  MB of commit log per second from its start until it has all of it; baseline: raw sequential file writes of
  the same bytes on the same disk (the slave's floor).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import grpc

from orbitmq.bench.broker import TOPIC, Process, _drive, _send_request, broker_process
from orbitmq.bench.figures import Figure
from orbitmq.common.server import GRPC_OPTIONS
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2

BATCH = 128
IN_FLIGHT = 8


def _broker(data: Path, role: str, broker_id: int, master: str = "") -> Process:
    config = data.with_suffix(".yaml")
    config.write_text(f"master_addr: '{master}'\n" if master else "{}\n")
    return broker_process(data, "--config", str(config), "--broker-role", role, "--broker-id", str(broker_id))


async def _state(address: str) -> broker_pb2.HaState:
    async with grpc.aio.insecure_channel(address, options=GRPC_OPTIONS) as channel:
        return await broker_pb2_grpc.BrokerStub(channel).GetHaState(broker_pb2.GetHaStateRequest(), timeout=5)


async def _wait_connected(master: str) -> None:
    deadline = time.monotonic() + 30
    while not (await _state(master)).slaves:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no slave connected to {master} in 30 s")
        await asyncio.sleep(0.05)


async def _send_rate(master: str, messages: int) -> float:
    body = os.urandom(1024)
    request = _send_request(BATCH, body)
    async with grpc.aio.insecure_channel(master, options=GRPC_OPTIONS) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        await stub.CreateTopic(
            broker_pb2.CreateTopicRequest(
                topic=common_pb2.TopicConfig(topic_name=TOPIC, read_queue_nums=4, write_queue_nums=4)
            )
        )

        async def send() -> None:
            reply = await stub.SendMessage(request)
            if reply.status != broker_pb2.SEND_OK:
                raise RuntimeError(f"send answered {broker_pb2.SendStatus.Name(reply.status)}")

        await _drive(send, 20, IN_FLIGHT)  # warm up
        calls = max(1, messages // BATCH)
        seconds = await _drive(send, calls, IN_FLIGHT)
    return calls * BATCH / seconds


def _raw_write_mb_per_s(directory: Path, size: int) -> float:
    path = directory / "raw.bin"
    chunk = os.urandom(1024 * 1024)
    started = time.perf_counter()
    with path.open("wb") as file:
        for _ in range(max(1, size // len(chunk))):
            file.write(chunk)
        file.flush()
    seconds = time.perf_counter() - started
    path.unlink()
    return max(1, size // len(chunk)) * len(chunk) / 2**20 / seconds


async def _measure(work: Path, emit: Callable[[Figure], None], messages: int) -> None:
    processes: list[Process] = []
    try:
        sync_master = _broker(work / "sync-master", "SYNC_MASTER", 0)
        processes.append(sync_master)
        processes.append(_broker(work / "sync-slave", "SLAVE", 1, sync_master.address))
        async_master = _broker(work / "async-master", "ASYNC_MASTER", 0)
        processes.append(async_master)
        processes.append(_broker(work / "async-slave", "SLAVE", 1, async_master.address))
        await _wait_connected(sync_master.address)
        await _wait_connected(async_master.address)
        async_rate = await _send_rate(async_master.address, messages)
        sync_rate = await _send_rate(sync_master.address, messages)
        emit(
            Figure(
                "send_sync_master",
                sync_rate,
                "msg/s",
                async_rate,
                f"ASYNC_MASTER with a slave, same run ({BATCH} x 1 KiB per send, {IN_FLIGHT} in flight)",
                "ratio >= 0.5",
            )
        )
        log_bytes = (await _state(async_master.address)).max_offset
        fresh = _broker(work / "fresh-slave", "SLAVE", 2, async_master.address)  # returns once serving
        processes.append(fresh)
        started = time.perf_counter()
        while (await _state(fresh.address)).max_offset < log_bytes:  # noqa: ASYNC110 - polls another process
            await asyncio.sleep(0.02)
        catchup = log_bytes / 2**20 / (time.perf_counter() - started)
        raw = _raw_write_mb_per_s(work, log_bytes)
        emit(
            Figure(
                "catchup_mb_per_s",
                catchup,
                "MB/s",
                raw,
                f"raw sequential writes of the same {log_bytes / 2**20:.0f} MB",
            )
        )
    finally:
        for process in processes:
            process.stop()


def run(emit: Callable[[Figure], None], *, messages: int, work_dir: Path | None) -> None:
    work = Path(tempfile.mkdtemp(prefix="orbitmq-bench-replication-", dir=work_dir))
    try:
        asyncio.run(_measure(work, emit, messages))
    finally:
        shutil.rmtree(work, ignore_errors=True)
