"""The dispatcher: reads the commit log behind the writer and feeds consume queues and the index.

It is RocketMQ's ``ReputMessageService``: only whole records below the write offset are read,
so a unit never points at an incomplete record. The writer also hands over each batch it
appends (:meth:`Dispatcher.submit`), which saves decoding records it has just encoded;
whenever those hand-overs do not line up with the log — at start-up replay, for bytes copied
by replication — the dispatcher decodes the log itself. After each pass it tells listeners
which queues grew, which is what wakes held long-polling pulls. Sinks are idempotent, so the same
code serves normal operation, replay after a crash, and (later) records copied by replication.
"""

from __future__ import annotations

import logging
import mmap
from collections import deque
from collections.abc import Callable, Sequence

from orbitmq.common.topics import DUE_TIME_TOPICS, SCHEDULE_TOPIC, TIMER_TOPIC, Property, split_keys
from orbitmq.store.commitlog import AppendedBatch, CommitLog
from orbitmq.store.consume_queue import UNIT, ConsumeQueue
from orbitmq.store.dispatch import DispatchRequest, KeyedBatch
from orbitmq.store.record import (
    BLANK_MAGIC,
    BODY_POS,
    HEADER,
    MESSAGE_MAGIC,
    PREFIX,
    TRANSACTION_MASK,
    InboundMessage,
    MessageBatch,
    ScannedBatch,
    SysFlag,
    decode_properties,
    tags_code,
)

log = logging.getLogger(__name__)

QueueGrowthListener = Callable[[str, int, int], None]
"""Called with (topic, queue id, new max offset) after a dispatch pass."""
QueueResolver = Callable[[str, int], ConsumeQueue]
"""(topic, queue id) → the consume queue, created when new."""
IndexSink = Callable[[Sequence[DispatchRequest | KeyedBatch], int, int], object]
"""(messages with keys, one by one or a batch's at once; end of the log seen, last store time
seen)."""
Buffer = mmap.mmap
_TAG_CACHE_SIZE = 10_000
_MAX_PENDING_BATCHES = 100_000

_NO_CONSUME_QUEUE_TYPES = (SysFlag.TRANSACTION_PREPARED, SysFlag.TRANSACTION_ROLLBACK)


class DispatchError(RuntimeError):
    """The log holds something that is not a record where a record must start."""


class _Pass:
    """What one dispatch pass collects: grown queues, index work, how far it got."""

    __slots__ = ("grown", "indexed", "last_timestamp", "queues")

    def __init__(self) -> None:
        self.queues: dict[tuple[str, int], ConsumeQueue] = {}
        """Queues resolved during this pass (one lookup per queue, not per message)."""
        self.grown: dict[tuple[str, int], int] = {}
        self.indexed: list[DispatchRequest | KeyedBatch] = []
        self.last_timestamp = 0


