"""The dispatcher: reads the commit log behind the writer and feeds consume queues and the index.

It is RocketMQ's ``ReputMessageService``: only whole records below the write offset are read,
so a unit never points at an incomplete record. After each pass it tells listeners which
queues grew, which is what wakes held long-polling pulls. Sinks are idempotent, so the same
code serves normal operation, replay after a crash, and (later) records copied by replication.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from orbitmq.common.topics import KEY_SEPARATOR, SCHEDULE_TOPIC, Property
from orbitmq.store.commitlog import CommitLog
from orbitmq.store.dispatch import DispatchRequest
from orbitmq.store.record import (
    BLANK_MAGIC,
    BODY_POS,
    HEADER,
    MESSAGE_MAGIC,
    PREFIX,
    U16,
    SysFlag,
    decode_properties,
    tags_code,
    transaction_type,
)

log = logging.getLogger(__name__)

QueueGrowthListener = Callable[[str, int, int], None]
"""Called with (topic, queue id, new max offset) after a dispatch pass."""
Sink = Callable[[DispatchRequest], object]

_NO_CONSUME_QUEUE_TYPES = (SysFlag.TRANSACTION_PREPARED, SysFlag.TRANSACTION_ROLLBACK)


class DispatchError(RuntimeError):
    """The log holds something that is not a record where a record must start."""


class Dispatcher:
    def __init__(
        self,
        commitlog: CommitLog,
        consume_queue_sink: Sink,
        index_sink: Sink,
        delay_levels_ms: tuple[int, ...],
    ) -> None:
        self._commitlog = commitlog
        self._consume_queue_sink = consume_queue_sink
        self._index_sink = index_sink
        self._delay_levels_ms = delay_levels_ms
        self._listeners: list[QueueGrowthListener] = []
        self.dispatched_offset = 0

    def add_listener(self, listener: QueueGrowthListener) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: QueueGrowthListener) -> None:
        self._listeners.remove(listener)

    @property
    def lag_bytes(self) -> int:
        return self._commitlog.max_offset - self.dispatched_offset

    def dispatch_pending(self, max_bytes: int, *, index_from: int = 0) -> int:
        """Dispatch up to ``max_bytes`` of new records; returns how many bytes were consumed.

        ``index_from`` (replay only) skips index building below that offset.
        """
        commitlog = self._commitlog
        start = position = max(self.dispatched_offset, commitlog.min_offset)
        end = commitlog.max_offset
        grown: dict[tuple[str, int], int] = {}
        while position < end and position - start < max_bytes:
            segment = commitlog.segment_for(position)
            if segment is None:
                raise DispatchError(f"no commit-log segment holds offset {position}")
            buffer, at = segment.buffer, position - segment.start_offset
            total, magic = PREFIX.unpack_from(buffer, at)
            if magic == BLANK_MAGIC:
                position = segment.end_offset
                continue
            if magic != MESSAGE_MAGIC or total <= 0:
                raise DispatchError(f"commit log offset {position}: magic {magic:#x}, size {total}")
            request = self._request(buffer, at, total)
            if transaction_type(request.sys_flag) not in _NO_CONSUME_QUEUE_TYPES and self._consume_queue_sink(
                request
            ):
                grown[(request.topic, request.queue_id)] = request.queue_offset + 1
            if position >= index_from:
                self._index_sink(request)
            position += total
        self.dispatched_offset = position
        for (topic, queue_id), max_offset in grown.items():
            for listener in self._listeners:
                try:
                    listener(topic, queue_id, max_offset)
                except Exception:
                    log.exception("queue growth listener failed for %s-%d", topic, queue_id)
        return position - start

    def _request(self, buffer: object, at: int, total: int) -> DispatchRequest:
        fields = HEADER.unpack_from(buffer, at)  # type: ignore[arg-type]
        queue_id, queue_offset, physical_offset, sys_flag = fields[3], fields[5], fields[6], fields[7]
        store_timestamp, body_length = fields[11], fields[16]
        pos = at + BODY_POS + body_length
        (topic_length,) = U16.unpack_from(buffer, pos)  # type: ignore[arg-type]
        topic = bytes(buffer[pos + 2 : pos + 2 + topic_length]).decode()  # type: ignore[index]
        pos += 2 + topic_length
        (properties_length,) = U16.unpack_from(buffer, pos)  # type: ignore[arg-type]
        properties = decode_properties(buffer[pos + 2 : pos + 2 + properties_length])  # type: ignore[index]
        keys_raw = properties.get(Property.KEYS)
        return DispatchRequest(
            topic=topic,
            queue_id=queue_id,
            physical_offset=physical_offset,
            size=total,
            tags_code=self._tags_code(topic, properties, store_timestamp),
            store_timestamp_ms=store_timestamp,
            queue_offset=queue_offset,
            keys=tuple(k for k in keys_raw.split(KEY_SEPARATOR) if k) if keys_raw else (),
            unique_key=properties.get(Property.UNIQ_KEY),
            sys_flag=sys_flag,
        )

    def _tags_code(self, topic: str, properties: dict[str, str], store_timestamp: int) -> int:
        """The tag hash; in the schedule topic, the time the delayed message is due instead."""
        if topic == SCHEDULE_TOPIC:
            level = properties.get(Property.DELAY, "")
            if level.isdigit() and 1 <= int(level) <= len(self._delay_levels_ms):
                return store_timestamp + self._delay_levels_ms[int(level) - 1]
            log.warning("schedule topic message with delay level %r; due at once", level)
            return store_timestamp
        return tags_code(properties.get(Property.TAGS))
