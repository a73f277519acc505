"""Retention: expired segments go, the consume-queue minimum rises, reads below it say so."""

from __future__ import annotations

from collections.abc import Callable

from storekit import message

from orbitmq.common.clock import ManualClock
from orbitmq.store.message_store import MessageStore
from orbitmq.store.results import GetStatus

StoreFactory = Callable[..., MessageStore]
HOUR_MS = 3_600_000


def _fill_segments(store: MessageStore, clock: ManualClock, count: int) -> None:
    for _ in range(count):
        store.put_message(message(body=bytes(2000), KEYS="k"))
        clock.advance(10_000)
    store.dispatch_pending()
    store.commitlog.flush()


def test_expired_segments_are_deleted_and_min_offset_rises(
    open_store: StoreFactory, clock: ManualClock
) -> None:
    store = open_store(file_reserved_time_ms=HOUR_MS)
    _fill_segments(store, clock, 100)  # ~31 messages per 64 KiB segment → 4 segments
    segments_before = len(store.commitlog.segments)
    assert segments_before >= 4
    assert store.delete_expired() == 0  # even the oldest segment has messages under an hour old
    clock.advance(HOUR_MS)
    deleted = store.delete_expired()
    assert deleted >= 1
    assert len(store.commitlog.segments) == segments_before - deleted
    minimum = store.min_offset_in_queue("TopicA", 0)
    assert minimum > 0
    first_kept = store.consume_queue("TopicA", 0).unit_at(minimum)  # type: ignore[union-attr]
    assert first_kept is not None and first_kept[0] >= store.commitlog.min_offset
    below = store.get_message("g", "TopicA", 0, minimum - 1, 32)
    assert (below.status, below.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, minimum)
    assert store.get_message("g", "TopicA", 0, minimum, 32).status is GetStatus.FOUND


def test_recent_and_unflushed_segments_are_kept(open_store: StoreFactory, clock: ManualClock) -> None:
    store = open_store(file_reserved_time_ms=HOUR_MS)
    for _ in range(100):
        store.put_message(message(body=bytes(2000)))
    store.dispatch_pending()
    clock.advance(10 * HOUR_MS)
    assert store.delete_expired() == 0  # nothing flushed yet: never delete what is not durable
    store.commitlog.flush()
    assert store.delete_expired() >= 1
    assert len(store.commitlog.segments) >= 1  # the newest segment always stays


def test_min_offset_survives_reopen(open_store: StoreFactory, clock: ManualClock) -> None:
    store = open_store(file_reserved_time_ms=HOUR_MS)
    _fill_segments(store, clock, 100)
    clock.advance(2 * HOUR_MS)
    store.delete_expired()
    minimum = store.min_offset_in_queue("TopicA", 0)
    store.close()
    reopened = open_store()
    assert reopened.min_offset_in_queue("TopicA", 0) == minimum
    assert reopened.max_offset_in_queue("TopicA", 0) == 100
