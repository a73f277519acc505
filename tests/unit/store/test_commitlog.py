"""Commit log: segment files, roll-over, batches, reads by physical offset, recovery of the tail."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from storekit import message

from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import BLANK_MAGIC, PREFIX, decode

StoreFactory = Callable[..., MessageStore]


def test_segments_are_named_by_their_20_digit_start_offset(open_store: StoreFactory) -> None:
    store = open_store()
    for i in range(200):
        assert store.put_message(message(body=bytes(1000), KEYS=f"k{i}")).ok
    names = sorted(p.name for p in (store.root / "commitlog").iterdir())
    assert len(names) >= 3
    assert names[:3] == [f"{i * 64 * 1024:020d}" for i in range(3)]
    assert all(os.path.getsize(store.root / "commitlog" / n) == 64 * 1024 for n in names)


def test_roll_over_leaves_a_blank_record_and_no_record_spans_segments(open_store: StoreFactory) -> None:
    store = open_store()
    results = [store.put_message(message(body=bytes(3000))) for _ in range(60)]
    segment = 64 * 1024
    for result in results:
        start = result.first.physical_offset
        assert start // segment == (start + result.first.size - 1) // segment
    first = store.commitlog.segments[0]
    last_in_first = max(
        r.first.physical_offset + r.first.size for r in results if r.first.physical_offset < segment
    )
    size, magic = PREFIX.unpack(first.read(last_in_first, PREFIX.size))
    assert magic == BLANK_MAGIC and last_in_first + size == segment


def test_read_by_physical_offset_returns_the_stored_record(open_store: StoreFactory) -> None:
    store = open_store()
    result = store.put_message(message(body=b"needle", TAGS="T1"))
    found = store.message_at(result.first.physical_offset)
    assert found is not None and found.body == b"needle" and found.tags == "T1"
    assert store.message_at(result.first.physical_offset + 1) is None
    assert store.message_at(10**12) is None


def test_batch_is_contiguous_with_consecutive_queue_offsets(open_store: StoreFactory) -> None:
    store = open_store()
    store.put_message(message(body=b"first"))
    result = store.put_messages([message(body=f"b{i}".encode()) for i in range(10)])
    assert result.ok and len(result.messages) == 10
    assert [m.queue_offset for m in result.messages] == list(range(1, 11))
    for before, after in zip(result.messages, result.messages[1:], strict=False):
        assert before.physical_offset + before.size == after.physical_offset
    assert [store.message_at(m.physical_offset).body for m in result.messages] == [  # type: ignore[union-attr]
        f"b{i}".encode() for i in range(10)
    ]


def _crash(store: MessageStore) -> None:
    """Leave the store as a killed process would: no checkpoint update, abort marker kept."""
    store.commitlog.flush()
    store._close_files()
    store._release_lock()
    store._open = False


def _segment_path(store_dir: Path, offset: int, segment: int = 64 * 1024) -> tuple[Path, int]:
    start = offset - offset % segment
    return store_dir / "commitlog" / f"{start:020d}", offset - start


def test_torn_tail_is_truncated_and_earlier_records_survive(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store()
    kept = [store.put_message(message(body=f"m{i}".encode() * 50)) for i in range(20)]
    store.dispatch_pending()
    store.flush_consume_queues()
    torn = store.put_message(message(body=b"z" * 500))
    _crash(store)
    path, position = _segment_path(tmp_path / "store", torn.first.physical_offset)
    with path.open("r+b") as file:  # cut the last record in half, as a kill mid-write would
        file.seek(position + torn.first.size // 2)
        file.write(bytes(torn.first.size - torn.first.size // 2))

    reopened = open_store()
    assert reopened.commitlog.max_offset == torn.first.physical_offset
    assert reopened.max_offset_in_queue("TopicA", 0) == 20
    for result in kept:
        assert reopened.message_at(result.first.physical_offset) is not None
    assert reopened.message_at(torn.first.physical_offset) is None
    again = reopened.put_message(message(body=b"after"))
    assert again.first.physical_offset == torn.first.physical_offset and again.first.queue_offset == 20


def test_garbage_after_the_end_is_erased(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store()
    last = store.put_message(message(body=b"ok"))
    end = last.first.physical_offset + last.first.size
    _crash(store)
    path, position = _segment_path(tmp_path / "store", end)
    with path.open("r+b") as file:
        file.seek(position)
        file.write(os.urandom(300))
    reopened = open_store()
    assert reopened.commitlog.max_offset == end
    assert reopened.commitlog.segments[-1].pread(position, 300) == bytes(300)


def test_corrupt_body_crc_cuts_the_log_there(open_store: StoreFactory, tmp_path: Path) -> None:
    store = open_store()
    results = [store.put_message(message(body=bytes([i]) * 100)) for i in range(5)]
    _crash(store)
    victim = results[3].first
    path, position = _segment_path(tmp_path / "store", victim.physical_offset)
    with path.open("r+b") as file:
        file.seek(position + 120)
        file.write(b"\xff")
    reopened = open_store()
    assert reopened.commitlog.max_offset == victim.physical_offset
    assert reopened.max_offset_in_queue("TopicA", 0) == 3
    assert [decode(r).body[0] for r in reopened.get_message("g", "TopicA", 0, 0, 32).records] == [0, 1, 2]
