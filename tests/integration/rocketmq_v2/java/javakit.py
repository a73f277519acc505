"""What the Java-client interop tests share: message specs for the program's ``send`` (its
standard input), random bodies, and reads of what orbitmq stored or dead-lettered."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import random
import time
from typing import Any

import grpc
from v2kit import V2Cluster

from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2

FORMER_VICTIM = b"d-TagB-1"
"""A body the Java PushConsumer once judged corrupted: its CRC32 starts with a zero nibble, and
the proxy sent the digest zero-padded where Java's has no leading zeros (fixed in c947763)."""


def spec(topic: str, body: bytes, **fields: Any) -> dict[str, Any]:
    """One message for the ``send`` subcommand: body as base64, the other fields as given
    (tag, keys, message_group, properties, delivery_timestamp_ms, delay_ms)."""
    return {"topic": topic, "body_b64": base64.b64encode(body).decode(), **fields}


def body_of(event: dict[str, Any]) -> bytes:
    """The body of a received message's event (printed with ``with_bodies``)."""
    return base64.b64decode(event["body_b64"])


def sha256(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


def random_bodies(count: int, seed: int, max_size: int = 16_384) -> list[bytes]:
    """``count`` distinct bodies of random sizes (1 byte to ``max_size``, small ones most often,
    as in real traffic) and random bytes, :data:`FORMER_VICTIM` first."""
    chooser = random.Random(seed)
    bodies = [FORMER_VICTIM]
    while len(bodies) < count:
        size = min(max_size, int(chooser.expovariate(1 / 1024)) + 1)
        body = chooser.randbytes(size)
        if len(bodies) % 7 == 0:  # text bodies too, the kind whose digest made the old bug visible
            body = f"d-Tag{chooser.choice('ABC')}-{len(bodies)}".encode()
        bodies.append(body)
    return bodies


async def dead_letters(cluster: V2Cluster, group: str) -> list[bytes]:
    """Bodies in the group's dead-letter topic (``%DLQ%<group>``, queue 0), read directly from
    the broker: empty when nothing was dead-lettered (the topic is created with its first)."""
    try:
        reply = await cluster.broker.stub.PullMessage(
            broker_pb2.PullMessageRequest(
                consumer_group="dlq-reader", topic=f"%DLQ%{group}", queue_id=0, max_msg_nums=64
            )
        )
    except grpc.aio.AioRpcError as error:
        if error.code() is grpc.StatusCode.NOT_FOUND:
            return []
        raise
    return [decode(record).body for record in reply.records]


async def wait_until(condition: Any, within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not await condition():
        assert time.monotonic() < deadline, f"not within {within_s} s: {what}"
        await asyncio.sleep(0.1)
