"""Helpers for storage tests: tiny store geometry and message builders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orbitmq.store.config import StoreConfig
from orbitmq.store.record import InboundMessage

TINY = {
    "segment_bytes": 64 * 1024,
    "max_message_bytes": 16 * 1024,
    "consume_queue_units_per_file": 50,
    "index_slot_count": 64,
    "index_max_entries": 400,
}


def tiny_config(data_dir: Path, **overrides: Any) -> StoreConfig:
    return StoreConfig(data_dir=data_dir, **{**TINY, **overrides})


def message(
    topic: str = "TopicA", body: bytes = b"hello", queue_id: int = 0, **properties: str
) -> InboundMessage:
    return InboundMessage(topic=topic, body=body, queue_id=queue_id, properties=dict(properties))
