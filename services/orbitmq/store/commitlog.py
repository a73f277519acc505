"""The commit log: every message of a broker, appended to one log of fixed-size segments.

One writer appends (under the store's put lock); readers and the dispatcher read below the
*write offset*, which only moves after a whole record — or a whole batch — is in place, so
nothing incomplete is ever visible. The flusher makes the log durable up to a *flushed
offset*. Queue offsets are assigned here, at append time, from the table of next offsets per
(topic, queue) (RocketMQ's ``topicQueueTable``), because the queue offset is part of the record.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate, chain, repeat
from pathlib import Path
from typing import Any, NamedTuple

from orbitmq.common.tally import LatencyTally
from orbitmq.native import NATIVE
from orbitmq.store.mapped_file import (
    FsyncFn,
    MappedFile,
    check_contiguous,
    fsync_directory,
    list_offset_files,
)
from orbitmq.store.message_id import encode_offset_msg_id, msg_id_prefix
from orbitmq.store.record import (
    BLANK_MAGIC,
    BLANK_MIN_BYTES,
    BODY_POS,
    HEADER,
    HEADER_BYTES,
    MESSAGE_MAGIC,
    PREFIX,
    SHARED_FIELDS,
    STORE_TIMESTAMP_POS,
    TIMESTAMP_FIELD,
    TRANSACTION_MASK,
    U16,
    InboundMessage,
    MessageBatch,
    ScannedBatch,
    SysFlag,
    body_crc,
    encode_host,
)

log = logging.getLogger(__name__)

SCAN_CHUNK_BYTES = 4 << 20
_OFFSET = struct.Struct("!q")
_BATCH_HEADER = struct.Struct(f"!iIIiiqq{SHARED_FIELDS.size}si")
"""The record header with the shared fields as one packed string (9 arguments to pack, not 17)."""
assert _BATCH_HEADER.size == HEADER.size
_NO_QUEUE_OFFSET_TYPES = (SysFlag.TRANSACTION_PREPARED, SysFlag.TRANSACTION_ROLLBACK)

FLUSH_LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
)  # fmt: skip
"""Upper bounds (seconds) of :attr:`CommitLog.flush_latency`'s buckets: an fsync takes tens of
microseconds on a disk with a write cache, milliseconds on a busy SSD, and seconds on a
saturated or failing volume, where SYNC_FLUSH writers start timing out (5 s by default)."""


class AppendedMessage(NamedTuple):
    """Where one appended message landed."""

    physical_offset: int
    size: int
    queue_offset: int
    store_timestamp_ms: int
    store_host: str

    @property
    def msg_id(self) -> str:
        return encode_offset_msg_id(self.store_host, self.physical_offset)


class AppendedBatch(Sequence[AppendedMessage]):
    """Where a batch landed, kept as parallel lists (no object per message on the hot path).

    Indexing or iterating yields :class:`AppendedMessage` views, built on demand.
    """

    __slots__ = (
        "_physical_offsets",
        "end_offset",
        "first_physical_offset",
        "queue_offsets",
        "sizes",
        "store_host",
        "store_timestamp_ms",
        "units",
    )

    def __init__(
        self,
        first_physical_offset: int,
        sizes: list[int],
        queue_offsets: list[int],
        store_timestamp_ms: int,
        store_host: str,
        end_offset: int,
        physical_offsets: list[int] | None = None,
        units: bytes | None = None,
    ) -> None:
        self.first_physical_offset = first_physical_offset
        self.sizes = sizes
        self.queue_offsets = queue_offsets
        self.store_timestamp_ms = store_timestamp_ms
        self.store_host = store_host
        self.end_offset = end_offset
        self._physical_offsets = physical_offsets
        self.units = units
        """The records' consume-queue units, packed, when the writer made them (the C path)."""

    def physical_offsets(self) -> list[int]:
        if self._physical_offsets is None:
            offsets = list(accumulate(self.sizes, initial=self.first_physical_offset))
            offsets.pop()
            self._physical_offsets = offsets
        return self._physical_offsets

    def __len__(self) -> int:
        return len(self.sizes)

    def msg_ids(self) -> list[str]:
        """Offset ids of the batch: one hex conversion of all ids' bytes, split at each id's end.

        Same text as :func:`encode_offset_msg_id` per message, a third of the cost.
        """
        if len(self.sizes) < 2:  # the usual single send: one formatted id is cheapest
            return [encode_offset_msg_id(self.store_host, self.first_physical_offset)] if self.sizes else []
        if NATIVE is not None:
            return NATIVE.offset_ids(msg_id_prefix(self.store_host), self.first_physical_offset, self.sizes)
        prefix = bytes.fromhex(msg_id_prefix(self.store_host))
        raw = b"".join(map(prefix.__add__, map(_OFFSET.pack, self.physical_offsets())))
        return raw.hex(" ", len(prefix) + _OFFSET.size).upper().split(" ")

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return AppendedMessage(
            self.physical_offsets()[index],
            self.sizes[index],
            self.queue_offsets[index],
            self.store_timestamp_ms,
            self.store_host,
        )


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    scanned_from: int
    valid_end: int
    records_scanned: int
    truncated_bytes: int
    segments_removed: int


