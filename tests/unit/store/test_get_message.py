"""Reading: every status and next-offset rule of docs/architecture.md, "The storage engine", bounds,
filters and queries."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from storekit import message

from nativekit import use_path
from orbitmq.common.clock import ManualClock
from orbitmq.store import pull_read
from orbitmq.store.config import BrokerRole
from orbitmq.store.message_filter import TagFilter
from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import decode
from orbitmq.store.results import GetStatus

StoreFactory = Callable[..., MessageStore]


@pytest.fixture(autouse=True, params=["c", "python"])
def read_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every read here runs through the C record loop and through the Python one."""
    use_path(request.param, monkeypatch, pull_read)
    return request.param


def _fill(store: MessageStore, count: int, queue_id: int = 0, **properties: str) -> None:
    for i in range(count):
        store.put_message(message(body=f"m{i}".encode(), queue_id=queue_id, **properties))
    store.dispatch_pending()


def test_unknown_queue_is_no_matched_logic_queue(open_store: StoreFactory) -> None:
    result = open_store().get_message("g", "Nope", 0, 5, 32)
    assert (result.status, result.next_begin_offset) == (GetStatus.NO_MATCHED_LOGIC_QUEUE, 0)


def test_empty_queue_is_no_message_in_queue(open_store: StoreFactory) -> None:
    store = open_store()
    queue = store._new_queue("Empty", 0)
    assert queue.max_offset == 0
    result = store.get_message("g", "Empty", 0, 3, 32)
    assert (result.status, result.next_begin_offset) == (GetStatus.NO_MESSAGE_IN_QUEUE, 0)


@pytest.mark.parametrize(
    ("offset", "status", "next_offset"),
    [
        (10, GetStatus.OFFSET_OVERFLOW_ONE, 10),
        (11, GetStatus.OFFSET_OVERFLOW_BADLY, 0),  # min = 0 → back to min
        (500, GetStatus.OFFSET_OVERFLOW_BADLY, 0),
        (0, GetStatus.FOUND, 10),
        (7, GetStatus.FOUND, 10),
    ],
)
def test_status_and_next_offset(
    open_store: StoreFactory, offset: int, status: GetStatus, next_offset: int
) -> None:
    store = open_store()
    _fill(store, 10)
    result = store.get_message("g", "TopicA", 0, offset, 32)
    assert (result.status, result.next_begin_offset) == (status, next_offset)
    assert (result.min_offset, result.max_offset) == (0, 10)


def test_too_small_and_badly_overflowing_offsets_when_min_is_above_zero(open_store: StoreFactory) -> None:
    store = open_store()
    _fill(store, 10)
    queue = store.consume_queue("TopicA", 0)
    assert queue is not None
    queue._min_offset = 4  # as after retention; the retention test covers how it gets there
    small = store.get_message("g", "TopicA", 0, 2, 32)
    assert (small.status, small.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, 4)
    negative = store.get_message("g", "TopicA", 0, -5, 32)
    assert (negative.status, negative.next_begin_offset) == (GetStatus.OFFSET_TOO_SMALL, 4)
    badly = store.get_message("g", "TopicA", 0, 99, 32)
    assert (badly.status, badly.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 10)


def test_a_slave_does_not_correct_offsets_unless_configured(open_store: StoreFactory, tmp_path) -> None:  # type: ignore[no-untyped-def]
    master = open_store()
    _fill(master, 5)
    master.close()
    slave = open_store(broker_role=BrokerRole.SLAVE)
    result = slave.get_message("g", "TopicA", 0, 50, 32)
    assert (result.status, result.next_begin_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 50)
    slave.close()
    checking = open_store(broker_role=BrokerRole.SLAVE, offset_check_in_slave=True)
    assert checking.get_message("g", "TopicA", 0, 50, 32).next_begin_offset == 0


def test_reads_are_bounded_by_count_and_bytes(open_store: StoreFactory) -> None:
    store = open_store(max_transfer_bytes=3000)
    for _ in range(20):
        store.put_message(message(body=bytes(1000)))
    store.dispatch_pending()
    by_bytes = store.get_message("g", "TopicA", 0, 0, 32)
    assert len(by_bytes.records) == 2 and by_bytes.next_begin_offset == 2
    store2 = open_store(directory=store.root.parent / "other")
    _fill(store2, 50)
    by_count = store2.get_message("g", "TopicA", 0, 0, 5)
    assert [decode(r).queue_offset for r in by_count.records] == [0, 1, 2, 3, 4]
    assert by_count.next_begin_offset == 5


def test_tag_filter_skips_units_by_hash_and_advances_past_them(open_store: StoreFactory) -> None:
    store = open_store()
    for i in range(12):
        store.put_message(message(body=f"{i}".encode(), TAGS=["A", "B", "C"][i % 3]))
    store.dispatch_pending()
    result = store.get_message("g", "TopicA", 0, 0, 32, TagFilter("A || C"))
    assert [decode(r).tags for r in result.records] == ["A", "C"] * 4
    assert result.next_begin_offset == 12
    none = store.get_message("g", "TopicA", 0, 0, 32, TagFilter("Z"))
    assert (none.status, none.next_begin_offset) == (GetStatus.NO_MATCHED_MESSAGE, 12)
    assert len(store.get_message("g", "TopicA", 0, 0, 32, TagFilter("*")).records) == 12


def test_bad_tag_expression_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=re.escape("tag expression 'A ||' must be")):
        TagFilter("A || ")


def test_min_max_and_offset_by_timestamp(open_store: StoreFactory, clock: ManualClock) -> None:
    store = open_store()
    start = clock.now_ms()
    for _ in range(10):
        store.put_message(message())
        clock.advance(1000)
    store.dispatch_pending()
    assert (store.min_offset_in_queue("TopicA", 0), store.max_offset_in_queue("TopicA", 0)) == (0, 10)
    assert store.offset_by_timestamp("TopicA", 0, start - 1) == 0
    assert store.offset_by_timestamp("TopicA", 0, start + 3500) == 4
    assert store.offset_by_timestamp("TopicA", 0, start + 4000) == 4
    assert store.offset_by_timestamp("TopicA", 0, start + 99_000) == 10


def test_message_by_offset_id(open_store: StoreFactory) -> None:
    store = open_store(store_host="10.0.0.7:10911")
    result = store.put_message(message(body=b"by-id"))
    found = store.message_by_id(result.first.msg_id)
    assert found is not None and found.body == b"by-id" and found.msg_id == result.first.msg_id
    other_broker = result.first.msg_id.replace("0A000007", "0A000008")
    assert store.message_by_id(other_broker) is None


def test_query_by_key_and_unique_key_within_time_range(open_store: StoreFactory, clock: ManualClock) -> None:
    store = open_store(index_slot_count=2)  # two slots: every lookup walks colliding chains
    start = clock.now_ms()
    for i in range(40):
        store.put_message(message(body=f"{i}".encode(), KEYS=f"order-{i % 5} extra{i}", UNIQ_KEY=f"U{i}"))
        clock.advance(10)
    store.dispatch_pending()
    bodies = sorted(int(m.body) for m in store.query_by_key("TopicA", "order-3", 100))
    assert bodies == [i for i in range(40) if i % 5 == 3]
    assert [m.body for m in store.query_by_key("TopicA", "U17")] == [b"17"]
    windowed = store.query_by_key("TopicA", "order-3", 100, start + 100, start + 200)
    assert sorted(int(m.body) for m in windowed) == [13, 18]
    assert store.query_by_key("OtherTopic", "order-3") == []
