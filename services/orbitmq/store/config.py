"""Typed, validated settings of the message store.

Each field carries its unit in its name and says why its default is what it is. Invalid values
fail at load with a message naming the field, the value and the rule (pydantic's validation).
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orbitmq.common.topics import DELAY_LEVELS, parse_delay_levels
from orbitmq.store.record import BLANK_MIN_BYTES, MAX_TOPIC_BYTES, record_overhead

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


class FlushMode(StrEnum):
    ASYNC_FLUSH = "ASYNC_FLUSH"
    """Acknowledge after the write to the page cache; a flusher fsyncs periodically."""
    SYNC_FLUSH = "SYNC_FLUSH"
    """Acknowledge after fsync (group commit: one fsync covers every waiting writer)."""


class BrokerRole(StrEnum):
    ASYNC_MASTER = "ASYNC_MASTER"
    SYNC_MASTER = "SYNC_MASTER"
    SLAVE = "SLAVE"


class StoreConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    data_dir: Path
    """Root of the store: commitlog/, consumequeue/, index/, config/, checkpoint."""
    store_host: str = "127.0.0.1:10911"
    """This broker's address, written into every record and into offset message ids."""
    broker_role: BrokerRole = BrokerRole.ASYNC_MASTER

    segment_bytes: int = Field(default=1 * GIB, ge=4 * KIB, le=16 * GIB)
    """Commit-log segment size. 1 GiB as in RocketMQ: few files, cheap arithmetic lookup."""
    consume_queue_units_per_file: int = Field(default=300_000, ge=1, le=50_000_000)
    """Units per consume-queue file (20 bytes each: 6 MB files by default)."""
    index_slot_count: int = Field(default=5_000_000, ge=1)
    index_max_entries: int = Field(default=20_000_000, ge=1)

    max_message_bytes: int = Field(default=4 * MIB, ge=1, le=64 * MIB)
    """Largest body accepted; bigger bodies are refused with MESSAGE_ILLEGAL."""

    flush_mode: FlushMode = FlushMode.ASYNC_FLUSH
    flush_interval_ms: int = Field(default=500, ge=1)
    """ASYNC_FLUSH: how often the commit log is fsynced (bounds loss on power failure)."""
    sync_flush_timeout_ms: int = Field(default=5_000, ge=1)
    """SYNC_FLUSH: how long a send waits for its fsync before answering FLUSH_DISK_TIMEOUT."""
    consume_queue_flush_interval_ms: int = Field(default=1_000, ge=1)
    """Consume queues, index and checkpoint are fsynced together this often; a crash replays
    the commit log from the checkpoint, so this only bounds recovery work."""

    file_reserved_time_ms: int = Field(default=72 * 3_600_000, ge=1)
    """Commit-log segments whose messages are all older than this are deleted (72 h)."""
    clean_interval_ms: int = Field(default=10_000, ge=1)
    delete_segments_per_pass: int = Field(default=10, ge=1)

    # Disk space, RocketMQ's three ratios of the store's file system (used / size, as df shows),
    # checked every ``disk_check_interval_ms`` and after any write the disk refused.
    disk_max_used_space_ratio: float = Field(default=0.75, gt=0, le=1)
    """Past this, retention runs at every disk check instead of every ``clean_interval_ms``
    (RocketMQ's diskMaxUsedSpaceRatio, 75 %): expired segments go as soon as they expire."""
    disk_space_clean_forcibly_ratio: float = Field(default=0.85, gt=0, le=1)
    """Past this, the oldest segments are deleted before their ``file_reserved_time_ms``, one
    pass at a time until the disk is below it (RocketMQ's diskSpaceCleanForciblyRatio, 85 %):
    unconsumed messages go rather than the broker stopping; the newest segment and anything not
    yet flushed or dispatched stay."""
    disk_space_warning_level_ratio: float = Field(default=0.90, gt=0, le=1)
    """Past this, sends are refused with DISK_FULL until the disk is below it again (RocketMQ's
    diskSpaceWarningLevelRatio, 90 %, its "disk full" flag); reads, acks and offset commits go
    on. 1.0 never refuses before the disk itself does."""
    disk_check_interval_ms: int = Field(default=1_000, ge=1)
    """How often the disk's used ratio is read (one statvfs): a writer can fill at most this
    long's worth of sends past the warning ratio before sends are refused."""

    max_transfer_count: int = Field(default=1024, ge=1, le=65_536)
    """Most messages one read returns (RocketMQ's maxTransferCountOnMessageInMemory, 32 there).
    A reader asks for what it wants (a push consumer 32, or up to 512 while it has a backlog);
    ``max_transfer_bytes`` is the cap that matters for anything but tiny messages."""
    max_transfer_bytes: int = Field(default=512 * KIB, ge=1)
    """Most bytes one read returns, except that one message always fits (RocketMQ's
    maxTransferBytesOnMessageInMemory is 256 KiB: twice that halves a draining consumer's
    calls, about 0.8 µs of broker and 0.6 µs of client CPU a 1 KiB message, and gains little
    beyond)."""
    max_filter_scan_units: int = Field(default=16_000, ge=1)
    """Most consume-queue units one read examines while a filter rejects them."""
    pull_from_slave_lag_bytes: int | None = None
    """Reader this far behind the log end is told to read from a slave; default 40 % of RAM
    (RocketMQ's accessMessageInMemoryMaxRatio): beyond that its data is unlikely cached."""
    offset_check_in_slave: bool = False
    """Whether a slave corrects a reader's offset; off as in RocketMQ, the master decides."""

    dispatch_chunk_bytes: int = Field(default=4 * MIB, ge=KIB)
    """The dispatcher yields to the event loop after this many bytes."""
    delay_levels: str = DELAY_LEVELS

    @field_validator("store_host")
    @classmethod
    def _check_host(cls, value: str) -> str:
        from orbitmq.store.record import encode_host

        encode_host(value)
        return value

    @field_validator("delay_levels")
    @classmethod
    def _check_delay_levels(cls, value: str) -> str:
        parse_delay_levels(value)
        return value

    @model_validator(mode="after")
    def _check_sizes(self) -> StoreConfig:
        smallest_record = record_overhead(MAX_TOPIC_BYTES, 0) + self.max_message_bytes + BLANK_MIN_BYTES
        if self.segment_bytes < smallest_record:
            raise ValueError(
                f"segment_bytes ({self.segment_bytes}) must hold a record with a max-size body: "
                f"at least {smallest_record} for max_message_bytes {self.max_message_bytes}"
            )
        if not self.disk_max_used_space_ratio <= self.disk_space_clean_forcibly_ratio:
            raise ValueError(
                f"disk_max_used_space_ratio ({self.disk_max_used_space_ratio}) must not exceed "
                f"disk_space_clean_forcibly_ratio ({self.disk_space_clean_forcibly_ratio})"
            )
        return self

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        return parse_delay_levels(self.delay_levels)

    @property
    def slave_advice_lag_bytes(self) -> int:
        if self.pull_from_slave_lag_bytes is not None:
            return self.pull_from_slave_lag_bytes
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 0.4)
