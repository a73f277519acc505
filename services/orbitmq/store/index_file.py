"""The broker's message index: find messages by business key (or unique key) within a time range.

Consumers find messages by queue offset; operators and tools find them by *key* ("where is order
4711?"). Like RocketMQ's ``IndexFile``, the broker keeps a persistent hash index from
``f"{topic}#{key}"`` to commit-log physical offsets, in fixed-size memory-mapped files that are
appended to and never rewritten. A put is a handful of ``struct.pack_into`` calls on the mapping
(no syscalls, no allocation beyond the key bytes), so indexing keeps up with the dispatcher.

File layout (all integers big-endian, ``"!"`` struct format)::

    +--------------------------------------------------------------------------------+
    | header, HEADER_SIZE = 40 bytes                                                 |
    |   begin_timestamp_ms i64 | end_timestamp_ms i64 | begin_phy_offset i64 |       |
    |   end_phy_offset i64     | used_slot_count i32  | entry_count i32              |
    +--------------------------------------------------------------------------------+
    | slot table, slot_count * SLOT_SIZE (4) bytes                                   |
    |   head i32: 1-based number of the newest entry hashed to this slot, 0 = empty  |
    +--------------------------------------------------------------------------------+
    | entries, max_entries * ENTRY_SIZE (20) bytes, appended in order                |
    |   key_hash u32 | phy_offset i64 | time_delta_s i32 | prev_entry i32            |
    +--------------------------------------------------------------------------------+

* ``key_hash`` is ``zlib.crc32`` of the UTF-8 key, stored unsigned (``"I"``) so writes and reads
  agree without a signed conversion; the slot is ``key_hash % slot_count``.
* ``time_delta_s`` is ``(store_timestamp_ms - begin_timestamp_ms) // 1000`` (floor, may be negative
  if the clock stepped back). The index therefore knows a message's time to one second; the time
  filter is conservative and also returns entries up to 999 ms outside the requested range.
* ``prev_entry`` chains entries of the same slot, newest first (0 ends the chain). Different keys
  sharing a slot, even with an identical hash, are all kept; a lookup returns every entry whose
  hash matches. Results are *candidates*: the message store decodes the record and checks the real
  topic and key.
* ``end_phy_offset`` is *exclusive*: the commit-log offset just past the last message this file has
  seen (``physical_offset + size`` when written by :class:`IndexService`). It is what replay after a
  crash restarts from and what makes re-dispatching a message a no-op.

Files live in one directory and are named after their creation time, ``yyyyMMddHHmmssSSS`` (UTC),
with ``_<n>`` appended when a name is taken or the clock stepped back, so name order is age order.

Durability: puts only touch the page cache. :meth:`IndexService.flush` fsyncs the file descriptor
(``os.fsync``; the mapping is ``MAP_SHARED`` so this covers it, and unlike ``mmap.flush`` it does
not need the mapping) and returns the physical offset the caller records as its checkpoint. After
an unclean shutdown :meth:`IndexService.load` drops files that may hold unflushed entries and
returns where the dispatcher must replay from.
"""

from __future__ import annotations

import array
import logging
import mmap
import os
import re
import struct
import sys
import threading
import zlib
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from orbitmq.common.clock import SYSTEM_CLOCK, Clock
from orbitmq.native import NATIVE
from orbitmq.store.dispatch import DispatchRequest, KeyedBatch
from orbitmq.store.mapped_file import fsync_directory, reserve

__all__ = [
    "DEFAULT_MAX_ENTRIES",
    "DEFAULT_SLOT_COUNT",
    "ENTRY_SIZE",
    "HEADER_SIZE",
    "SLOT_SIZE",
    "IndexFile",
    "IndexService",
    "index_file_size",
    "index_key",
    "key_hash",
]

log = logging.getLogger(__name__)

_HEADER = struct.Struct("!qqqqii")
_SLOT = struct.Struct("!i")
_ENTRY = struct.Struct("!Iqii")

HEADER_SIZE = _HEADER.size
"""Bytes of the file header (40)."""
SLOT_SIZE = _SLOT.size
"""Bytes of one slot-table cell (4)."""
ENTRY_SIZE = _ENTRY.size
"""Bytes of one index entry (20)."""

DEFAULT_SLOT_COUNT = 5_000_000
DEFAULT_MAX_ENTRIES = 20_000_000