class Dispatcher:
    def __init__(
        self,
        commitlog: CommitLog,
        queue_of: QueueResolver,
        index_sink: IndexSink,
        delay_levels_ms: tuple[int, ...],
    ) -> None:
        self._commitlog = commitlog
        self._queue_of = queue_of
        self._index_sink = index_sink
        self._delay_levels_ms = delay_levels_ms
        self._listeners: list[QueueGrowthListener] = []
        self.pending: deque[
            tuple[int, Sequence[InboundMessage] | MessageBatch | ScannedBatch, AppendedBatch]
        ] = deque()
        """Batches appended but not dispatched yet (the put found earlier records waiting)."""
        self._topic_names: dict[bytes, str] = {}
        self._tag_codes: dict[str | None, int] = {None: 0}
        """Tag → code; ``None`` (no tag) → 0 is kept in it so a batch looks codes up in one ``map``."""
        self.dispatched_offset = 0
        self._index_seen: tuple[int, int] | None = None
        """(end, store time) of the last pass with nothing to index: see :meth:`_mark_index`."""

    def add_listener(self, listener: QueueGrowthListener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: QueueGrowthListener) -> None:
        self._listeners.remove(listener)

    @property
    def lag_bytes(self) -> int:
        return self._commitlog.max_offset - self.dispatched_offset

    def submit(
        self, messages: Sequence[InboundMessage] | MessageBatch | ScannedBatch, appended: AppendedBatch
    ) -> None:
        """Hand over a batch just appended (called under the put lock); one deque entry per batch."""
        pending = self.pending
        if len(pending) > _MAX_PENDING_BATCHES:  # nobody is dispatching: stop buffering, decode later
            pending.clear()
        pending.append((appended.first_physical_offset, messages, appended))

    def dispatch_appended(
        self, messages: Sequence[InboundMessage] | MessageBatch | ScannedBatch, appended: AppendedBatch
    ) -> bool:
        """Dispatch records right after the put that wrote them, when nothing precedes them.

        What :meth:`dispatch_pending` would do for them (units, index entries, growth notices),
        without a trip through the pending queue or a later pass: the usual send is dispatched
        before it is acknowledged. False when earlier records wait (replicated bytes, a backlog):
        then ``messages`` are queued for :meth:`dispatch_pending` as :meth:`submit` does.
        """
        if self.pending or self.dispatched_offset != appended.first_physical_offset:
            self.submit(messages, appended)
            return False
        if type(messages) is MessageBatch or type(messages) is ScannedBatch:
            # One queue's messages, the usual send: no pass to keep books for.
            end, timestamp = appended.end_offset, appended.store_timestamp_ms
            grown = self._put_units(messages, appended, None)
            indexed = messages.indexed
            if indexed:
                self._index_sink((self._keyed(messages, indexed, appended),), end, timestamp)
            else:
                self._index_seen = (end, timestamp)
            self.dispatched_offset = end
            if grown:
                self._notify_queue(messages.topic, messages.queue_id, grown)
            return True
        work = _Pass()
        end = self._dispatch_batch(messages, appended, work)
        self._mark_index(work, end)
        self.dispatched_offset = end
        self._notify(work.grown)
        return True

    def dispatch_pending(self, max_bytes: int) -> int:
        """Dispatch up to about ``max_bytes`` of new records; returns how many bytes were consumed."""
        commitlog = self._commitlog
        start = position = max(self.dispatched_offset, commitlog.min_offset)
        limit = min(commitlog.max_offset, start + max_bytes)
        work = _Pass()
        pending = self.pending
        segment, segment_end = None, -1
        while position < limit:
            while pending and pending[0][0] < position:
                pending.popleft()
            if pending and pending[0][0] == position:
                _, messages, appended = pending.popleft()
                if type(messages) is MessageBatch or type(messages) is ScannedBatch:
                    position = self._dispatch_columns(messages, appended, work)
                else:
                    position = self._dispatch_batch(messages, appended, work)  # type: ignore[arg-type]
                continue
            if position >= segment_end or segment is None:
                segment = commitlog.segment_for(position)
                if segment is None:
                    raise DispatchError(f"no commit-log segment holds offset {position}")
                segment_end = segment.end_offset
            buffer, at = segment.buffer, position - segment.start_offset
            total, magic = PREFIX.unpack_from(buffer, at)
            if magic == BLANK_MAGIC:
                position = segment_end
                continue
            if magic != MESSAGE_MAGIC or total <= 0:
                raise DispatchError(f"commit log offset {position}: magic {magic:#x}, size {total}")
            self._dispatch_request(self._request(buffer, at, total), work)
            position += total
        if position > start:
            self._mark_index(work, position)
        self.dispatched_offset = position
        self._notify(work.grown)
        return position - start

    def _mark_index(self, work: _Pass, end: int) -> None:
        """Hand the pass's keyed messages to the index, which also learns how far the log was
        seen (so a replay after a crash skips keyless messages). A pass without keys, the
        usual send, only notes that end: :meth:`catch_up_index` tells the index before it is
        flushed, which is when the index's end starts to matter."""
        if work.indexed:
            self._index_sink(work.indexed, end, work.last_timestamp)
        else:
            self._index_seen = (end, work.last_timestamp)

    def catch_up_index(self) -> None:
        """Tell the index the end of the last keyless pass; safe from the flushing thread (the
        index takes its own lock and only ever moves its end forward)."""
        seen = self._index_seen
        if seen is not None:
            self._index_sink((), *seen)

    def _dispatch_batch(
        self, messages: Sequence[InboundMessage], appended: AppendedBatch, work: _Pass
    ) -> int:
        """Units (and index requests for keyed messages) straight from what the writer knew."""
        queues, grown, tag_codes = work.queues, work.grown, self._tag_codes
        physical, timestamp = appended.first_physical_offset, appended.store_timestamp_ms
        for message, size, queue_offset in zip(messages, appended.sizes, appended.queue_offsets, strict=True):
            properties = message.properties
            key = (message.topic, message.queue_id)
            if message.sys_flag & TRANSACTION_MASK not in _NO_CONSUME_QUEUE_TYPES:
                queue = queues.get(key)
                if queue is None:
                    queue = queues[key] = self._queue_of(*key)
                tag = properties.get(Property.TAGS)
                code = tag_codes.get(tag) if tag is not None and key[0] not in DUE_TIME_TOPICS else None
                if code is None:
                    code = self._tags_code(key[0], properties, timestamp)
                if queue.put(queue_offset, physical, size, code):
                    grown[key] = queue_offset + 1
            if Property.KEYS in properties or Property.UNIQ_KEY in properties:
                keys_raw = properties.get(Property.KEYS)
                work.indexed.append(
                    DispatchRequest(
                        key[0],
                        key[1],
                        physical,
                        size,
                        0,
                        timestamp,
                        queue_offset,
                        split_keys(keys_raw),
                        properties.get(Property.UNIQ_KEY),
                        message.sys_flag,
                    )
                )
            physical += size
        work.last_timestamp = max(work.last_timestamp, timestamp)
        return physical

    def _dispatch_columns(
        self, batch: MessageBatch | ScannedBatch, appended: AppendedBatch, work: _Pass
    ) -> int:
        grown = self._put_units(batch, appended, work.queues)
        if grown:
            work.grown[(batch.topic, batch.queue_id)] = grown
        indexed = batch.indexed
        if indexed:
            work.indexed.append(self._keyed(batch, indexed, appended))
        work.last_timestamp = max(work.last_timestamp, appended.store_timestamp_ms)
        return appended.end_offset

    def _put_units(
        self,
        batch: MessageBatch | ScannedBatch,
        appended: AppendedBatch,
        queues: dict[tuple[str, int], ConsumeQueue] | None,
    ) -> int:
        """A batch's units in one consume-queue write (tag codes by one cached ``map``); the
        queue's new max offset, 0 when it did not grow. ``queues`` caches queues for a pass."""
        if batch.sys_flag & TRANSACTION_MASK in _NO_CONSUME_QUEUE_TYPES:
            return 0
        key = (batch.topic, batch.queue_id)
        queue = queues.get(key) if queues is not None else None
        if queue is None:
            queue = self._queue_of(*key)
            if queues is not None:
                queues[key] = queue
        units = appended.units
        if units is None:  # the C writer packs them; here, from the batch's columns
            units = self._units(batch, appended)  # type: ignore[arg-type]
        queue_offsets = appended.queue_offsets
        return queue_offsets[-1] + 1 if queue.put_units(queue_offsets[0], units) else 0

    def _units(self, batch: MessageBatch, appended: AppendedBatch) -> bytes:
        """A column batch's consume-queue units, packed."""
        if batch.topic in DUE_TIME_TOPICS:  # due times, from each message's DELAY or timer
            timestamp = appended.store_timestamp_ms
            codes = [self._tags_code(batch.topic, p, timestamp) for p in batch.properties]
        else:
            tags = batch.tags
            codes = list(map(self._tag_codes.get, tags))
            if None in codes:
                codes = list(map(self._tag_code, tags))
        return b"".join(map(UNIT.pack, appended.physical_offsets(), appended.sizes, codes))

    @staticmethod
    def _keyed(
        batch: MessageBatch | ScannedBatch,
        indexed: list[tuple[int, str | None, str | None]],
        appended: AppendedBatch,
    ) -> KeyedBatch:
        """The batch's messages that carry keys (``batch.indexed``), for the index in one piece."""
        return KeyedBatch(
            batch.topic,
            batch.queue_id,
            indexed,
            appended.physical_offsets(),
            appended.sizes,
            appended.store_timestamp_ms,
            appended.queue_offsets,
            batch.sys_flag,
        )

    def _dispatch_request(self, request: DispatchRequest, work: _Pass) -> None:
        key = (request.topic, request.queue_id)
        if request.sys_flag & TRANSACTION_MASK not in _NO_CONSUME_QUEUE_TYPES:
            queue = work.queues.get(key)
            if queue is None:
                queue = work.queues[key] = self._queue_of(*key)
            if queue.put(request.queue_offset, request.physical_offset, request.size, request.tags_code):
                work.grown[key] = request.queue_offset + 1
        if request.keys or request.unique_key:
            work.indexed.append(request)
        work.last_timestamp = max(work.last_timestamp, request.store_timestamp_ms)

    def _notify(self, grown: dict[tuple[str, int], int]) -> None:
        for (topic, queue_id), max_offset in grown.items():
            self._notify_queue(topic, queue_id, max_offset)

    def _notify_queue(self, topic: str, queue_id: int, max_offset: int) -> None:
        for listener in self._listeners:
            try:
                listener(topic, queue_id, max_offset)
            except Exception:
                log.exception("queue growth listener failed for %s-%d", topic, queue_id)

    def _request(self, buffer: Buffer, at: int, total: int) -> DispatchRequest:
        fields = HEADER.unpack_from(buffer, at)
        body_length = fields[16]
        pos = at + BODY_POS + body_length
        topic_length = buffer[pos] << 8 | buffer[pos + 1]
        topic = self._topic_names.get(buffer[pos + 2 : pos + 2 + topic_length])
        if topic is None:
            raw = buffer[pos + 2 : pos + 2 + topic_length]
            topic = self._topic_names[raw] = raw.decode()
        pos += 2 + topic_length
        properties_length = buffer[pos] << 8 | buffer[pos + 1]
        properties = decode_properties(buffer[pos + 2 : pos + 2 + properties_length])
        keys_raw = properties.get(Property.KEYS)
        return DispatchRequest(
            topic,
            fields[3],  # queue id
            fields[6],  # physical offset
            total,
            self._tags_code(topic, properties, fields[11]),
            fields[11],  # store timestamp
            fields[5],  # queue offset
            split_keys(keys_raw),
            properties.get(Property.UNIQ_KEY),
            fields[7],  # sys flag
        )

    def _tags_code(self, topic: str, properties: dict[str, str], store_timestamp: int) -> int:
        """The tag hash; in the schedule and timer topics, the time the message is due instead."""
        if topic == TIMER_TOPIC:
            deliver = properties.get(Property.TIMER_DELIVER_MS, "")
            if deliver.isdigit():
                return int(deliver)
            log.warning("timer topic message with %s %r; due at once", Property.TIMER_DELIVER_MS, deliver)
            return store_timestamp
        if topic == SCHEDULE_TOPIC:
            level = properties.get(Property.DELAY, "")
            if level.isdigit() and 1 <= int(level) <= len(self._delay_levels_ms):
                return store_timestamp + self._delay_levels_ms[int(level) - 1]
            log.warning("schedule topic message with delay level %r; due at once", level)
            return store_timestamp
        return self._tag_code(properties.get(Property.TAGS))

    def _tag_code(self, tag: str | None) -> int:
        """:func:`tags_code`, cached: a topic's messages mostly share a handful of tags."""
        code = self._tag_codes.get(tag)
        if code is None:
            code = self._tag_codes[tag] = tags_code(tag)
            if len(self._tag_codes) > _TAG_CACHE_SIZE:
                self._tag_codes = {None: 0}
                self._tag_codes[None] = 0
        return code
