"""Helpers for storage tests: tiny store geometry and message builders."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orbitmq.native import scan_send
from orbitmq.store.config import StoreConfig
from orbitmq.store.record import InboundMessage, MessageBatch, ScannedBatch
from orbitmq.store.results import PutStatus
from orbitmq.v1 import broker_pb2, common_pb2

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


def message_batch(**overrides: object) -> MessageBatch:
    """Four messages that differ in every column: body, properties (none, one, two), flag."""
    fields: dict[str, object] = {
        "topic": "TopicA",
        "queue_id": 1,
        "bodies": [b"first", b"", bytes(300), "é".encode()],
        "properties": [{"TAGS": "TagA"}, {}, {"KEYS": "k1 k2", "UNIQ_KEY": "U1"}, {"TAGS": "TagB", "X": "é"}],
        "flags": [0, 7, 0, -1],
        "born_timestamp_ms": 1_700_000_000_000,
        "born_host": "10.1.2.3:4567",
        "reconsume_times": 2,
    }
    fields.update(overrides)
    return MessageBatch(**fields)  # type: ignore[arg-type]


REFUSALS: list[tuple[dict[str, object], PutStatus, str]] = [
    ({"topic": "bad topic!"}, PutStatus.MESSAGE_ILLEGAL, "invalid topic name 'bad topic!'"),
    ({"queue_id": 70_000}, PutStatus.MESSAGE_ILLEGAL, "queue id 70000"),
    ({"born_host": "nowhere"}, PutStatus.MESSAGE_ILLEGAL, "'nowhere'"),
    ({"reconsume_times": -2}, PutStatus.MESSAGE_ILLEGAL, "-2"),
    ({"bodies": [b"ok", bytes(16 * 1024 + 1), b"", b""]}, PutStatus.MESSAGE_ILLEGAL, "16385 bytes"),
    (
        {"properties": [{}, {"X": "v" * 40_000}, {}, {}]},
        PutStatus.PROPERTIES_SIZE_EXCEEDED,
        "exceed the limit of 32767",
    ),
]
"""Bad batches (overrides of :func:`message_batch`), their status and a part of the reason: the
same for a put of columns and a put of scanned bytes."""


def request_bytes(batch: MessageBatch) -> bytes:
    """The SendMessageRequest a producer would send for ``batch``."""
    return broker_pb2.SendMessageRequest(
        producer_group="Producers",
        topic=batch.topic,
        queue_id=batch.queue_id,
        messages=[
            common_pb2.Message(body=body, properties=properties, flag=flag)
            for body, properties, flag in zip(batch.bodies, batch.properties, batch.flags, strict=True)
        ],
    ).SerializeToString()


def scanned(batch: MessageBatch, *, refused: bool = False) -> ScannedBatch:
    """``batch`` as the C send path sees it: scanned from its request bytes.

    Unless the store is expected to refuse it (``refused``), the store must not fall back to
    the Python path for it: that would make a test of the C path pass without it.
    """
    data = request_bytes(batch)
    scan = scan_send(data, (b"DELAY",))
    assert scan is not None, "the C path refused a batch it should take"

    def unpacked() -> MessageBatch:
        assert refused, "the store took the Python path for a batch the C path should store"
        return batch

    return ScannedBatch(
        batch.topic,
        batch.queue_id,
        data,
        scan.columns,
        unpacked=unpacked,
        sys_flag=batch.sys_flag,
        born_timestamp_ms=batch.born_timestamp_ms,
        born_host=batch.born_host,
        reconsume_times=batch.reconsume_times,
    )
