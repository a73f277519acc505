"""Outcomes of store operations as values: expected results are never exceptions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from orbitmq.store.commitlog import AppendedBatch, AppendedMessage


class PutStatus(Enum):
    PUT_OK = "PUT_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    """Stored, but the fsync did not finish in time (SYNC_FLUSH)."""
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"
    SERVICE_NOT_AVAILABLE = "SERVICE_NOT_AVAILABLE"
    """The store is closed, closing, or a slave (it does not take writes)."""
    CREATE_MAPPED_FILE_FAILED = "CREATE_MAPPED_FILE_FAILED"
    DISK_FULL = "DISK_FULL"
    """Refused: the store's disk is past ``disk_space_warning_level_ratio`` or refused a write
    (RocketMQ answers SERVICE_NOT_AVAILABLE with "the broker's disk is full")."""
    MESSAGE_ILLEGAL = "MESSAGE_ILLEGAL"
    PROPERTIES_SIZE_EXCEEDED = "PROPERTIES_SIZE_EXCEEDED"
    UNKNOWN_ERROR = "UNKNOWN_ERROR"

    @property
    def stored(self) -> bool:
        """Whether the message is in the log (it is also for the timeout statuses)."""
        return self in (
            PutStatus.PUT_OK,
            PutStatus.FLUSH_DISK_TIMEOUT,
            PutStatus.FLUSH_SLAVE_TIMEOUT,
            PutStatus.SLAVE_NOT_AVAILABLE,
        )


@dataclass(slots=True)
class PutResult:
    status: PutStatus
    messages: Sequence[AppendedMessage] = ()
    """Where each message landed (an :class:`AppendedBatch` after a successful put)."""
    reason: str | None = None
    """Why a message was refused, naming the value and the rule."""

    @property
    def ok(self) -> bool:
        return self.status is PutStatus.PUT_OK

    @property
    def first(self) -> AppendedMessage:
        return self.messages[0]

    @property
    def end_offset(self) -> int:
        """Commit-log offset just past the last record written."""
        if isinstance(self.messages, AppendedBatch):
            return self.messages.end_offset
        last = self.messages[-1]
        return last.physical_offset + last.size

    def with_status(self, status: PutStatus, reason: str | None = None) -> PutResult:
        return PutResult(status, self.messages, reason)


class GetStatus(Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    """The units read point to records that are gone (deleted by retention)."""
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(frozen=True, slots=True)
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    records: list[bytes] = field(default_factory=list)
    """Raw records, sent to the consumer as they are stored (it decodes them)."""
    suggest_pull_from_slave: bool = False

    @property
    def total_bytes(self) -> int:
        return sum(len(r) for r in self.records)
