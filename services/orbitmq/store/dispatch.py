"""What the dispatcher hands to each sink (consume queues, index) for one stored record.

The dispatcher reads the commit log behind the writer, decodes only what the sinks need, and
passes one :class:`DispatchRequest` per message (a named tuple: the dispatcher makes one per
stored message, so construction cost matters). Sinks must be idempotent: after a crash the
dispatcher replays from the last checkpoint and a sink sees some requests a second time.
"""

from __future__ import annotations

from typing import NamedTuple


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
