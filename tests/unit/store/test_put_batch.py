"""put_batch (the send path's column-wise put) stores and refuses exactly as put_messages does."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from storekit import REFUSALS, message_batch

from nativekit import use_path
from orbitmq.common.clock import ManualClock
from orbitmq.store import commitlog
from orbitmq.store.commitlog import AppendedBatch
from orbitmq.store.mapped_file import MappedFile
from orbitmq.store.message_id import encode_offset_msg_id
from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import SysFlag
from orbitmq.store.results import PutStatus

StoreFactory = Callable[..., MessageStore]


_batch = message_batch


def _log_bytes(store: MessageStore) -> bytes:
    return store.commitlog.read(0, store.commitlog.max_offset) or b""


def test_records_units_and_index_match_put_messages(
    tmp_path: Path, open_store: StoreFactory, clock: ManualClock
) -> None:
    by_batch, by_messages = open_store(tmp_path / "a"), open_store(tmp_path / "b")
    for _ in range(3):  # later batches take the cached tag codes and the one-write unit path
        batch = _batch()
        first = by_batch.put_batch(batch)
        second = by_messages.put_messages([batch.message(i) for i in range(len(batch))])
        assert first.ok and second.ok
        assert first.messages.msg_ids() == second.messages.msg_ids()  # type: ignore[attr-defined]
        assert list(first.messages) == list(second.messages)
        clock.advance(5)
    assert _log_bytes(by_batch) == _log_bytes(by_messages)
    for store in (by_batch, by_messages):
        store.dispatch_pending()
    for store in (by_batch, by_messages):
        assert store.max_offset_in_queue("TopicA", 1) == 12
    queue_a, queue_b = by_batch.consume_queue("TopicA", 1), by_messages.consume_queue("TopicA", 1)
    assert queue_a is not None and queue_b is not None
    assert queue_a.units(0, 100) == queue_b.units(0, 100)
    assert [m.queue_offset for m in by_batch.query_by_key("TopicA", "k2")] == [10, 6, 2]
    assert [m.queue_offset for m in by_batch.query_by_key("TopicA", "U1")] == [10, 6, 2]


def test_prepared_batches_take_no_queue_offset(open_store: StoreFactory) -> None:
    store = open_store()
    result = store.put_batch(_batch(sys_flag=int(SysFlag.TRANSACTION_PREPARED)))
    assert result.ok and [m.queue_offset for m in result.messages] == [0, 0, 0, 0]
    store.dispatch_pending()
    assert store.max_offset_in_queue("TopicA", 1) == 0


@pytest.mark.parametrize(
    ("overrides", "status", "reason"),
    [
        *REFUSALS,
        ({"bodies": [b"ok", "text", b"", b""]}, PutStatus.MESSAGE_ILLEGAL, "body must be bytes"),
        ({"properties": [{}, {}, {"X": "a\x01b"}, {}]}, PutStatus.MESSAGE_ILLEGAL, "must not contain"),
        ({"properties": [{"": "v"}, {}, {}, {}]}, PutStatus.MESSAGE_ILLEGAL, "must not be empty"),
        ({"properties": [{"A": "1"}, {"\x01B": "2"}, {}, {}]}, PutStatus.MESSAGE_ILLEGAL, "must not contain"),
        ({"flags": [0]}, PutStatus.MESSAGE_ILLEGAL, "as many properties and flags"),
        ({"bodies": [], "properties": [], "flags": []}, PutStatus.MESSAGE_ILLEGAL, "at least one"),
    ],
)
def test_bad_batches_are_refused_whole_with_the_reason_of_a_single_put(
    open_store: StoreFactory, overrides: dict[str, object], status: PutStatus, reason: str
) -> None:
    store = open_store()
    result = store.put_batch(_batch(**overrides))
    assert result.status is status
    assert result.reason is not None and reason in result.reason
    assert store.commitlog.max_offset == 0


def test_a_batch_that_fills_a_segment_rolls_to_the_next(open_store: StoreFactory) -> None:
    store = open_store()  # 64 KiB segments
    batch = _batch(bodies=[bytes(5000)] * 4)
    ends = [store.put_batch(batch).end_offset for _ in range(5)]
    assert ends[-1] > 64 * 1024 and store.commitlog.max_offset == ends[-1]
    store.dispatch_pending()
    assert store.max_offset_in_queue("TopicA", 1) == 20
    records = store.get_message("g", "TopicA", 1, 0, 32).records
    assert len(records) == 20


def test_units_cross_consume_queue_files_like_single_puts(tmp_path: Path, open_store: StoreFactory) -> None:
    by_batch, by_messages = open_store(tmp_path / "a"), open_store(tmp_path / "b")  # 50 units per file
    batch = _batch(bodies=[b"x"] * 4)
    for _ in range(15):
        by_batch.put_batch(batch)
        by_messages.put_messages([batch.message(i) for i in range(4)])
        by_batch.dispatch_pending()
        by_messages.dispatch_pending()
    queue_a, queue_b = by_batch.consume_queue("TopicA", 1), by_messages.consume_queue("TopicA", 1)
    assert queue_a is not None and queue_b is not None
    assert queue_a.max_offset == queue_b.max_offset == 60
    assert [queue_a.unit_at(i) for i in range(60)] == [queue_b.unit_at(i) for i in range(60)]


@pytest.mark.parametrize("path", ["c", "python"])
@pytest.mark.parametrize("store_host", ["10.0.0.1:10911", "[2001:db8::1]:10911"])
def test_batch_msg_ids_are_offset_ids(store_host: str, path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    use_path(path, monkeypatch, commitlog)
    sizes = [120, 5000, 1 << 20]
    first = (1 << 62) + 3
    appended = AppendedBatch(first, sizes, [0, 1, 2], 0, store_host, 0)
    offsets = [first, first + 120, first + 5120]
    assert appended.msg_ids() == [encode_offset_msg_id(store_host, offset) for offset in offsets]
    assert AppendedBatch(7, [9], [0], 0, store_host, 0).msg_ids() == [encode_offset_msg_id(store_host, 7)]
    assert AppendedBatch(0, [], [], 0, store_host, 0).msg_ids() == []


def test_write_parts_lands_every_part_in_order_and_refuses_overflow(tmp_path: Path) -> None:
    mapped = MappedFile.create(tmp_path, 0, 64 * 1024)
    try:
        parts = [bytes([i % 251]) * (i % 7) for i in range(3000)]  # more parts than one pwritev takes
        mapped.write_parts(100, parts)
        assert mapped.read(100, sum(map(len, parts))) == b"".join(parts)
        with pytest.raises(ValueError, match="do not fit"):
            mapped.write_parts(64 * 1024 - 2, [b"abc"])
    finally:
        mapped.close()
