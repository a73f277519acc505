"""One pull's walk over a consume queue: its units to the records they point at.

A pull of 32 records is a loop over 32 units: check the unit, slice the record from the
commit-log segment, stop at the count or byte limit. :class:`PullRead` runs that loop in C
(``orbitmq._native.read_records``) for a pull without a filter, handing every unit the C loop
does not take (the first of a new segment, a unit pointing at deleted or missing data) to
:meth:`PullRead.take`, which is the rule for each unit; filtered pulls run :meth:`take` for
all units.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from orbitmq.native import NATIVE
from orbitmq.store.consume_queue import UNIT, UNIT_BYTES, ConsumeQueue, Unit
from orbitmq.store.record import decode
from orbitmq.store.results import GetStatus

if TYPE_CHECKING:
    from orbitmq.store.commitlog import CommitLog
    from orbitmq.store.message_filter import MessageFilter


class PullRead:
    """The records one pull returns, and how far in the queue it got."""

    __slots__ = (
        "_buffer",
        "_commitlog",
        "_end",
        "_filter",
        "_max_bytes",
        "_max_count",
        "_min_physical",
        "_segment_end",
        "_segment_start",
        "done",
        "last_physical",
        "next_offset",
        "records",
        "status",
        "total_bytes",
    )

    def __init__(
        self,
        commitlog: CommitLog,
        offset: int,
        max_count: int,
        max_bytes: int,
        message_filter: MessageFilter | None,
        visible_end: int | None = None,
    ) -> None:
        """``visible_end``: no record ending past this commit-log offset is read (a SYNC_MASTER's
        slave-confirmed offset, see :attr:`.MessageStore.visible_end`); None: the log's end."""
        self._commitlog = commitlog
        self._end = commitlog.max_offset if visible_end is None else min(visible_end, commitlog.max_offset)
        self._min_physical = commitlog.min_offset
        self._max_count, self._max_bytes, self._filter = max_count, max_bytes, message_filter
        # Records are sliced straight from the segment that held the previous one (a pull's
        # records are usually neighbours), starting with the newest segment (consumers that
        # keep up read there); CommitLog.read runs only when the segment changes.
        segment = commitlog.last_segment
        if segment is None:
            self._buffer: Any = None
            self._segment_start = self._segment_end = 0
        else:
            self._buffer, self._segment_start = segment.buffer, segment.start_offset
            self._segment_end = min(segment.start_offset + segment.size, self._end)
        self.records: list[bytes] = []
        self.status = GetStatus.NO_MATCHED_MESSAGE
        self.total_bytes, self.next_offset, self.last_physical = 0, offset, 0
        self.done = False

    def read(self, queue: ConsumeQueue, scan_limit: int) -> None:
        """Walk ``queue`` from the pull's offset until it is full, the queue ends, or
        ``scan_limit`` (how far a filtered pull may look) is reached."""
        fast = NATIVE is not None and self._filter is None
        while not self.done and self.next_offset < min(queue.max_offset, scan_limit):
            want = min(self._max_count * 4 if self._filter else self._max_count, 4096)
            raw = queue.units_raw(self.next_offset, want)
            if not raw:
                break
            if fast:
                self._read_fast(memoryview(raw))
            else:
                for unit in UNIT.iter_unpack(raw):
                    if self.take(unit):
                        break
        if self.records:
            self.status = GetStatus.FOUND

    def _read_fast(self, raw: memoryview) -> None:
        records, at = self.records, 0
        while at < len(raw) and not self.done:
            if self._buffer is not None:
                consumed, added, last, stop = NATIVE.read_records(  # type: ignore[union-attr]
                    self._buffer,
                    self._segment_start,
                    self._segment_end,
                    raw[at:],
                    self._max_count - len(records),
                    self._max_bytes - self.total_bytes,
                    bool(records),
                    self._min_physical,
                    records,
                )
                self.next_offset += consumed
                if added:
                    self.total_bytes += added
                    self.last_physical = last
                at += consumed * UNIT_BYTES
                if stop == 1:
                    self.done = True
                if stop != 2:
                    continue
            self.take(UNIT.unpack_from(raw, at))  # a unit the C loop leaves to this rule
            at += UNIT_BYTES

    def take(self, unit: Unit) -> bool:
        """Apply one unit: stop (True) when the pull is full, else count it and keep its record
        if it still exists and passes the filter."""
        physical, size, code = unit
        records = self.records
        if len(records) >= self._max_count or (records and self.total_bytes + size > self._max_bytes):
            self.done = True
            return True
        if physical + size > self._end:
            # Past the log's end (the log was cut under this pull: a rejoining slave cuts its
            # commit log, then its consume queues, beside pulls) or past what a SYNC_MASTER's
            # slave holds. Skipping the unit would move the reader past queue offsets that a new
            # master fills with other messages, or that this one confirms later.
            self.done = True
            self.status = GetStatus.OFFSET_OVERFLOW_ONE if not records else self.status
            return True
        self.next_offset += 1
        if size <= 0 or physical < self._min_physical:
            self.status = GetStatus.OFFSET_FOUND_NULL if not records else self.status
            return False
        message_filter = self._filter
        if message_filter is not None and not message_filter.matches_tags_code(code):
            return False
        if self._segment_start <= physical and physical + size <= self._segment_end:
            at = physical - self._segment_start
            try:
                record: bytes | None = self._buffer[at : at + size]
            except ValueError:  # deleted by retention since the last record
                record = None
        else:
            commitlog = self._commitlog
            record = commitlog.read(physical, size)
            segment = commitlog.segment_for(physical) if record is not None else None
            if segment is not None:
                self._buffer, self._segment_start = segment.buffer, segment.start_offset
                self._segment_end = min(segment.end_offset, self._end)
        if record is None:
            self.status = GetStatus.OFFSET_FOUND_NULL if not records else self.status
            return False
        if (
            message_filter is not None
            and message_filter.needs_properties
            and not message_filter.matches_properties(decode(record, check_crc=False).properties)
        ):
            return False
        records.append(record)
        self.total_bytes += size
        self.last_physical = physical
        return False
