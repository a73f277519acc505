"""Reopening: after a clean stop nothing is replayed; after a crash the checkpoint bounds the replay
and lost consume-queue or index data is rebuilt from the commit log."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from storekit import message, tiny_config

from orbitmq.store.checkpoint import read_checkpoint
from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import decode

StoreFactory = Callable[..., MessageStore]


def _crash(store: MessageStore) -> None:
    """What a SIGKILL leaves: files as written, no final checkpoint, the abort marker in place."""
    store._close_files()
    store._release_lock()
    store._open = False


def _reopen(path: Path) -> tuple[MessageStore, object]:
    store = MessageStore(tiny_config(path))
    report = store.open()
    return store, report


def test_clean_reopen_replays_nothing_and_keeps_offsets(tmp_path: Path) -> None:
    store, _ = _reopen(tmp_path)
    for i in range(100):
        store.put_message(message(body=f"{i}".encode(), queue_id=i % 3, KEYS=f"k{i}"))
    store.close()
    reopened, report = _reopen(tmp_path)
    assert report.clean_shutdown and report.replayed_bytes == 0  # type: ignore[attr-defined]
    assert [reopened.max_offset_in_queue("TopicA", q) for q in range(3)] == [34, 33, 33]
    assert reopened.put_message(message(queue_id=1)).first.queue_offset == 33
    reopened.close()


def test_crash_replays_from_the_checkpoint(tmp_path: Path) -> None:
    store, _ = _reopen(tmp_path)
    for i in range(50):
        store.put_message(message(body=f"{i}".encode()))
    store.dispatch_pending()
    checkpoint = store.flush_consume_queues()
    for i in range(50, 80):
        store.put_message(message(body=f"{i}".encode(), KEYS=f"late{i}"))
    store.commitlog.flush()
    _crash(store)
    reopened, report = _reopen(tmp_path)
    assert not report.clean_shutdown  # type: ignore[attr-defined]
    assert report.replayed_bytes == reopened.commitlog.max_offset - checkpoint.consume_queue_flushed  # type: ignore[attr-defined]
    assert reopened.max_offset_in_queue("TopicA", 0) == 80
    assert [m.body for m in reopened.query_by_key("TopicA", "late70")] == [b"70"]
    reopened.close()


def test_lost_consume_queues_and_index_are_rebuilt(tmp_path: Path) -> None:
    store, _ = _reopen(tmp_path)
    for i in range(120):
        store.put_message(message(body=f"{i}".encode(), queue_id=i % 2, KEYS=f"k{i}"))
    store.close()
    shutil.rmtree(tmp_path / "consumequeue")
    shutil.rmtree(tmp_path / "index")
    (tmp_path / "checkpoint").write_bytes(b"garbage")  # unreadable: full replay
    (tmp_path / "abort").touch()
    reopened, report = _reopen(tmp_path)
    assert report.checkpoint is None  # type: ignore[attr-defined]
    assert [reopened.max_offset_in_queue("TopicA", q) for q in (0, 1)] == [60, 60]
    records = reopened.get_message("g", "TopicA", 1, 0, 32).records
    assert [decode(r).body for r in records[:3]] == [b"1", b"3", b"5"]
    assert [m.body for m in reopened.query_by_key("TopicA", "k99")] == [b"99"]
    reopened.close()


def test_units_pointing_past_a_cut_log_are_dropped(tmp_path: Path) -> None:
    store, _ = _reopen(tmp_path)
    results = [store.put_message(message(body=bytes(500))) for _ in range(10)]
    store.dispatch_pending()
    store.flush_consume_queues()
    _crash(store)
    cut = results[6].first.physical_offset
    segment = tmp_path / "commitlog" / f"{0:020d}"
    with segment.open("r+b") as file:  # the log lost its tail (power loss): zeros from record 6 on
        file.seek(cut)
        file.write(bytes(64 * 1024 - cut))
    reopened, report = _reopen(tmp_path)
    assert report.units_dropped == 4  # type: ignore[attr-defined]
    assert reopened.max_offset_in_queue("TopicA", 0) == 6
    assert reopened.put_message(message()).first.queue_offset == 6
    reopened.close()


def test_checkpoint_is_written_on_close(tmp_path: Path) -> None:
    store, _ = _reopen(tmp_path)
    store.put_message(message())
    store.close()
    checkpoint = read_checkpoint(tmp_path / "checkpoint")
    assert checkpoint is not None
    assert checkpoint.commitlog_flushed == checkpoint.consume_queue_flushed == store.commitlog.max_offset
    assert not (tmp_path / "abort").exists()
