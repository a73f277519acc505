"""Consume queues: the per-(topic, queue) index of the commit log that consumers read.

A consume queue is a log of fixed 20-byte *units*, one per message of that queue, in queue
offset order; the queue offset of a message is simply the index of its unit. Fixed-size units
make "the message at queue offset N" one multiplication away, and carrying the tag hash lets a
tag filter skip messages without touching the commit log.

Unit (big-endian)::

     0  physical_offset  i64   where the record starts in the commit log
     8  size             i32   record size in bytes
    12  tags_code        i64   tag hash (see record.tags_code); for delayed messages the due time

Files hold ``units_per_file`` units and are named by the byte offset of their first unit
(``00000000000006000000`` holds units 300 000 ...), in ``consumequeue/<topic>/<queue id>/``.
A unit with size 0 is a hole (never written); readers skip it.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from pathlib import Path

from orbitmq.store.mapped_file import (
    FsyncFn,
    MappedFile,
    check_contiguous,
    list_offset_files,
)

log = logging.getLogger(__name__)

UNIT = struct.Struct("!qiq")
UNIT_BYTES = UNIT.size  # 20
_UNIT_END = struct.Struct("!qi")  # a unit's physical offset and size

Unit = tuple[int, int, int]
"""(physical offset, size, tags code)."""


class ConsumeQueue:
    def __init__(self, directory: Path, topic: str, queue_id: int, units_per_file: int, fsync: FsyncFn):
        self.directory = directory
        self.topic = topic
        self.queue_id = queue_id
        self.units_per_file = units_per_file
        self.file_bytes = units_per_file * UNIT_BYTES
        self._fsync = fsync
        self._files: list[MappedFile] = []
        self._tail: MappedFile | None = None
        """The file the next unit goes to (saves a lookup per put)."""
        self._min_offset = 0
        self._max_offset = 0
        self._flushed_offset = 0
        self.max_physical_end = 0
        """End (offset + size) of the last record this queue indexes."""

    # -- opening -------------------------------------------------------------------------------

    def load(self) -> None:
        files = list_offset_files(self.directory)
        check_contiguous(files, self.file_bytes)
        for start, path in files:
            self._files.append(MappedFile(path, start, self.file_bytes, create=False))
        if not self._files:
            return
        first = self._files[0].start_offset // UNIT_BYTES
        self._min_offset = first
        self._max_offset = self._recover_end()
        self._flushed_offset = self._max_offset
        self._min_offset = self._first_written(first)
        last = self._last_unit()
        self.max_physical_end = last[0] + last[1] if last else 0

    def _recover_end(self) -> int:
        """Queue offset after the last written unit, found by scanning back from the last file."""
        for mapped in reversed(self._files):
            data = mapped.pread(0, mapped.size)
            used = len(data.rstrip(b"\x00"))
            if used:
                units = -(-used // UNIT_BYTES)
                return mapped.start_offset // UNIT_BYTES + units
        return self._files[0].start_offset // UNIT_BYTES

    def _first_written(self, start: int) -> int:
        for offset in range(start, self._max_offset):
            unit = self.unit_at(offset)
            if unit is not None and unit[1] > 0:
                return offset
        return start if self._max_offset == start else self._max_offset

    def truncate_tail(self, is_valid: Callable[[int, Unit], bool]) -> int:
        """Drop trailing units that ``is_valid(queue_offset, unit)`` rejects (recovery).

        Recovery passes a check against the commit log, so units pointing into a cut log tail,
        or torn by a crash mid-write, disappear and are rebuilt by the dispatcher's replay.
        """
        removed = 0
        while self._max_offset > self._min_offset:
            offset = self._max_offset - 1
            unit = self.unit_at(offset)
            if unit is not None and unit[1] > 0 and is_valid(offset, unit):
                break
            mapped, position = self._locate(offset)
            mapped.write(position, bytes(UNIT_BYTES))
            self._max_offset = offset
            removed += 1
        self._flushed_offset = min(self._flushed_offset, self._max_offset)
        last = self._last_unit()
        self.max_physical_end = last[0] + last[1] if last else 0
        return removed

    # -- positions -----------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        return self._min_offset

    @property
    def max_offset(self) -> int:
        """Queue offset of the next unit: last + 1, 0 when empty."""
        return self._max_offset

    def _locate(self, queue_offset: int) -> tuple[MappedFile, int]:
        byte_offset = queue_offset * UNIT_BYTES
        index = (byte_offset - self._files[0].start_offset) // self.file_bytes
        mapped = self._files[index]
        return mapped, byte_offset - mapped.start_offset

    def _last_unit(self) -> Unit | None:
        return self.unit_at(self._max_offset - 1) if self._max_offset > self._min_offset else None

    # -- writing -------------------------------------------------------------------------------

    def put(self, queue_offset: int, physical_offset: int, size: int, tags_code: int) -> bool:
        """Record one message's unit. Replays of units already present are ignored."""
        if queue_offset != self._max_offset:
            if queue_offset < self._max_offset:
                return False
            self._skip_to(queue_offset)
        byte_offset = queue_offset * UNIT_BYTES
        tail = self._tail
        if tail is None or not tail.start_offset <= byte_offset < tail.end_offset:
            files = self._files
            if not files or byte_offset >= files[-1].end_offset:
                self._add_file(byte_offset - byte_offset % self.file_bytes)
            tail = self._tail = self._locate(queue_offset)[0]
        UNIT.pack_into(tail.buffer, byte_offset - tail.start_offset, physical_offset, size, tags_code)
        self._max_offset = queue_offset + 1
        self.max_physical_end = physical_offset + size
        return True

    def put_units(self, first_queue_offset: int, units: bytes) -> bool:
        """Record packed units (20 bytes each) for consecutive queue offsets, with one write.

        Anything out of the ordinary — a replay, a gap, a new or full file — goes unit by unit
        through :meth:`put`, which knows those cases; the usual append is one copy.
        """
        if not units:
            return False
        byte_offset = first_queue_offset * UNIT_BYTES
        tail = self._tail
        if (
            first_queue_offset != self._max_offset
            or tail is None
            or not tail.start_offset <= byte_offset
            or byte_offset + len(units) > tail.start_offset + tail.size
        ):
            grown = False
            for queue_offset, unit in enumerate(UNIT.iter_unpack(units), first_queue_offset):
                grown = self.put(queue_offset, *unit) or grown
            return grown
        tail.write(byte_offset - tail.start_offset, units)
        self._max_offset = first_queue_offset + len(units) // UNIT_BYTES
        physical, size = _UNIT_END.unpack_from(units, len(units) - UNIT_BYTES)
        self.max_physical_end = physical + size
        return True

    def _skip_to(self, queue_offset: int) -> None:
        if not self._files:
            # A queue whose files are gone starts where its messages start.
            self._min_offset = self._max_offset = self._flushed_offset = queue_offset
            return
        log.error(
            "consume queue %s-%d: unit %d arrived but the queue ends at %d; leaving a hole",
            self.topic,
            self.queue_id,
            queue_offset,
            self._max_offset,
        )
        while self._files[-1].end_offset < queue_offset * UNIT_BYTES:
            self._add_file(self._files[-1].end_offset)
        self._max_offset = queue_offset

    def _add_file(self, start: int) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        if self._files and start != self._files[-1].end_offset:
            raise ValueError(f"consume queue file at {start} does not follow {self._files[-1].path}")
        self._files = [*self._files, MappedFile.create(self.directory, start, self.file_bytes)]

    # -- reading -------------------------------------------------------------------------------

    def unit_at(self, queue_offset: int) -> Unit | None:
        if not self._min_offset <= queue_offset < self._max_offset:
            return None
        mapped, position = self._locate(queue_offset)
        return UNIT.unpack_from(mapped.buffer, position)

    def units(self, queue_offset: int, max_units: int) -> list[Unit]:
        """Up to ``max_units`` units from ``queue_offset``, never past the queue's end or a file end."""
        return list(UNIT.iter_unpack(self.units_raw(queue_offset, max_units)))

    def units_raw(self, queue_offset: int, max_units: int) -> bytes:
        """:meth:`units` as the file holds them (20 bytes each), for readers that unpack them in C."""
        end = min(self._max_offset, queue_offset + max_units)
        if queue_offset < self._min_offset or queue_offset >= end:
            return b""
        mapped, position = self._locate(queue_offset)
        count = min(end - queue_offset, (mapped.size - position) // UNIT_BYTES)
        return mapped.read(position, count * UNIT_BYTES)

    def offset_by_time(self, timestamp_ms: int, store_time_of: Callable[[int], int | None]) -> int:
        """The first queue offset whose message was stored at or after ``timestamp_ms``.

        Binary search over units, reading each probe's store time from the commit log;
        before every message → min offset, after every message → max offset.
        """
        low, high = self._min_offset, self._max_offset
        while low < high:
            middle = (low + high) // 2
            unit = self.unit_at(middle)
            stored = store_time_of(unit[0]) if unit and unit[1] > 0 else None
            if (
                stored is None or stored < timestamp_ms
            ):  # a hole or a record removed by retention: search above it
                low = middle + 1
            else:
                high = middle
        return low

    # -- flushing and retention ----------------------------------------------------------------

    def flush(self) -> bool:
        """fsync units written since the last flush; True if anything was written."""
        target = self._max_offset
        if target <= self._flushed_offset:
            return False
        low = self._flushed_offset * UNIT_BYTES
        high = target * UNIT_BYTES
        for mapped in self._files:
            if mapped.end_offset > low and mapped.start_offset < high:
                mapped.fsync(self._fsync)
        self._flushed_offset = target
        return True

    def delete_before_physical(self, commitlog_min_offset: int) -> int:
        """Drop files that only index deleted commit-log data, then raise the min offset."""
        deleted = 0
        while len(self._files) > 1:
            last_unit_offset = self._files[0].end_offset // UNIT_BYTES - 1
            unit = self.unit_at(last_unit_offset)
            if unit is None or unit[0] + unit[1] > commitlog_min_offset:
                break
            oldest = self._files[0]
            self._files = self._files[1:]
            oldest.delete()
            deleted += 1
        if self._files:
            self._min_offset = max(self._min_offset, self._files[0].start_offset // UNIT_BYTES)
        self._raise_min_offset(commitlog_min_offset)
        return deleted

    def _raise_min_offset(self, commitlog_min_offset: int) -> None:
        low, high = self._min_offset, self._max_offset
        while low < high:
            middle = (low + high) // 2
            unit = self.unit_at(middle)
            if unit is not None and unit[0] >= commitlog_min_offset:
                high = middle
            else:
                low = middle + 1
        self._min_offset = low

    def close(self) -> None:
        for mapped in self._files:
            mapped.close()

    def destroy(self) -> None:
        for mapped in self._files:
            mapped.delete()
        self._files = []
        self._tail = None
        self._min_offset = self._max_offset = self._flushed_offset = 0
