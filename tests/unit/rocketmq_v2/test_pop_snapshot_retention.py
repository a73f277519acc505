"""POP state against commit-log retention (real store, tiny segments, a manual clock): the
snapshot written when the last one is older than the interval keeps a group's place after
retention deleted the records that built it; a restart replays from the last snapshot only;
the in-flight gauge's source keeps groups with nothing in flight at 0."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))
from storekit import message, tiny_config

from orbitmq.broker.pop.records import POP_LOG_TOPIC
from orbitmq.broker.pop.service import POP_LOG_QUEUE, PopService
from orbitmq.broker.pop.state import AckOutcome, PopKey
from orbitmq.common.clock import ManualClock
from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import InboundMessage
from orbitmq.store.results import PutResult

GROUP, TOPIC, FILLER, BROKER = "pop-group", "PopTopic", "Filler", "broker-a"
MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
KEY = PopKey(GROUP, TOPIC, 0)

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def stores(tmp_path: Path, clock: ManualClock) -> Iterator[Callable[[], MessageStore]]:
    opened: list[MessageStore] = []

    def open_store() -> MessageStore:
        store = MessageStore(tiny_config(tmp_path / "store", file_reserved_time_ms=HOUR_MS), clock=clock)
        store.open()
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        if store.is_open:
            store.close()


def _service(store: MessageStore, clock: ManualClock) -> PopService:
    async def put(messages: list[InboundMessage]) -> PutResult:
        result = store.put_messages(messages)
        store.dispatch_pending()
        return result

    service = PopService(store, put, clock, BROKER, snapshot_interval_ms=HOUR_MS // 2)
    service.load()
    return service


def _send(store: MessageStore, topic: str, *bodies: bytes) -> None:
    for body in bodies:
        store.put_message(message(topic, body))
    store.dispatch_pending()


async def _pop_and_ack(pop: PopService, count: int, acked: int, invisible_ms: int) -> None:
    popped = await pop.pop(GROUP, TOPIC, 0, count, invisible_ms)
    assert len(popped) == count
    for p in popped[:acked]:
        assert await pop.ack(GROUP, TOPIC, p.handle.encode()) is AckOutcome.ACKED


async def test_group_place_survives_retention_of_its_records(
    stores: Callable[[], MessageStore], clock: ManualClock
) -> None:
    store = stores()
    _send(store, TOPIC, *(f"m{i}".encode() for i in range(10)))
    pop = _service(store, clock)
    await _pop_and_ack(pop, 10, 10, HOUR_MS)  # all done: the group's floor is 10
    # Three hours of other traffic, the broker's snapshot loop looking as it goes.
    for _ in range(90):
        _send(store, FILLER, bytes(2000))
        clock.advance(2 * MINUTE_MS)
        await pop.snapshot_if_due()
    _send(store, TOPIC, *(f"m{i}".encode() for i in range(10, 20)))
    await _pop_and_ack(pop, 10, 5, 10 * MINUTE_MS)  # m10..m14 acked, m15..m19 in flight
    store.commitlog.flush()
    assert store.delete_expired() >= 1
    assert store.min_offset_in_queue(POP_LOG_TOPIC, POP_LOG_QUEUE) > 0  # the first records are gone
    store.close()

    store = stores()
    restarted = _service(store, clock)
    summary = restarted.state.summary(KEY, clock.now_ms())
    assert summary is not None
    assert (summary.consume_offset, summary.delivered_offset) == (15, 20)
    assert (summary.in_flight, summary.done_above) == (5, 0)
    assert await restarted.pop(GROUP, TOPIC, 0, 32, HOUR_MS) == []  # still invisible
    clock.advance(10 * MINUTE_MS)
    again = await restarted.pop(GROUP, TOPIC, 0, 32, HOUR_MS)
    assert [(p.message.body, p.attempt) for p in again] == [(f"m{i}".encode(), 2) for i in range(15, 20)]


async def test_restart_replays_from_the_last_snapshot_only(
    stores: Callable[[], MessageStore], clock: ManualClock
) -> None:
    store = stores()
    _send(store, TOPIC, *(f"m{i}".encode() for i in range(30)))
    pop = _service(store, clock)
    assert await pop.snapshot_if_due() is False  # no group has state: nothing to keep
    await _pop_and_ack(pop, 10, 10, HOUR_MS)  # 11 records
    clock.advance(HOUR_MS)
    assert await pop.snapshot_if_due() is True
    assert await pop.snapshot_if_due() is False  # the one just written is recent
    await _pop_and_ack(pop, 10, 4, HOUR_MS)  # 5 records after the snapshot
    store.close()

    store = stores()
    restarted = PopService(store, pop._put, clock, BROKER)
    assert restarted.load() == 1 + 5  # the snapshot and what follows it, not the 11 before
    summary = restarted.state.summary(KEY, clock.now_ms())
    assert summary is not None and (summary.consume_offset, summary.in_flight) == (14, 6)
    assert restarted.snapshot_at_ms > 0


async def test_in_flight_by_topic_keeps_groups_at_zero(
    stores: Callable[[], MessageStore], clock: ManualClock
) -> None:
    store = stores()
    _send(store, TOPIC, b"m0", b"m1")
    pop = _service(store, clock)
    first, second = await pop.pop(GROUP, TOPIC, 0, 2, HOUR_MS)
    assert await pop.ack(GROUP, TOPIC, first.handle.encode()) is AckOutcome.ACKED
    assert pop.state.in_flight_by_topic() == {(GROUP, TOPIC): 1}
    assert await pop.ack(GROUP, TOPIC, second.handle.encode()) is AckOutcome.ACKED
    assert pop.state.in_flight_by_topic() == {(GROUP, TOPIC): 0}  # still there, at 0
