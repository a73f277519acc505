"""A pull that meets consume-queue units past the commit log's end (a rejoining slave cuts its
log before its consume queues, while pulls go on) stops there instead of skipping them: found by
``orbitmq chaos`` (seed 11, 30 rounds), where both live groups jumped over 309 acknowledged
messages the new master stored at the skipped queue offsets."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from storekit import message

from orbitmq.store import pull_read
from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import decode
from orbitmq.store.results import GetStatus

StoreFactory = Callable[..., MessageStore]


@pytest.mark.parametrize("native", [True, False], ids=["c-loop", "python-rule"])
def test_units_past_a_cut_log_are_not_skipped(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, native: bool
) -> None:
    if not native or pull_read.NATIVE is None:
        monkeypatch.setattr(pull_read, "NATIVE", None)
    store = open_store()
    for i in range(10):
        assert store.put_message(message(body=f"m{i}".encode(), queue_id=0)).ok
    store.dispatch_pending()
    fifth = decode(store.get_message("g", "TopicA", 0, 5, 1).records[0])
    store.commitlog.truncate(fifth.physical_offset)  # the log cut; the consume queue not yet

    at_cut = store.get_message("g", "TopicA", 0, 5, 32)
    assert (at_cut.status, at_cut.next_begin_offset, at_cut.records) == (GetStatus.OFFSET_OVERFLOW_ONE, 5, [])
    before = store.get_message("g", "TopicA", 0, 3, 32)
    assert before.status is GetStatus.FOUND
    assert [decode(r).body for r in before.records] == [b"m3", b"m4"]
    assert before.next_begin_offset == 5