class CommitLog:
    def __init__(self, directory: Path, segment_bytes: int, store_host: str, fsync: FsyncFn) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.store_host = store_host
        self._store_host_raw = encode_host(store_host)
        self._fsync = fsync
        self._segments: list[MappedFile] = []
        self._tail: MappedFile | None = None
        """The segment being written (saves a lookup per append)."""
        self._write_offset = 0
        self._flushed_offset = 0
        self.flush_latency = LatencyTally(FLUSH_LATENCY_BUCKETS)
        """Seconds each :meth:`flush` that had something to fsync took, whichever thread ran it
        (the group commit's under SYNC_FLUSH, the periodic flusher's under ASYNC_FLUSH, the
        closing one). The store imports nothing of Prometheus: the broker exports this tally as
        ``orbitmq_commitlog_flush_seconds`` when scraped."""
        self.queue_offsets: dict[tuple[str, int], int] = {}
        """Next queue offset per (topic, queue id); rebuilt from consume queues at start-up."""

    # -- opening -------------------------------------------------------------------------------

    def load(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        files = list_offset_files(self.directory)
        check_contiguous(files, self.segment_bytes)
        for start, path in files:
            if start % self.segment_bytes:
                raise ValueError(f"{path}: start offset {start} is not a multiple of the segment size")
            self._segments.append(MappedFile(path, start, self.segment_bytes, create=False))
        if self._segments:
            self._write_offset = self._segments[-1].end_offset

    def recover(self, scan_from: int) -> RecoveryReport:
        """Find the end of valid data from ``scan_from`` (a record boundary) and cut the rest.

        Records are checked for magic, size, position and body CRC; the first one that fails
        (a torn write, garbage, zeros) ends the log. Everything after it is erased so that it
        can never be mistaken for data later.
        """
        segments = self._segments
        if not segments:
            self._write_offset = self._flushed_offset = 0
            return RecoveryReport(scan_from, 0, 0, 0, 0)
        scan_from = min(max(scan_from, segments[0].start_offset), segments[-1].end_offset)
        if scan_from == segments[-1].end_offset:
            scan_from = segments[-1].start_offset
        position, records = scan_from, 0
        index = self._segment_index(position)
        while index is not None and index < len(segments):
            segment = segments[index]
            end, count, rolled = _scan_segment(segment, position - segment.start_offset)
            records += count
            position = segment.start_offset + end
            if not rolled:
                break
            index += 1
        truncated, removed = self._truncate(position)
        self._write_offset = self._flushed_offset = position
        if truncated or removed:
            log.warning(
                "commit log %s: cut %d bytes and %d segment(s) after offset %d",
                self.directory,
                truncated,
                removed,
                position,
            )
        return RecoveryReport(scan_from, position, records, truncated, removed)

    def _truncate(self, end: int) -> tuple[int, int]:
        self._tail = None
        keep = [s for s in self._segments if s.start_offset < end or s.start_offset == end == 0]
        removed = [s for s in self._segments if s not in keep]
        for segment in removed:
            segment.delete()
        self._segments = keep
        truncated = 0
        if keep and end < keep[-1].end_offset:
            last = keep[-1]
            tail = end - last.start_offset
            erased_to = last.zero_from(tail)
            truncated = max(0, erased_to - tail)
            last.fsync(self._fsync)
        if removed:
            fsync_directory(self.directory)
        return truncated, len(removed)

    # -- positions -----------------------------------------------------------------------------

    @property
    def min_offset(self) -> int:
        segments = self._segments
        return segments[0].start_offset if segments else self._write_offset

    @property
    def max_offset(self) -> int:
        """The write offset: everything below it is complete records."""
        return self._write_offset

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    @property
    def segments(self) -> list[MappedFile]:
        return list(self._segments)

    @property
    def last_segment(self) -> MappedFile | None:
        """The newest segment: where most reads (consumers keeping up) find their records."""
        segments = self._segments
        return segments[-1] if segments else None

    def _segment_index(self, offset: int) -> int | None:
        segments = self._segments
        if not segments or offset < segments[0].start_offset:
            return None
        index = (offset - segments[0].start_offset) // self.segment_bytes
        return index if index < len(segments) else None

    def segment_for(self, offset: int) -> MappedFile | None:
        segments = self._segments
        index = self._segment_index(offset)
        return None if index is None else segments[index]

    # -- appending -----------------------------------------------------------------------------

    def append(
        self,
        messages: Sequence[InboundMessage],
        topics_raw: Sequence[bytes],
        properties_raw: Sequence[bytes],
        sizes: list[int],
        total_bytes: int,
        store_timestamp_ms: int,
    ) -> AppendedBatch:
        """Append a batch (``total_bytes`` in all, ``sizes`` per record) contiguously in one segment.

        The caller validated and encoded the messages and holds the put lock. This loop is the
        hottest code of a broker, so :func:`record.encode` is inlined here.
        """
        segment = self._writable_segment(total_bytes)
        first = physical = self._write_offset
        position = physical - segment.start_offset
        table = self.queue_offsets
        store_address, store_port = self._store_host_raw
        pack, crc32, u16 = HEADER.pack, body_crc, U16.pack
        parts: list[bytes] = []
        queue_offsets: list[int] = []
        for message, topic_raw, props_raw, size in zip(
            messages, topics_raw, properties_raw, sizes, strict=True
        ):
            if message.sys_flag & TRANSACTION_MASK in _NO_QUEUE_OFFSET_TYPES:
                queue_offset = 0
            else:
                key = (message.topic, message.queue_id)
                queue_offset = table.get(key, 0)
                table[key] = queue_offset + 1
            body = message.body
            born_address, born_port = encode_host(message.born_host)
            parts.append(
                pack(
                    size,
                    MESSAGE_MAGIC,
                    crc32(body),
                    message.queue_id,
                    message.flag,
                    queue_offset,
                    physical,
                    message.sys_flag,
                    message.born_timestamp_ms,
                    born_address,
                    born_port,
                    store_timestamp_ms,
                    store_address,
                    store_port,
                    message.reconsume_times,
                    message.prepared_transaction_offset,
                    len(body),
                )
            )
            parts.append(body)
            parts.append(u16(len(topic_raw)) + topic_raw + u16(len(props_raw)) + props_raw)
            queue_offsets.append(queue_offset)
            physical += size
        segment.write(position, b"".join(parts))
        self._write_offset = physical
        return AppendedBatch(first, sizes, queue_offsets, store_timestamp_ms, self.store_host, physical)

    def append_batch(
        self,
        batch: MessageBatch,
        topic_raw: bytes,
        properties_raw: list[bytes],
        sizes: list[int],
        total_bytes: int,
        store_timestamp_ms: int,
    ) -> AppendedBatch:
        """Append a :class:`MessageBatch` contiguously: byte for byte the records :meth:`append` writes.

        The caller validated and encoded the batch and holds the put lock. Fields the messages
        share go to the header packer as constants and the per-message columns (size, CRC,
        flag, offsets, body length) are zipped through ``map``, so building 128 records runs
        no Python bytecode per record: that loop was most of a batched send's cost.
        """
        count = len(sizes)
        if not len(batch.bodies) == len(batch.flags) == len(properties_raw) == count:
            raise ValueError(f"batch columns differ in length from its {count} sizes")
        segment, first, queue_offset, step, shared = self._start_batch(batch, total_bytes, store_timestamp_ms)
        queue_offsets = list(range(queue_offset, queue_offset + count)) if step else [0] * count
        physical = list(accumulate(sizes, initial=first))
        end = physical.pop()
        bodies = batch.bodies
        headers = map(
            _BATCH_HEADER.pack,
            sizes,
            repeat(MESSAGE_MAGIC),
            map(body_crc, bodies),
            repeat(batch.queue_id),
            batch.flags,
            queue_offsets,
            physical,
            repeat(shared),
            map(len, bodies),
        )
        records = zip(
            headers,
            bodies,
            repeat(U16.pack(len(topic_raw)) + topic_raw),
            map(U16.pack, map(len, properties_raw)),
            properties_raw,
            strict=False,  # repeat() is endless; the other columns have one entry per message
        )
        segment.write_parts(first - segment.start_offset, list(chain.from_iterable(records)))
        self._write_offset = end
        if step:  # the queue moves past the messages once they are written (see _start_batch)
            self.queue_offsets[(batch.topic, batch.queue_id)] = queue_offset + len(sizes)
        return AppendedBatch(first, sizes, queue_offsets, store_timestamp_ms, self.store_host, end, physical)

    def append_scanned(
        self, batch: ScannedBatch, topic_raw: bytes, total_bytes: int, store_timestamp_ms: int
    ) -> AppendedBatch:
        """Append a :class:`ScannedBatch`: the C writer builds the records :meth:`append_batch`
        would (same header, same body CRC) straight from the request bytes, in one pwrite."""
        assert NATIVE is not None, "a scanned batch exists only when the C path is loaded"
        segment, first, queue_offset, step, shared = self._start_batch(batch, total_bytes, store_timestamp_ms)
        position = first - segment.start_offset
        if position + total_bytes > segment.size:
            raise ValueError(f"{segment.path}: {total_bytes} bytes at {position} overrun {segment.size}")
        sizes, units = NATIVE.write(
            batch.request,
            batch.columns.layout,
            segment.fileno(),
            position,
            topic_raw,
            shared,
            batch.queue_id,
            queue_offset,
            step,
            first,
        )
        end = first + total_bytes
        if end != first + sum(sizes):
            raise RuntimeError(f"the C writer wrote {sum(sizes)} bytes of a {total_bytes}-byte batch")
        self._write_offset = end
        count = batch.columns.count
        if step:  # the queue moves past the messages once they are written (see _start_batch)
            self.queue_offsets[(batch.topic, batch.queue_id)] = queue_offset + count
        queue_offsets = list(range(queue_offset, queue_offset + count)) if step else [0] * count
        return AppendedBatch(
            first, sizes, queue_offsets, store_timestamp_ms, self.store_host, end, units=units
        )

    def _start_batch(
        self, batch: MessageBatch | ScannedBatch, total_bytes: int, store_timestamp_ms: int
    ) -> tuple[MappedFile, int, int, int, bytes]:
        """What every batch append starts with: the segment that takes ``total_bytes`` (rolled
        if needed), the first record's offset, the first queue offset and its step per message
        (0: prepared and rolled-back halves all get queue offset 0), and the header fields the
        batch's records share. The caller moves the queue's counter past the batch
        once the records are written, so a failed write leaves no gap in the queue."""
        segment = self._writable_segment(total_bytes)
        if batch.sys_flag & TRANSACTION_MASK in _NO_QUEUE_OFFSET_TYPES:
            queue_offset, step = 0, 0
        else:
            queue_offset, step = self.queue_offsets.get((batch.topic, batch.queue_id), 0), 1
        born_address, born_port = encode_host(batch.born_host)
        store_address, store_port = self._store_host_raw
        shared = SHARED_FIELDS.pack(
            batch.sys_flag,
            batch.born_timestamp_ms,
            born_address,
            born_port,
            store_timestamp_ms,
            store_address,
            store_port,
            batch.reconsume_times,
            0,  # prepared transaction offset: only the broker's own puts set it
        )
        return segment, self._write_offset, queue_offset, step, shared

    def append_raw(self, physical_offset: int, data: bytes) -> None:
        """Place bytes copied from another broker's log at the same offsets (replication)."""
        if physical_offset != self._write_offset:
            raise ValueError(
                f"raw append at {physical_offset} must continue the log at its end {self._write_offset}"
            )
        while data:
            segment = self.segment_for(self._write_offset) or self._create_segment(self._write_offset)
            position = self._write_offset - segment.start_offset
            chunk = data[: segment.size - position]
            segment.write(position, chunk)
            self._write_offset += len(chunk)
            data = data[len(chunk) :]

    def truncate(self, end: int) -> int:
        """Cut the log at ``end`` (a record boundary): a slave dropping what its new master never
        had. Returns the bytes cut; the erased tail can never be read back as data."""
        if not self.min_offset <= end <= self._write_offset:
            raise ValueError(f"cannot cut the log at {end}: it holds {self.min_offset}..{self._write_offset}")
        cut = self._write_offset - end
        self._truncate(end)
        self._write_offset = end
        self._flushed_offset = min(self._flushed_offset, end)
        return cut

    def max_record_bytes(self) -> int:
        return self.segment_bytes - BLANK_MIN_BYTES

    def _writable_segment(self, size: int) -> MappedFile:
        segment = self._tail
        if segment is None or not segment.start_offset <= self._write_offset < segment.end_offset:
            segment = self.segment_for(self._write_offset)
            if segment is None:
                segment = self._create_segment(self._write_offset)
            self._tail = segment
        remaining = segment.end_offset - self._write_offset
        if size + BLANK_MIN_BYTES <= remaining:
            return segment
        segment.write(self._write_offset - segment.start_offset, PREFIX.pack(remaining, BLANK_MAGIC))
        self._write_offset = segment.end_offset
        self._tail = self._create_segment(self._write_offset)
        return self._tail

    def _create_segment(self, start: int) -> MappedFile:
        if start % self.segment_bytes:
            raise ValueError(f"segment start {start} is not a multiple of {self.segment_bytes}")
        segment = MappedFile.create(self.directory, start, self.segment_bytes)
        self._segments = [*self._segments, segment]
        return segment

    # -- reading -------------------------------------------------------------------------------

    def read(self, offset: int, size: int) -> bytes | None:
        """Bytes of one record (or any range inside one segment), None when not (or no longer) there."""
        if offset < 0 or size <= 0 or offset + size > self._write_offset:
            return None
        segment = self.segment_for(offset)
        if segment is None:
            return None
        position = offset - segment.start_offset
        if position + size > segment.size:
            return None
        try:
            return segment.read(position, size)
        except ValueError:  # deleted by retention between lookup and read
            return None

    def read_record(self, offset: int) -> bytes | None:
        """The whole message record starting at ``offset``, None if no message starts there."""
        if offset < 0 or offset + HEADER_BYTES > self._write_offset:
            return None
        segment = self.segment_for(offset)
        if segment is None:
            return None
        try:
            size, magic = PREFIX.unpack_from(segment.buffer, offset - segment.start_offset)
        except ValueError:
            return None
        if magic != MESSAGE_MAGIC or size < HEADER_BYTES:
            return None
        return self.read(offset, size)

    def entry_starts_at(self, offset: int) -> bool:
        """Whether a message record or a segment's closing blank starts at ``offset``, or the log
        ends there: the offsets a slave can hold as its max offset, so where replication may
        start. Anywhere else whole records cannot be read from (:meth:`read_span` would give
        bytes that do not parse as records)."""
        if offset == self._write_offset:
            return True
        record = self.read_record(offset)
        if record is not None:
            return HEADER.unpack_from(record)[6] == offset
        segment = self.segment_for(offset)
        if segment is None or offset > self._write_offset:
            return False
        position = offset - segment.start_offset
        if position + PREFIX.size > segment.size:
            return False
        total, magic = PREFIX.unpack_from(segment.buffer, position)
        return magic == BLANK_MAGIC and total == segment.size - position

    def store_timestamp_at(self, offset: int) -> int | None:
        raw = self.read(offset + STORE_TIMESTAMP_POS, TIMESTAMP_FIELD.size)
        return None if raw is None else TIMESTAMP_FIELD.unpack(raw)[0]

    def read_span(self, offset: int, max_bytes: int) -> bytes:
        """Raw log bytes from ``offset`` up to the end of its segment or ``max_bytes`` (replication)."""
        segment = self.segment_for(offset)
        if segment is None or offset >= self._write_offset:
            return b""
        end = min(self._write_offset, segment.end_offset, offset + max_bytes)
        return segment.read(offset - segment.start_offset, end - offset)

    # -- flushing and retention ----------------------------------------------------------------

    def flush(self) -> int:
        """fsync everything written so far; returns the new flushed offset. Blocking: call off-loop.

        A flush that fsyncs is timed into :attr:`flush_latency` (one observation however many
        segments it covers); one with nothing new to fsync returns at once and is not counted."""
        target = self._write_offset
        if target <= self._flushed_offset:
            return self._flushed_offset
        started = time.perf_counter()
        for segment in self._segments:
            if segment.end_offset > self._flushed_offset and segment.start_offset < target:
                segment.fsync(self._fsync)
        self.flush_latency.observe(time.perf_counter() - started)
        self._flushed_offset = max(self._flushed_offset, target)
        return self._flushed_offset

    def delete_expired(self, now_ms: int, reserved_ms: int, protect_from: int, max_files: int = 10) -> int:
        """Delete the oldest segments whose messages are all older than ``reserved_ms``.

        A segment's age is judged by the first message of the segment after it, which was
        stored after every message of this one. The newest segment and anything at or past
        ``protect_from`` (not yet flushed or dispatched) are never deleted.
        """
        deleted = 0
        while deleted < max_files and len(self._segments) > 1:
            oldest, following = self._segments[0], self._segments[1]
            if oldest.end_offset > protect_from:
                break
            stored = self.store_timestamp_at(following.start_offset)
            if stored is None or now_ms - stored < reserved_ms:
                break
            self._segments = self._segments[1:]
            oldest.delete()
            deleted += 1
            log.info("commit log: deleted expired segment %s", oldest.path.name)
        return deleted

    def close(self) -> None:
        for segment in self._segments:
            segment.close()


def _scan_segment(segment: MappedFile, position: int) -> tuple[int, int, bool]:
    """Walk valid records from ``position``; returns (end position, records, ended by a blank)."""
    count = 0
    size_limit = segment.size
    while position + PREFIX.size <= size_limit:
        chunk = segment.pread(position, min(SCAN_CHUNK_BYTES, size_limit - position))
        cursor = 0
        while cursor + PREFIX.size <= len(chunk):
            total, magic = PREFIX.unpack_from(chunk, cursor)
            if magic == BLANK_MAGIC and total == size_limit - (position + cursor):
                return size_limit, count, True
            if magic != MESSAGE_MAGIC or total < HEADER_BYTES or position + cursor + total > size_limit:
                return position + cursor, count, False
            if cursor + total > len(chunk):
                if cursor == 0:  # a record larger than the chunk: read it whole
                    chunk = segment.pread(position, total)
                    continue
                break
            if not _record_checks(chunk, cursor, segment.start_offset + position + cursor):
                return position + cursor, count, False
            cursor += total
            count += 1
        if cursor == 0:
            return position, count, False
        position += cursor
    return position, count, False


def _record_checks(buf: bytes, at: int, expected_offset: int) -> bool:
    fields = HEADER.unpack_from(buf, at)
    total, expected_crc, physical_offset, body_length = fields[0], fields[2], fields[6], fields[16]
    if physical_offset != expected_offset or body_length < 0:
        return False
    body_end = at + BODY_POS + body_length
    if body_end + 4 > at + total:
        return False
    (topic_length,) = U16.unpack_from(buf, body_end)
    properties_at = body_end + 2 + topic_length
    if properties_at + 2 > at + total:
        return False
    (properties_length,) = U16.unpack_from(buf, properties_at)
    if properties_at + 2 + properties_length != at + total:
        return False
    return body_crc(memoryview(buf)[at + BODY_POS : body_end]) == expected_crc
