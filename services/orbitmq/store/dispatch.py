"""What the dispatcher hands to each sink (consume queues, index) for one stored record.

The dispatcher reads the commit log behind the writer, decodes only what the sinks need, and
passes one :class:`DispatchRequest` per message (a named tuple: the dispatcher makes one per
stored message, so construction cost matters). Sinks must be idempotent: after a crash the
dispatcher replays from the last checkpoint and a sink sees some requests a second time.
"""

from __future__ import annotations

from typing import NamedTuple

from orbitmq.common.topics import split_keys


class DispatchRequest(NamedTuple):
    topic: str
    queue_id: int
    physical_offset: int
    """Commit-log offset of the record's first byte."""
    size: int
    """Total record size in bytes."""
    tags_code: int
    """Signed 64-bit hash of the tag (0 without a tag), stored in the consume-queue unit."""
    store_timestamp_ms: int
    queue_offset: int
    """Index of this message's unit in its consume queue."""
    keys: tuple[str, ...] = ()
    """Business keys (the ``KEYS`` property, split on spaces); each is indexed."""
    unique_key: str | None = None
    """Producer-generated unique key (``UNIQ_KEY``); indexed like a key."""
    sys_flag: int = 0


class KeyedBatch(NamedTuple):
    """The keyed messages of one column batch (a send stored in one queue), for the index in one
    piece: the index writes their entries in C (``_native.index_put``) without a
    :class:`DispatchRequest` per message, which cost a batch of keyed sends more than storing it
    (:meth:`requests` gives them for the Python path)."""

    topic: str
    queue_id: int
    indexed: list[tuple[int, str | None, str | None]]
    """(position in the batch, ``KEYS`` value, ``UNIQ_KEY``) of each message with either."""
    physical_offsets: list[int]
    sizes: list[int]
    store_timestamp_ms: int
    queue_offsets: list[int]
    sys_flag: int

    def request(self, position: int) -> DispatchRequest:
        """The :class:`DispatchRequest` of ``indexed[position]``."""
        i, keys, unique_key = self.indexed[position]
        return DispatchRequest(
            self.topic,
            self.queue_id,
            self.physical_offsets[i],
            self.sizes[i],
            0,
            self.store_timestamp_ms,
            self.queue_offsets[i],
            split_keys(keys),
            unique_key,
            self.sys_flag,
        )

    def requests(self) -> list[DispatchRequest]:
        return [self.request(position) for position in range(len(self.indexed))]
