"""put_scanned (the C send path) stores, dispatches and refuses exactly as put_batch does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from storekit import REFUSALS, message_batch, scanned, tiny_config

from nativekit import needs_native
from orbitmq.common.clock import ManualClock
from orbitmq.native import NATIVE
from orbitmq.store import commitlog
from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import HEADER_BYTES, MessageBatch, SysFlag, decode
from orbitmq.store.results import PutStatus

StoreFactory = Callable[..., MessageStore]
pytestmark = needs_native


def _records(store: MessageStore) -> list[bytes]:
    log, records, at = store.commitlog, [], 0
    while at < log.max_offset:
        record = log.read_record(at)
        assert record is not None
        records.append(record)
        at += len(record)
    return records


def _warm(store: MessageStore, batch: MessageBatch) -> None:
    """One Python-path put: the store learns the topic and host, as a broker's first send does."""
    assert store.put_batch(batch).ok


def test_records_units_and_index_match_put_batch(
    tmp_path: Path, open_store: StoreFactory, clock: ManualClock
) -> None:
    assert NATIVE is not None
    by_c, by_python = open_store(tmp_path / "c"), open_store(tmp_path / "python")
    batch = message_batch()
    for store in (by_c, by_python):
        _warm(store, batch)
    for _ in range(3):
        first, second = by_c.put_scanned(scanned(batch)), by_python.put_batch(batch)
        assert first.ok and second.ok
        assert first.messages.msg_ids() == second.messages.msg_ids()  # type: ignore[attr-defined]
        assert list(first.messages) == list(second.messages)
        clock.advance(5)
    c_records, python_records = _records(by_c), _records(by_python)
    assert len(c_records) == len(python_records) == 16
    for c_record, python_record in zip(c_records, python_records, strict=True):
        stored = decode(c_record)
        assert stored == decode(python_record)
        # Everything before the properties is byte for byte the same (property order may differ:
        # the C path keeps the wire's, the Python path the map's).
        before_properties = HEADER_BYTES + len(stored.body) + 2 + len(stored.topic) + 2
        assert c_record[:before_properties] == python_record[:before_properties]
    for store in (by_c, by_python):
        store.dispatch_pending()
        assert store.max_offset_in_queue("TopicA", 1) == 16
    queue_c, queue_python = by_c.consume_queue("TopicA", 1), by_python.consume_queue("TopicA", 1)
    assert queue_c is not None and queue_python is not None
    assert queue_c.units(0, 100) == queue_python.units(0, 100)
    for key in ("k1", "k2", "U1"):
        assert [m.queue_offset for m in by_c.query_by_key("TopicA", key)] == [14, 10, 6, 2]


def test_single_property_messages_are_byte_identical(tmp_path: Path, open_store: StoreFactory) -> None:
    by_c, by_python = open_store(tmp_path / "c"), open_store(tmp_path / "python")
    batch = message_batch(
        bodies=[bytes(range(256)) * 3, b"", b"x"],
        properties=[{"TAGS": "TagA"}, {}, {"UNIQ_KEY": "7F000001"}],
        flags=[1, 0, 2**31 - 1],
    )
    for store in (by_c, by_python):
        _warm(store, batch)
    assert by_c.put_scanned(scanned(batch)).ok and by_python.put_batch(batch).ok
    assert _records(by_c) == _records(by_python)


def test_prepared_scanned_batches_take_no_queue_offset(open_store: StoreFactory) -> None:
    store = open_store()
    _warm(store, message_batch())
    result = store.put_scanned(scanned(message_batch(sys_flag=int(SysFlag.TRANSACTION_PREPARED))))
    assert result.ok and [m.queue_offset for m in result.messages] == [0, 0, 0, 0]


@pytest.mark.parametrize(("overrides", "status", "reason"), REFUSALS)
def test_refusals_read_as_put_batch_gives_them(
    open_store: StoreFactory, overrides: dict[str, object], status: PutStatus, reason: str
) -> None:
    store = open_store()
    _warm(store, message_batch())
    before = store.commitlog.max_offset
    result = store.put_scanned(scanned(message_batch(**overrides), refused=True))
    assert result.status is status
    assert result.reason is not None and reason in result.reason
    assert store.commitlog.max_offset == before


def test_a_scanned_batch_that_fills_a_segment_rolls_to_the_next(open_store: StoreFactory) -> None:
    store = open_store()  # 64 KiB segments
    batch = message_batch(bodies=[bytes(5000)] * 4)
    _warm(store, batch)
    ends = [store.put_scanned(scanned(batch)).end_offset for _ in range(5)]
    assert ends[-1] > 64 * 1024 and store.commitlog.max_offset == ends[-1]
    store.dispatch_pending()
    assert store.max_offset_in_queue("TopicA", 1) == 24
    assert len(store.get_message("g", "TopicA", 1, 0, 32).records) == 24


def test_a_crashed_store_recovers_every_scanned_record(tmp_path: Path, clock: ManualClock) -> None:
    """Recovery replays the whole log checking each record's size, magic and body CRC: the C
    writer's records must all pass, or the log would be cut at the first one."""
    store = MessageStore(tiny_config(tmp_path), clock=clock)
    store.open()
    _warm(store, message_batch())
    for _ in range(10):
        assert store.put_scanned(scanned(message_batch())).ok
    end = store.commitlog.max_offset
    store.commitlog.flush()
    store._close_files()  # what SIGKILL leaves: no checkpoint, the abort marker in place
    store._release_lock()
    (tmp_path / "checkpoint").write_bytes(b"garbage")  # unreadable: replay the whole log
    reopened = MessageStore(tiny_config(tmp_path), clock=clock)
    report = reopened.open()
    try:
        assert not report.clean_shutdown
        assert reopened.commitlog.max_offset == end
        assert reopened.max_offset_in_queue("TopicA", 1) == 44
        assert [m.queue_offset for m in reopened.query_by_key("TopicA", "U1")][:2] == [42, 38]
    finally:
        reopened.close()


def test_a_failed_write_takes_no_queue_offsets(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store()
    _warm(store, message_batch())  # queue offsets 0..3

    class FailingDisk:
        def __getattr__(self, name: str) -> object:
            return getattr(NATIVE, name)

        def write(self, *args: object) -> list[int]:
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(commitlog, "NATIVE", FailingDisk())
    failed = store.put_scanned(scanned(message_batch()))
    assert failed.status is PutStatus.CREATE_MAPPED_FILE_FAILED and "Input/output" in (failed.reason or "")
    monkeypatch.setattr(commitlog, "NATIVE", NATIVE)
    stored = store.put_scanned(scanned(message_batch()))
    assert stored.ok and [m.queue_offset for m in stored.messages] == [4, 5, 6, 7]
    store.dispatch_pending()
    assert store.max_offset_in_queue("TopicA", 1) == 8
