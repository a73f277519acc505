"""Start real brokers on free ports for tests (imported by several test directories): in the
test's event loop (:func:`start_broker`) or as an ``orbitmq broker`` child process to SIGKILL
(:func:`broker_process`)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from orbitmq.broker.server import Broker
from orbitmq.broker.settings import BrokerSettings
from orbitmq.v1 import broker_pb2_grpc

TEST_SETTINGS: dict[str, Any] = {
    "listen": "127.0.0.1:0",
    "metrics_listen": "127.0.0.1:0",
    "segment_bytes": 4 * 1024 * 1024,
    "max_message_bytes": 256 * 1024,
    "consume_queue_units_per_file": 10_000,
    "index_slot_count": 1024,
    "index_max_entries": 8192,
    "schedule_tick_ms": 20,
    "grace_ms": 500,
    # near 100 %: the test machine's disk is shared with other work (see tests/conftest.py)
    "disk_max_used_space_ratio": 0.97,
    "disk_space_clean_forcibly_ratio": 0.98,
    "disk_space_warning_level_ratio": 0.99,
}


@dataclass
class RunningBroker:
    broker: Broker
    channel: grpc.aio.Channel
    stub: broker_pb2_grpc.BrokerStub


async def start_broker(data_dir: Path, **overrides: Any) -> RunningBroker:
    settings = BrokerSettings(data_dir=data_dir, **{**TEST_SETTINGS, **overrides})
    broker = Broker(settings)
    await broker.start()
    channel = grpc.aio.insecure_channel(broker.address)
    return RunningBroker(broker, channel, broker_pb2_grpc.BrokerStub(channel))


async def stop_broker(running: RunningBroker) -> None:
    await running.channel.close()
    await running.broker.close()


@asynccontextmanager
async def broker_process(
    data_dir: Path,
    name: str,
    *,
    segment_bytes: int = 16 * 1024 * 1024,
    settings: dict[str, Any] | None = None,
    graceful_stop: bool = False,
    listen: str = "127.0.0.1:0",
) -> AsyncIterator[tuple[broker_pb2_grpc.BrokerStub, str, asyncio.subprocess.Process]]:
    """``orbitmq broker`` on free ports (and a free metrics port) as a child process: yields a
    stub, its metrics URL and the process (SIGKILL it to crash it). ``listen`` names the gRPC
    address instead (a restart on the same port). ``settings`` go in as the
    broker's ``ORBITMQ_BROKER_<NAME>`` environment, as an operator's pod would set them.

    At the end a process still running is killed, or with ``graceful_stop`` sent SIGTERM and
    required to exit 0 (its standard error is the failure's message)."""
    env = {**os.environ, **{f"ORBITMQ_BROKER_{k.upper()}": str(v) for k, v in (settings or {}).items()}}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "orbitmq.cli.main",
        "broker",
        "--listen",
        listen,
        "--metrics-listen",
        "127.0.0.1:0",
        "--broker-name",
        name,
        "--data-dir",
        str(data_dir),
        "--segment-bytes",
        str(segment_bytes),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE if graceful_stop else asyncio.subprocess.DEVNULL,
        env=env,
    )
    try:
        assert process.stdout is not None
        line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
        assert line.startswith(f"broker {name} listening on "), line
        words = line.split()
        async with grpc.aio.insecure_channel(words[4]) as channel:
            yield broker_pb2_grpc.BrokerStub(channel), words[6], process
        if graceful_stop and process.returncode is None:
            process.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(process.communicate(), 30)
            assert process.returncode == 0, stderr.decode()
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()
