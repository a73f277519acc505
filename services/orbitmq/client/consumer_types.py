"""Enums and settings of the push consumer, kept apart so listeners can import them cheaply."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum


class ConsumeStatus(Enum):
    """What a concurrent listener returns; ``None`` (a plain function that returns nothing)
    counts as CONSUME_SUCCESS, an exception or any other value as RECONSUME_LATER."""

    CONSUME_SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"


@dataclass(frozen=True, slots=True)
class MessageVerdicts:
    """A concurrent listener's answer per message of its batch, in order, instead of one status
    for all: CONSUME_SUCCESS, RECONSUME_LATER (sent back for a retry, that message only), or
    None: not consumed — it stays uncommitted and goes to whoever consumes the queue next (the
    answer of a draining sidecar for deliveries no application took)."""

    statuses: Sequence[ConsumeStatus | None]


class OrderlyStatus(Enum):
    """What an orderly listener returns; SUSPEND retries the same messages after a pause."""

    SUCCESS = "SUCCESS"
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


class MessageModel(Enum):
    CLUSTERING = "CLUSTERING"
    """Each queue is consumed by one member of the group; offsets live on the broker."""
    BROADCASTING = "BROADCASTING"
    """Every member consumes every queue; offsets live in a local offsets.json."""


class ConsumeFromWhere(Enum):
    """Where a group with no committed offset starts."""

    LAST_OFFSET = "LAST_OFFSET"
    FIRST_OFFSET = "FIRST_OFFSET"
    TIMESTAMP = "TIMESTAMP"


@dataclass(frozen=True, slots=True)
class ConsumerSettings:
    """The defaults of docs/operations/client-library.md; every duration in milliseconds."""

    pull_batch: int = 32
    """Messages a pull asks for while the consumer keeps up (RocketMQ's pullBatchSize)."""
    pull_batch_backlog: int = 512
    """Messages a pull asks for while its queue has a backlog (the previous reply showed more
    than ``pull_batch`` waiting), bounded by the room flow control leaves: one pull call costs
    the client and the broker about as much as decoding 30 messages, so a drain in pulls of 32
    spends most of its time on calls. The broker caps a pull at 512 KiB of records
    (``max_transfer_bytes``), about 450 messages of 1 KiB. Not above 1024 (the broker's limit)."""
    consume_batch: int = 1
    consume_threads: int = 20
    cached_messages_per_queue: int = 1000
    cached_mib_per_queue: int = 100
    max_span: int = 2000
    flow_control_delay_ms: int = 50
    exception_delay_ms: int = 3000
    suspend_timeout_ms: int = 15_000
    rebalance_ms: int = 20_000
    heartbeat_ms: int = 30_000
    persist_ms: int = 5_000
    route_refresh_ms: int = 30_000
    lock_renew_ms: int = 20_000
    orderly_recheck_ms: int = 3_000
    suspend_orderly_ms: int = 1_000
    consume_timeout_ms: int = 15 * 60_000
    """A message whose listener runs longer than this is sent back for a later retry."""
    expiry_scan_ms: int = 15 * 60_000
    """How often concurrent consumers look for such messages."""
    max_reconsume_times: int = 16
    shutdown_timeout_ms: int = 10_000
    verify_body_crc: bool = False
    """Check each pulled body's CRC-32C. Off, as in RocketMQ's client: the broker checks its
    log on recovery and the transport has its own checksums; on, it costs ~2.5 µs a message."""
