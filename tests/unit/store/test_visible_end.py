"""A store's readers stop at ``visible_end`` (a SYNC_MASTER's slave-confirmed offset): a pull
neither returns nor steps over records past it, filtered or not, and a consumer whose offset is
past the queue's end (of a queue retention shortened) is moved back to the last visible unit,
not to the queue's end."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from storekit import message

from orbitmq.store import pull_read
from orbitmq.store.message_filter import TagFilter
from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import decode
from orbitmq.store.results import GetStatus

StoreFactory = Callable[..., MessageStore]


@pytest.mark.parametrize("native", [True, False], ids=["c-loop", "python-rule"])
def test_a_pull_stops_at_the_visible_end(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    if not native or pull_read.NATIVE is None:
        monkeypatch.setattr(pull_read, "NATIVE", None)
    store = open_store()
    for i in range(10):
        assert store.put_message(message(body=f"m{i}".encode(), queue_id=0, TAGS="a" if i < 8 else "b")).ok
    store.dispatch_pending()
    sixth = decode(store.get_message("g", "TopicA", 0, 6, 1).records[0])
    store.visible_end = sixth.physical_offset  # m0..m5 confirmed, m6.. not yet

    read = store.get_message("g", "TopicA", 0, 0, 32)
    assert [decode(r).body for r in read.records] == [f"m{i}".encode() for i in range(6)]
    assert (read.status, read.next_begin_offset) == (GetStatus.FOUND, 6)
    at_fence = store.get_message("g", "TopicA", 0, 6, 32)
    assert (at_fence.status, at_fence.next_begin_offset, at_fence.records) == (
        GetStatus.OFFSET_OVERFLOW_ONE,
        6,
        [],
    )
    only_b = store.get_message("g", "TopicA", 0, 6, 32, TagFilter("b"))
    assert (only_b.next_begin_offset, only_b.records) == (6, [])  # m6, m7 (tag a) not stepped over

    store.visible_end = None
    assert len(store.get_message("g", "TopicA", 0, 6, 32).records) == 4


def test_an_overflowing_offset_is_moved_to_the_last_visible_unit(open_store: StoreFactory) -> None:
    store = open_store()
    for i in range(10):
        assert store.put_message(message(body=f"m{i}".encode(), queue_id=0)).ok
    store.dispatch_pending()
    fourth = decode(store.get_message("g", "TopicA", 0, 4, 1).records[0])
    store.visible_end = fourth.physical_offset + fourth.size  # m0..m4
    queue = store.consume_queue("TopicA", 0)
    assert queue is not None
    queue._min_offset = 2  # as after retention (a queue from 0 rewinds to 0, as RocketMQ's does)

    badly = store.get_message("g", "TopicA", 0, 40, 32)
    assert (badly.status, badly.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 5)
    store.visible_end = None
    assert store.get_message("g", "TopicA", 0, 40, 32).next_begin_offset == 10