_I32_MIN = -(2**31)
_I32_MAX = 2**31 - 1
_I64_MAX = 2**63 - 1
_TIME_GRANULARITY_MS = 1000
_NAME_RE = re.compile(r"^(\d{17})(?:_(\d+))?$")
_BIG_ENDIAN_HOST = sys.byteorder == "big"
_REPAIR_CHUNK_ENTRIES = 1 << 16

assert HEADER_SIZE == 40 and SLOT_SIZE == 4 and ENTRY_SIZE == 20

_INDEX_PUT = (
    NATIVE.index_put
    if getattr(NATIVE, "INDEX_SLOT_BYTES", None) == SLOT_SIZE
    and getattr(NATIVE, "INDEX_ENTRY_BYTES", None) == ENTRY_SIZE
    else None
)
"""``_native.index_put`` when the extension has it (a build from before it, or
``ORBITMQ_NATIVE=off``: the Python path, :meth:`IndexFile.put` key by key)."""


RESERVE_AHEAD_BYTES = 1 << 20
"""Disk blocks an index file allocates ahead of its entries (52 428 entries): reserving the whole
file (420 MB by default) at creation would make an empty broker take that much disk, while
leaving it sparse let a full disk kill the broker with SIGBUS on its next index write."""


def index_key(topic: str, key: str) -> str:
    """The string an index entry is hashed from."""
    return f"{topic}#{key}"


def key_hash(key: str) -> int:
    """Unsigned CRC-32 of the UTF-8 key: the value stored in an entry's ``key_hash`` field."""
    return zlib.crc32(key.encode())


def index_file_size(slot_count: int, max_entries: int) -> int:
    """Size in bytes of an index file with this geometry."""
    return HEADER_SIZE + slot_count * SLOT_SIZE + max_entries * ENTRY_SIZE


def _check_geometry(slot_count: int, max_entries: int) -> None:
    if not 1 <= slot_count <= _I32_MAX:
        raise ValueError(f"slot_count={slot_count!r}: must be between 1 and {_I32_MAX}")
    if not 1 <= max_entries <= _I32_MAX:
        raise ValueError(f"max_entries={max_entries!r}: must be between 1 and {_I32_MAX}")


def _check_non_negative(name: str, value: int) -> None:
    if not 0 <= value <= _I64_MAX:
        raise ValueError(f"{name}={value!r}: must be a non-negative 64-bit integer")


def _check_range(max_num: int, begin_ms: int, end_ms: int) -> None:
    if max_num < 1:
        raise ValueError(f"max_num={max_num!r}: must be at least 1")
    if begin_ms > end_ms:
        raise ValueError(f"begin_ms={begin_ms!r} is after end_ms={end_ms!r}: the range must not be empty")


