"""Start real brokers on free ports for tests (imported by several test directories)."""

from __future__ import annotations

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
