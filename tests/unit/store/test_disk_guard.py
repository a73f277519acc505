"""The store's disk ratios on a real store: past the warning ratio every way of sending is refused
with DISK_FULL naming the ratio, the path and the setting, while the broker's bookkeeping records
still go in; a write the disk refused stops those too; forcible cleaning deletes segments before
their retention time but never the newest. (The file-system side, with a real full disk, is
tests/integration/broker/test_disk_full.py.)"""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError
from storekit import message, message_batch, scanned, tiny_config

from orbitmq.common.clock import ManualClock
from orbitmq.native import NATIVE
from orbitmq.store.disk import used_ratio
from orbitmq.store.index_file import ENTRY_SIZE, HEADER_SIZE, RESERVE_AHEAD_BYTES, IndexFile
from orbitmq.store.message_store import MessageStore
from orbitmq.store.results import PutStatus

StoreFactory = Callable[..., MessageStore]
HOUR_MS = 3_600_000


def test_the_cleaning_ratio_may_not_exceed_the_forcible_one(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"disk_max_used_space_ratio \(0.9\) must not exceed"):
        tiny_config(tmp_path, disk_max_used_space_ratio=0.9, disk_space_clean_forcibly_ratio=0.8)


def _full_store(open_store: StoreFactory, tmp_path: Path) -> MessageStore:
    """A store whose warning ratio is below what its real disk already uses."""
    ratio = used_ratio(tmp_path)
    if ratio < 0.002:
        pytest.skip(f"{tmp_path}'s disk is {ratio:.2%} used: no ratio below it to set")
    store = open_store(
        disk_space_warning_level_ratio=round(ratio / 2, 4),
        disk_space_clean_forcibly_ratio=1.0,
        disk_max_used_space_ratio=1.0,
    )
    store.put_message(message(body=b"before"))
    assert store.disk.check().full
    return store


def test_past_the_warning_ratio_every_send_is_refused_and_bookkeeping_goes_on(
    open_store: StoreFactory, tmp_path: Path
) -> None:
    store = _full_store(open_store, tmp_path)
    refused = store.put_message(message(body=b"refused"))
    assert refused.status is PutStatus.DISK_FULL
    assert refused.reason is not None
    assert str(tmp_path / "store") in refused.reason and "disk_space_warning_level_ratio" in refused.reason
    assert store.put_batch(message_batch()).status is PutStatus.DISK_FULL
    if NATIVE is not None:
        assert store.put_scanned(scanned(message_batch(), refused=True)).status is PutStatus.DISK_FULL
    assert store.disk.refused_writes == (3 if NATIVE is not None else 2)
    assert store.put_message(message(body=b"an ack record"), bookkeeping=True).ok
    store.dispatch_pending()
    assert store.max_offset_in_queue("TopicA", 0) == 2  # the first message and the bookkeeping one


def test_a_write_the_disk_refused_stops_bookkeeping_too(open_store: StoreFactory) -> None:
    store = open_store()
    assert store.put_message(message()).ok
    assert store.disk.write_failed(OSError(errno.ENOSPC, "No space left on device"))
    assert not store.disk.write_failed(OSError(errno.EIO, "I/O error"))  # not a full disk
    refused = store.put_message(message(), bookkeeping=True)
    assert refused.status is PutStatus.DISK_FULL
    assert refused.reason is not None and "refused a write (no space left" in refused.reason


def test_forcible_cleaning_deletes_segments_before_their_time_but_not_the_newest(
    open_store: StoreFactory, clock: ManualClock
) -> None:
    store = open_store(file_reserved_time_ms=HOUR_MS)
    for _ in range(100):  # ~31 messages per 64 KiB segment: 4 segments, all minutes old
        store.put_message(message(body=bytes(2000)))
        clock.advance(1_000)
    store.dispatch_pending()
    store.commitlog.flush()
    segments = len(store.commitlog.segments)
    assert segments >= 4
    assert store.delete_expired() == 0
    assert store.delete_expired(forcibly=True) == segments - 1
    assert len(store.commitlog.segments) == 1
    assert store.min_offset_in_queue("TopicA", 0) > 0


def test_an_index_file_allocates_its_blocks_ahead_of_its_entries(tmp_path: Path) -> None:
    """Blocks are allocated for what is written and a stretch beyond, never a hole under a
    write (a SIGBUS on a full disk), nor the whole file up front (420 MB by default)."""
    path = tmp_path / "index"
    index = IndexFile(path, 1024, 200_000, create=True)
    try:
        allocated = path.stat().st_blocks * 512
        assert HEADER_SIZE + 1024 * 4 + RESERVE_AHEAD_BYTES <= allocated < path.stat().st_size
        for i in range(60_000):  # 1.2 MB of entries: past the first stretch
            assert index.put(f"k{i}", i, 1_700_000_000_000)
        grown = path.stat().st_blocks * 512
        assert HEADER_SIZE + 1024 * 4 + 60_000 * ENTRY_SIZE <= grown < path.stat().st_size
        assert index.lookup("k59999", 4, 0, 1 << 62) == [59_999]
    finally:
        index.close()