class IndexFile:
    """One fixed-size, memory-mapped hash index file.

    Not thread-safe for concurrent puts; :class:`IndexService` serialises puts and lookups. Only
    :meth:`flush` and :meth:`close` synchronise with each other, so a flusher thread may fsync
    while another thread keeps appending.
    """

    def __init__(
        self,
        path: Path | str,
        slot_count: int,
        max_entries: int,
        *,
        create: bool,
        begin_phy_offset: int = 0,
        begin_timestamp_ms: int = 0,
    ) -> None:
        _check_geometry(slot_count, max_entries)
        _check_non_negative("begin_phy_offset", begin_phy_offset)
        _check_non_negative("begin_timestamp_ms", begin_timestamp_ms)
        self._path = Path(path)
        self._slot_count = slot_count
        self._max_entries = max_entries
        self._size = index_file_size(slot_count, max_entries)
        self._slots_start = HEADER_SIZE
        self._entries_start = HEADER_SIZE + slot_count * SLOT_SIZE
        self._io_lock = threading.Lock()
        self._closed = False
        self._reserved = 0
        """Bytes from the start whose disk blocks are allocated: nothing is written through the
        mapping past it (a write into a hole of a full disk is a SIGBUS, not an error)."""
        self._fd = self._open_fd(create)
        try:
            self._mm = mmap.mmap(self._fd, self._size)
        except BaseException:
            os.close(self._fd)
            raise
        try:
            if create:
                self._init_header(begin_phy_offset, begin_timestamp_ms)
            else:
                self._read_header()
        except BaseException:
            self._mm.close()
            os.close(self._fd)
            raise

    def _open_fd(self, create: bool) -> int:
        if create:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.ftruncate(fd, self._size)
                self._reserved = reserve(fd, 0, min(self._size, self._entries_start + RESERVE_AHEAD_BYTES))
            except BaseException:
                os.close(fd)
                self._path.unlink(missing_ok=True)
                raise
            return fd
        fd = os.open(self._path, os.O_RDWR)
        actual = os.fstat(fd).st_size
        if actual != self._size:
            os.close(fd)
            raise ValueError(
                f"index file {self._path} is {actual} bytes: must be {self._size} bytes for "
                f"slot_count={self._slot_count}, max_entries={self._max_entries}"
            )
        return fd

    # -- header ---------------------------------------------------------------------------------

    def _init_header(self, begin_phy_offset: int, begin_timestamp_ms: int) -> None:
        self._begin_timestamp_ms = self._end_timestamp_ms = begin_timestamp_ms
        self._begin_phy_offset = self._end_phy_offset = begin_phy_offset
        self._used_slot_count = self._entry_count = 0
        self._write_header()

    def _read_header(self) -> None:
        (
            self._begin_timestamp_ms,
            self._end_timestamp_ms,
            self._begin_phy_offset,
            self._end_phy_offset,
            self._used_slot_count,
            self._entry_count,
        ) = _HEADER.unpack_from(self._mm, 0)
        if not 0 <= self._entry_count <= self._max_entries:
            raise ValueError(
                f"index file {self._path}: entry_count={self._entry_count} must be between 0 and "
                f"max_entries={self._max_entries}"
            )

    def _write_header(self) -> None:
        _HEADER.pack_into(
            self._mm,
            0,
            self._begin_timestamp_ms,
            self._end_timestamp_ms,
            self._begin_phy_offset,
            self._end_phy_offset,
            self._used_slot_count,
            self._entry_count,
        )

    @property
    def path(self) -> Path:
        return self._path

    @property
    def slot_count(self) -> int:
        return self._slot_count

    @property
    def max_entries(self) -> int:
        return self._max_entries

    @property
    def begin_timestamp_ms(self) -> int:
        return self._begin_timestamp_ms

    @property
    def end_timestamp_ms(self) -> int:
        return self._end_timestamp_ms

    @property
    def begin_phy_offset(self) -> int:
        return self._begin_phy_offset

    @property
    def end_phy_offset(self) -> int:
        """Exclusive end of the commit-log range this file has indexed."""
        return self._end_phy_offset

    @property
    def used_slot_count(self) -> int:
        return self._used_slot_count

    @property
    def entry_count(self) -> int:
        return self._entry_count

    @property
    def is_full(self) -> bool:
        return self._entry_count >= self._max_entries

    @property
    def remaining(self) -> int:
        """How many more entries fit."""
        return self._max_entries - self._entry_count

    @property
    def closed(self) -> bool:
        return self._closed

    def overlaps(self, begin_ms: int, end_ms: int) -> bool:
        """Whether this file's [begin, end] timestamps intersect [begin_ms, end_ms]."""
        return self._begin_timestamp_ms <= end_ms and self._end_timestamp_ms >= begin_ms

    # -- write path ----------------------------------------------------------------------------

    def put(
        self, key: str, phy_offset: int, store_timestamp_ms: int, *, end_phy_offset: int | None = None
    ) -> bool:
        """Append an entry for ``key``; False (nothing written) when the file is full.

        ``end_phy_offset`` is the exclusive end to record in the header (default
        ``phy_offset + 1``); :class:`IndexService` passes ``physical_offset + size``.
        """
        count = self._entry_count
        if count >= self._max_entries:
            return False
        if self._entries_start + (count + 1) * ENTRY_SIZE > self._reserved:
            self._reserve_for(count + 1)
        if phy_offset < 0:
            raise ValueError(f"phy_offset={phy_offset!r}: must not be negative")
        if count == 0 and self._begin_timestamp_ms == 0:
            self._begin_timestamp_ms = self._end_timestamp_ms = store_timestamp_ms
        delta_s = (store_timestamp_ms - self._begin_timestamp_ms) // _TIME_GRANULARITY_MS
        if not _I32_MIN <= delta_s <= _I32_MAX:
            raise ValueError(
                f"store_timestamp_ms={store_timestamp_ms!r}: must be within 2**31 seconds of the file's "
                f"begin_timestamp_ms={self._begin_timestamp_ms}"
            )
        mm = self._mm
        hash_ = zlib.crc32(key.encode())
        slot_pos = self._slots_start + (hash_ % self._slot_count) * SLOT_SIZE
        head = _SLOT.unpack_from(mm, slot_pos)[0]
        if head == 0:
            self._used_slot_count += 1
        number = count + 1
        _ENTRY.pack_into(mm, self._entries_start + count * ENTRY_SIZE, hash_, phy_offset, delta_s, head)
        self._entry_count = number
        if end_phy_offset is None:
            end_phy_offset = phy_offset + 1
        if end_phy_offset > self._end_phy_offset:
            self._end_phy_offset = end_phy_offset
        if store_timestamp_ms > self._end_timestamp_ms:
            self._end_timestamp_ms = store_timestamp_ms
        # Header (entry_count) before slot: a reader that sees the new head also sees the count.
        _HEADER.pack_into(
            mm,
            0,
            self._begin_timestamp_ms,
            self._end_timestamp_ms,
            self._begin_phy_offset,
            self._end_phy_offset,
            self._used_slot_count,
            number,
        )
        _SLOT.pack_into(mm, slot_pos, number)
        return True

    def mark_indexed(
        self, end_phy_offset: int, store_timestamp_ms: int, *, write_header: bool = True
    ) -> None:
        """Record that the commit log up to ``end_phy_offset`` was seen (a message without keys).

        ``write_header=False`` defers the header write to :meth:`write_header` (batched builds).
        """
        if end_phy_offset < 0:
            _check_non_negative("end_phy_offset", end_phy_offset)
        if self._entry_count == 0 and self._begin_timestamp_ms == 0:
            self._begin_timestamp_ms = self._end_timestamp_ms = store_timestamp_ms
        if end_phy_offset > self._end_phy_offset:
            self._end_phy_offset = end_phy_offset
        if store_timestamp_ms > self._end_timestamp_ms:
            self._end_timestamp_ms = store_timestamp_ms
        if write_header:
            self._write_header()

    def write_header(self) -> None:
        self._write_header()

    def put_keyed(self, batch: KeyedBatch, start: int) -> int:
        """Entries for ``batch.indexed[start:]`` in C, message by message while each one's keys
        all fit, skipping messages this file has indexed already; returns the position of the
        first message not taken (``len(batch.indexed)`` when all were), which the caller puts
        the Python way (:meth:`put`: a roll, a split, or its error). What :meth:`put` would
        write for each key, except the header, which waits for :meth:`write_header`."""
        assert _INDEX_PUT is not None
        timestamp = batch.store_timestamp_ms
        fresh = self._entry_count == 0 and self._begin_timestamp_ms == 0
        delta_s = (timestamp - (timestamp if fresh else self._begin_timestamp_ms)) // _TIME_GRANULARITY_MS
        if not _I32_MIN <= delta_s <= _I32_MAX:
            return start  # put() refuses it, naming the times
        reserved_entries = min(self._max_entries, (self._reserved - self._entries_start) // ENTRY_SIZE)
        if reserved_entries <= self._entry_count:
            return start  # put() reserves more
        position, self._entry_count, self._used_slot_count, last = _INDEX_PUT(
            self._mm,
            self._slots_start,
            self._slot_count,
            self._entries_start,
            reserved_entries,
            self._entry_count,
            self._used_slot_count,
            delta_s,
            batch.topic + "#",
            batch.indexed,
            batch.physical_offsets,
            start,
            self._end_phy_offset,
        )
        if last >= 0:
            if fresh:
                self._begin_timestamp_ms = self._end_timestamp_ms = timestamp
            end = batch.physical_offsets[last] + batch.sizes[last]
            if end > self._end_phy_offset:
                self._end_phy_offset = end
            if timestamp > self._end_timestamp_ms:
                self._end_timestamp_ms = timestamp
        return position  # type: ignore[no-any-return]

    def _reserve_for(self, entries: int) -> None:
        """Allocate disk blocks for the header, the slots and ``entries`` entries, and a stretch
        beyond (:data:`RESERVE_AHEAD_BYTES`); ENOSPC is an ``OSError`` for the dispatcher, which
        tries again once space frees. A file opened from disk starts at 0 (an older file may be
        sparse), so its first write allocates any hole from the start."""
        end = min(self._size, self._entries_start + entries * ENTRY_SIZE + RESERVE_AHEAD_BYTES)
        if end > self._reserved:
            self._reserved = reserve(self._fd, self._reserved, end - self._reserved)

    # -- read path -----------------------------------------------------------------------------

    def lookup(self, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """Physical offsets of candidate entries for ``key`` stored in [begin_ms, end_ms], newest first.

        Candidates share the key's CRC-32 (the caller confirms the real key) and may lie up to
        999 ms outside the range (the index keeps whole seconds).
        """
        _check_range(max_num, begin_ms, end_ms)
        return self._lookup(key_hash(key), max_num, begin_ms, end_ms)

    def _lookup(self, hash_: int, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        mm = self._mm
        entries_start = self._entries_start
        begin_ts = self._begin_timestamp_ms
        # A stored time t stands for [t, t + 999]; keep it if that interval meets the range.
        low_bound = begin_ms - (_TIME_GRANULARITY_MS - 1)
        count = self._entry_count
        found: list[int] = []
        cur = _SLOT.unpack_from(mm, self._slots_start + (hash_ % self._slot_count) * SLOT_SIZE)[0]
        while 0 < cur <= count:
            entry_hash, phy_offset, delta_s, prev = _ENTRY.unpack_from(
                mm, entries_start + (cur - 1) * ENTRY_SIZE
            )
            if entry_hash == hash_:
                stored_ms = begin_ts + delta_s * _TIME_GRANULARITY_MS
                if low_bound <= stored_ms <= end_ms:
                    found.append(phy_offset)
                    if len(found) >= max_num:
                        break
            if prev >= cur:  # chains only point backwards; anything else is corruption
                break
            cur = prev
        return found

    # -- crash recovery ------------------------------------------------------------------------

    def repair_slots(self) -> bool:
        """Make the slot table consistent with the header; True if something had to be fixed.

        Entries ``1..entry_count`` were durable when the header was; but after a crash the slot
        pages may be newer than the header page and point past ``entry_count`` (or be garbage).
        Then every slot head is rebuilt from the durable entries. Cost: one pass over the slot
        table, plus one pass over the entries when a repair is needed.
        """
        heads = self._read_slot_table()
        count = self._entry_count
        if min(heads) >= 0 and max(heads) <= count:
            return False
        log.warning("index file %s: slot table ahead of header, rebuilding %d entries", self._path, count)
        self._rebuild_slots(count)
        return True

    def _read_slot_table(self) -> array.array[int]:
        heads = array.array("i")
        heads.frombytes(self._mm[self._slots_start : self._entries_start])
        if not _BIG_ENDIAN_HOST:
            heads.byteswap()
        return heads

    def _rebuild_slots(self, count: int) -> None:
        heads = array.array("i", bytes(self._slot_count * SLOT_SIZE))
        slot_count = self._slot_count
        used = 0
        for number, hash_ in self._iter_entry_hashes(count):
            slot = hash_ % slot_count
            if heads[slot] == 0:
                used += 1
            heads[slot] = number
        if not _BIG_ENDIAN_HOST:
            heads.byteswap()
        self._reserve_for(0)
        self._mm[self._slots_start : self._entries_start] = heads.tobytes()
        self._used_slot_count = used
        self._write_header()

    def _iter_entry_hashes(self, count: int) -> Iterator[tuple[int, int]]:
        number = 0
        for chunk_start in range(0, count, _REPAIR_CHUNK_ENTRIES):
            chunk_end = min(count, chunk_start + _REPAIR_CHUNK_ENTRIES)
            start = self._entries_start + chunk_start * ENTRY_SIZE
            data = self._mm[start : self._entries_start + chunk_end * ENTRY_SIZE]
            for hash_, _offset, _delta, _prev in _ENTRY.iter_unpack(data):
                number += 1
                yield number, hash_

    # -- lifecycle -----------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync the file (data and header). Safe to call from another thread than the writer."""
        with self._io_lock:
            if not self._closed:
                os.fsync(self._fd)

    def close(self, *, flush: bool = True) -> None:
        """Unmap and close; idempotent. Fsyncs first unless ``flush=False``."""
        with self._io_lock:
            if self._closed:
                return
            self._closed = True
            try:
                if flush:
                    os.fsync(self._fd)
            finally:
                self._mm.close()
                os.close(self._fd)

    def delete(self) -> None:
        """Close (without fsync: the data is being discarded) and remove the file."""
        self.close(flush=False)
        self._path.unlink(missing_ok=True)

    def __repr__(self) -> str:
        return (
            f"IndexFile({self._path.name}, entries={self._entry_count}/{self._max_entries}, "
            f"phy=[{self._begin_phy_offset}, {self._end_phy_offset}), "
            f"ts=[{self._begin_timestamp_ms}, {self._end_timestamp_ms}])"
        )


def _name_sort_key(path: Path) -> tuple[str, int]:
    match = _NAME_RE.match(path.name)
    assert match is not None
    return match.group(1), int(match.group(2) or 0)


def _timestamp_name(now_ms: int) -> str:
    moment = datetime.fromtimestamp(now_ms // 1000, tz=UTC)
    return moment.strftime("%Y%m%d%H%M%S") + f"{now_ms % 1000:03d}"


class IndexService:
    """All index files of a broker (oldest first): builds entries from dispatch, answers key queries.

    One lock serialises builds, queries, rolls and deletions; a put under it costs a couple of
    microseconds. :meth:`flush` holds it only to pick what to fsync, so a flusher thread does not
    stall the dispatcher for the duration of the disk write.
    """

    def __init__(
        self,
        directory: Path,
        slot_count: int = DEFAULT_SLOT_COUNT,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        _check_geometry(slot_count, max_entries)
        self._directory = Path(directory)
        self._slot_count = slot_count
        self._max_entries = max_entries
        self._clock = clock
        self._lock = threading.Lock()
        self._files: list[IndexFile] = []
        self._loaded = False
        self._closed = False
        self._dirty = False
        """Whether the newest file has writes not yet fsynced (older files are fsynced on roll)."""
        self._durable_offset = 0

    @property
    def directory(self) -> Path:
        return self._directory

    @property
    def files(self) -> tuple[IndexFile, ...]:
        """Index files, oldest first (a snapshot)."""
        with self._lock:
            return tuple(self._files)

    @property
    def end_phy_offset(self) -> int:
        """Exclusive end of what has been indexed (0 with no files)."""
        with self._lock:
            return self._files[-1].end_phy_offset if self._files else self._durable_offset

    # -- startup -------------------------------------------------------------------------------

    def load(self, flushed_phy_offset: int | None) -> int:
        """Open the existing files; return the physical offset to replay the commit log from.

        ``flushed_phy_offset`` is the checkpoint (what :meth:`flush` last returned and the caller
        persisted), or None after a clean shutdown. After an unclean shutdown every file whose
        ``end_phy_offset`` exceeds the checkpoint may hold entries that never reached the disk: it
        is deleted, as is every newer file, and the replay offset is the first offset no kept
        file covers.
        """
        if flushed_phy_offset is not None:
            _check_non_negative("flushed_phy_offset", flushed_phy_offset)
        with self._lock:
            self._check_usable(need_loaded=False)
            if self._loaded:
                raise RuntimeError(f"IndexService({self._directory}) is already loaded")
            self._directory.mkdir(parents=True, exist_ok=True)
            files = self._open_existing()
            if flushed_phy_offset is None:
                self._files = files
                replay = files[-1].end_phy_offset if files else 0
            else:
                self._files, replay = self._recover(files, flushed_phy_offset)
            self._loaded = True
            self._durable_offset = replay
            return replay

    def _open_existing(self) -> list[IndexFile]:
        paths = sorted(
            (p for p in self._directory.iterdir() if p.is_file() and _NAME_RE.match(p.name)),
            key=_name_sort_key,
        )
        files: list[IndexFile] = []
        try:
            for path in paths:
                if path.stat().st_size == 0:  # crashed between create and ftruncate
                    log.warning("index file %s is empty, deleting it", path)
                    path.unlink()
                    continue
                files.append(IndexFile(path, self._slot_count, self._max_entries, create=False))
        except BaseException:
            for index_file in files:
                index_file.close(flush=False)
            raise
        return files

    @staticmethod
    def _recover(files: list[IndexFile], flushed: int) -> tuple[list[IndexFile], int]:
        kept: list[IndexFile] = []
        for position, index_file in enumerate(files):
            if _is_durable_successor(index_file, kept[-1] if kept else None, flushed):
                kept.append(index_file)
                continue
            dropped = files[position:]
            log.warning(
                "index: checkpoint %d, deleting %d file(s) from %s on that may hold unflushed entries",
                flushed,
                len(dropped),
                index_file.path.name,
            )
            for stale in dropped:
                stale.delete()
            if not kept:
                return kept, dropped[0].begin_phy_offset
            # Not the dropped file's begin: its header may be the garbage that got it dropped.
            kept[-1].repair_slots()
            return kept, kept[-1].end_phy_offset
        if kept:
            kept[-1].repair_slots()
            return kept, kept[-1].end_phy_offset
        return kept, 0

    # -- write path ----------------------------------------------------------------------------

    def build(self, request: DispatchRequest) -> None:
        """Index the request's keys and unique key; a no-op for an already indexed message."""
        self.build_batch((request,))

    def build_batch(
        self,
        requests: Sequence[DispatchRequest | KeyedBatch],
        seen_until: int | None = None,
        seen_timestamp_ms: int = 0,
    ) -> None:
        """Index a dispatcher pass under one lock.

        ``requests`` are the pass's messages that carry keys, one by one or a column batch's
        at once; ``seen_until`` is where the pass ended in the log, so replay after a crash
        skips the keyless messages too.
        """
        with self._lock:
            self._check_usable(need_loaded=True)
            current = self._files[-1] if self._files else None
            for request in requests:
                if type(request) is KeyedBatch:
                    current = self._build_keyed(current, request)
                else:
                    current = self._build_one(current, request)  # type: ignore[arg-type]
            if seen_until is not None:
                if current is None:
                    current = self._roll(seen_until, seen_timestamp_ms)
                current.mark_indexed(seen_until, seen_timestamp_ms, write_header=False)
            if requests and current is not None:
                current.write_header()
            # A pass without keys (the usual send) leaves the header to flush(): a header that
            # lags after a crash only makes replay re-mark messages that have nothing to index.
            self._dirty = True

    def _build_one(self, current: IndexFile | None, request: DispatchRequest) -> IndexFile | None:
        """Index one message (under the lock); the newest file after it."""
        offset = request.physical_offset
        if current is not None and offset < current.end_phy_offset:
            return current
        timestamp = request.store_timestamp_ms
        end = offset + request.size
        keys = _message_keys(request)
        if current is None or (keys and len(keys) > current.remaining and current.entry_count > 0):
            current = self._roll(offset, timestamp)
        if keys:
            self._put_keys(current, request.topic + "#", keys, offset, timestamp, end)
            return self._files[-1]
        current.mark_indexed(end, timestamp, write_header=False)  # replay must skip it too
        return current

    def _build_keyed(self, current: IndexFile | None, batch: KeyedBatch) -> IndexFile | None:
        """Index a batch's keyed messages: in C while they fit the newest file, one at a time the
        Python way where they do not (a roll) or the C path cannot take them."""
        indexed = batch.indexed
        if _INDEX_PUT is None or type(indexed) is not list or type(batch.physical_offsets) is not list:
            for request in batch.requests():
                current = self._build_one(current, request)
            return current
        position = 0
        while position < len(indexed):
            if current is not None:
                position = current.put_keyed(batch, position)
            if position < len(indexed):
                current = self._build_one(current, batch.request(position))
                position += 1
        return current

    def _put_keys(
        self, current: IndexFile, prefix: str, keys: tuple[str, ...], offset: int, timestamp: int, end: int
    ) -> None:
        count = len(keys)
        for position, key in enumerate(keys):
            if current.is_full:
                current = self._roll(offset, timestamp)
            # Normally every key fits in ``current``. Only a message with more keys than a whole
            # file holds is split; its earlier files then end *at* the message, so that if a crash
            # drops the later file, replay re-indexes the message (queries drop the duplicates).
            fits = count - position <= current.remaining
            current.put(prefix + key, offset, timestamp, end_phy_offset=end if fits else offset)

    def _roll(self, begin_phy_offset: int, begin_timestamp_ms: int) -> IndexFile:
        """Seal the current file (fsync, so only the newest file can be torn) and start a new one."""
        if self._files:
            self._files[-1].write_header()
            self._files[-1].flush()
        path = self._next_path()
        index_file = IndexFile(
            path,
            self._slot_count,
            self._max_entries,
            create=True,
            begin_phy_offset=begin_phy_offset,
            begin_timestamp_ms=begin_timestamp_ms,
        )
        fsync_directory(self._directory)
        self._files.append(index_file)
        return index_file

    def _next_path(self) -> Path:
        stamp = _timestamp_name(self._clock.now_ms())
        suffix = 0
        if self._files:
            last_stamp, last_suffix = _name_sort_key(self._files[-1].path)
            if stamp <= last_stamp:  # same millisecond, or the clock stepped back
                stamp, suffix = last_stamp, last_suffix + 1
        while True:
            name = stamp if suffix == 0 else f"{stamp}_{suffix}"
            path = self._directory / name
            if not path.exists():
                return path
            suffix += 1

    def flush(self) -> int:
        """fsync unflushed index data; return the physical offset up to which it is now durable.

        The returned value is what the caller persists as its checkpoint and later hands to
        :meth:`load`. The fsync runs outside the service lock.
        """
        with self._lock:
            self._check_usable(need_loaded=True)
            if not self._dirty or not self._files:
                return self._durable_offset
            target_file = self._files[-1]
            target_file.write_header()
            target = target_file.end_phy_offset
            self._dirty = False
        try:
            target_file.flush()
        except BaseException:
            with self._lock:
                self._dirty = True
            raise
        with self._lock:
            self._durable_offset = max(self._durable_offset, target)
            return self._durable_offset

    # -- read path -----------------------------------------------------------------------------

    def query(self, topic: str, key: str, max_num: int, begin_ms: int, end_ms: int) -> list[int]:
        """Candidate physical offsets for ``key`` in ``topic`` stored in [begin_ms, end_ms].

        Newest first, at most ``max_num``. Candidates: the caller reads each record and checks
        its topic and keys (a CRC-32 collision yields a foreign message).
        """
        _check_range(max_num, begin_ms, end_ms)
        hash_ = key_hash(index_key(topic, key))
        found: list[int] = []
        seen: set[int] = set()
        with self._lock:
            self._check_usable(need_loaded=True)
            for index_file in reversed(self._files):
                if not index_file.overlaps(begin_ms, end_ms):
                    continue
                for offset in index_file._lookup(hash_, max_num - len(found), begin_ms, end_ms):
                    if offset not in seen:
                        seen.add(offset)
                        found.append(offset)
                if len(found) >= max_num:
                    break
        return found

    # -- retention and shutdown ----------------------------------------------------------------

    def delete_before(self, min_phy_offset: int) -> int:
        """Delete files wholly below ``min_phy_offset`` (never the newest); return how many."""
        _check_non_negative("min_phy_offset", min_phy_offset)
        with self._lock:
            self._check_usable(need_loaded=True)
            expired = [f for f in self._files[:-1] if f.end_phy_offset <= min_phy_offset]
            for index_file in expired:
                self._files.remove(index_file)
                index_file.delete()
            return len(expired)

    def close(self) -> None:
        """Fsync and close every file; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            files, self._files = self._files, []
            for index_file in files:
                index_file.write_header()
        for index_file in files:
            index_file.close()

    def _check_usable(self, *, need_loaded: bool) -> None:
        if self._closed:
            raise RuntimeError(f"IndexService({self._directory}) is closed")
        if need_loaded and not self._loaded:
            raise RuntimeError(f"IndexService({self._directory}): call load() first")


def _is_durable_successor(index_file: IndexFile, previous: IndexFile | None, flushed: int) -> bool:
    """Whether a file can be trusted after an unclean shutdown.

    Its header must not claim more than the checkpoint, and it must continue its predecessor (a
    header page that never reached the disk reads as zeros and breaks the ordering).
    """
    if index_file.end_phy_offset > flushed:
        return False
    if previous is None:
        return True
    return (
        index_file.begin_phy_offset >= previous.begin_phy_offset
        and index_file.end_phy_offset >= previous.end_phy_offset
    )


def _message_keys(request: DispatchRequest) -> tuple[str, ...]:
    """The keys to index for one message: its non-empty keys then its unique key, without repeats."""
    keys = request.keys
    unique_key = request.unique_key
    if not unique_key and len(keys) <= 1:
        return keys if not keys or keys[0] else ()
    merged = dict.fromkeys(k for k in keys if k)
    if unique_key:
        merged[unique_key] = None
    return tuple(merged)
