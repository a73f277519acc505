"""POP over a real message store (real files, tiny segments): receive, ack, expiry and
redelivery, tag filters, dead letters, and state that survives closing and reopening the store
(the records live in the commit log, so a promoted slave replays the same)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))
from storekit import message, tiny_config

from orbitmq.broker.pop.handles import InvalidReceiptHandle
from orbitmq.broker.pop.service import PopService
from orbitmq.broker.pop.state import AckOutcome, PopKey
from orbitmq.common.clock import Clock, ManualClock, SystemClock
from orbitmq.store.message_filter import TagFilter
from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import InboundMessage
from orbitmq.store.results import PutResult

GROUP, TOPIC, BROKER = "pop-group", "PopTopic", "broker-a"
INVISIBLE = 30_000

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def stores(tmp_path: Path, clock: ManualClock) -> Iterator[Callable[[], MessageStore]]:
    opened: list[MessageStore] = []

    def open_store() -> MessageStore:
        store = MessageStore(tiny_config(tmp_path / "store"), clock=clock)
        store.open()
        opened.append(store)
        return store

    yield open_store
    for store in opened:
        if store.is_open:
            store.close()


def _service(store: MessageStore, clock: Clock) -> PopService:
    async def put(messages: list[InboundMessage]) -> PutResult:
        result = store.put_messages(messages)
        store.dispatch_pending()  # the broker's dispatcher builds consume queues right after
        return result

    service = PopService(store, put, clock, BROKER)
    service.load()
    return service


def _fill(store: MessageStore, *tags: str) -> None:
    for i, tag in enumerate(tags):
        store.put_message(message(TOPIC, f"m{i}".encode(), TAGS=tag))
    store.dispatch_pending()


async def test_pop_hands_out_messages_once_until_acked_or_expired(
    stores: Callable[[], MessageStore], clock: ManualClock
) -> None:
    store = stores()
    _fill(store, "a", "a", "a", "a", "a")
    pop = _service(store, clock)
    first = await pop.pop(GROUP, TOPIC, 0, 3, INVISIBLE)
    assert [p.message.body for p in first] == [b"m0", b"m1", b"m2"]
    assert [p.attempt for p in first] == [1, 1, 1]
    second = await pop.pop(GROUP, TOPIC, 0, 3, INVISIBLE)
    assert [p.message.body for p in second] == [b"m3", b"m4"], "invisible messages are not handed out again"
    assert await pop.ack(GROUP, TOPIC, first[0].handle.encode()) is AckOutcome.ACKED
    assert await pop.pop(GROUP, TOPIC, 0, 3, INVISIBLE) == []
    clock.advance(INVISIBLE)
    again = await pop.pop(GROUP, TOPIC, 0, 10, INVISIBLE)
    assert [(p.message.body, p.attempt) for p in again] == [(b"m1", 2), (b"m2", 2), (b"m3", 2), (b"m4", 2)]
    assert await pop.ack(GROUP, TOPIC, first[1].handle.encode()) is AckOutcome.STALE


async def test_tag_filter_delivers_matching_messages_and_skips_the_rest_for_good(
    stores, clock: ManualClock
) -> None:
    store = stores()
    _fill(store, "a", "b", "a", "b")
    pop = _service(store, clock)
    got = await pop.pop(GROUP, TOPIC, 0, 10, INVISIBLE, message_filter=TagFilter("a"))
    assert [p.message.body for p in got] == [b"m0", b"m2"]
    for popped in got:
        await pop.ack(GROUP, TOPIC, popped.handle.encode())
    assert pop.state.queue(PopKey(GROUP, TOPIC, 0)).floor == 4, "skipped messages count as done"


async def test_after_the_maximum_attempts_a_message_goes_to_the_dead_letter_topic(
    stores, clock: ManualClock
) -> None:
    store = stores()
    _fill(store, "a")
    pop = _service(store, clock)
    for _ in range(2):
        assert len(await pop.pop(GROUP, TOPIC, 0, 1, INVISIBLE, max_attempts=2)) == 1
        clock.advance(INVISIBLE)
    assert await pop.pop(GROUP, TOPIC, 0, 1, INVISIBLE, max_attempts=2) == []
    dlq = f"%DLQ%{GROUP}"
    unit = store.consume_queue(dlq, 0).unit_at(0)
    dead = store.message_at(unit[0])
    assert dead.body == b"m0" and dead.properties["ORIGIN_MESSAGE_ID"]
    assert pop.state.in_flight_count(PopKey(GROUP, TOPIC, 0)) == 0 and pop.dead_letters[GROUP, TOPIC] == 1


async def test_state_survives_reopening_the_store_and_old_handles_still_ack(
    stores, clock: ManualClock
) -> None:
    """Nothing acked is delivered again, nothing unacked is lost, and a receipt handle issued
    before the restart still acknowledges its delivery."""
    store = stores()
    _fill(store, "a", "a", "a", "a")
    pop = _service(store, clock)
    got = await pop.pop(GROUP, TOPIC, 0, 4, INVISIBLE)
    await pop.ack(GROUP, TOPIC, got[0].handle.encode())
    await pop.ack(GROUP, TOPIC, got[2].handle.encode())
    before = pop.state.snapshot()
    store.close()

    reopened = _service(stores(), clock)
    assert reopened.state.snapshot() == before
    assert await reopened.pop(GROUP, TOPIC, 0, 4, INVISIBLE) == [], "still invisible after the restart"
    assert await reopened.ack(GROUP, TOPIC, got[1].handle.encode()) is AckOutcome.ACKED
    clock.advance(INVISIBLE)
    assert [p.message.body for p in await reopened.pop(GROUP, TOPIC, 0, 4, INVISIBLE)] == [b"m3"]


async def test_change_invisible_duration_returns_a_new_handle(
    stores: Callable[[], MessageStore], clock: ManualClock
) -> None:
    store = stores()
    _fill(store, "a")
    pop = _service(store, clock)
    (got,) = await pop.pop(GROUP, TOPIC, 0, 1, INVISIBLE)
    outcome, handle = await pop.change_invisible(GROUP, TOPIC, got.handle.encode(), 120_000)
    assert outcome is AckOutcome.ACKED and handle is not None and handle != got.handle
    clock.advance(INVISIBLE)
    assert await pop.pop(GROUP, TOPIC, 0, 1, INVISIBLE) == []
    assert await pop.ack(GROUP, TOPIC, handle.encode()) is AckOutcome.ACKED


async def test_foreign_receipt_handles_are_refused_naming_the_handle(
    stores: Callable[[], MessageStore], clock: ManualClock
) -> None:
    pop = _service(stores(), clock)
    with pytest.raises(InvalidReceiptHandle, match="'nonsense'"):
        await pop.ack(GROUP, TOPIC, "nonsense")
    with pytest.raises(InvalidReceiptHandle, match="broker-b"):
        await pop.ack(GROUP, TOPIC, "broker-b:0:0:1")
    assert await pop.ack(GROUP, TOPIC, f"{BROKER}:0:0:1") is AckOutcome.UNKNOWN


async def test_long_polling_pop_wakes_when_a_message_is_appended(
    stores: Callable[[], MessageStore], clock: ManualClock
) -> None:
    """ReceiveMessage's long polling: an empty pop is held, and answered as soon as a message is
    appended to the queue (the dispatcher's notify), not at the end of the wait."""
    store = stores()
    pop = _service(store, clock)
    assert await pop.pop(GROUP, TOPIC, 0, 1, INVISIBLE, wait_ms=150) == [], (
        "nothing came: empty after the wait"
    )
    waiting = asyncio.ensure_future(pop.pop(GROUP, TOPIC, 0, 1, INVISIBLE, wait_ms=10_000))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    started = time.monotonic()
    _fill(store, "a")
    pop.notify_append(TOPIC, 0)
    got = await asyncio.wait_for(waiting, 5)
    assert [p.message.body for p in got] == [b"m0"] and time.monotonic() - started < 1


async def test_long_polling_pop_wakes_when_an_invisible_message_becomes_visible(
    stores: Callable[[], MessageStore],
) -> None:
    store = stores()
    _fill(store, "a")
    pop = _service(store, SystemClock())  # invisibility runs out in real time here
    assert len(await pop.pop(GROUP, TOPIC, 0, 1, 300)) == 1
    started = time.monotonic()
    again = await pop.pop(GROUP, TOPIC, 0, 1, INVISIBLE, wait_ms=5_000)
    assert [(p.message.body, p.attempt) for p in again] == [(b"m0", 2)]
    assert 0.2 < time.monotonic() - started < 2
    assert pop.revives[GROUP, TOPIC] == 1 and pop.state.in_flight_by_topic() == {(GROUP, TOPIC): 1}


async def test_a_group_from_last_begins_at_the_next_message_and_keeps_that_start_across_a_reopen(
    stores: Callable[[], MessageStore], clock: ManualClock
) -> None:
    """``consumeFromMinEnable`` off (``admin group create --consume-from last``): a new group
    gets only messages sent after its first receive, and the start is recorded, so messages
    sent while the broker was down are not skipped by a start recomputed at the new end."""
    store = stores()
    _fill(store, "a", "a", "a")
    pop = _service(store, clock)
    assert await pop.pop(GROUP, TOPIC, 0, 8, INVISIBLE, from_first=False) == []
    assert [p.message.body for p in await pop.pop("from-first", TOPIC, 0, 8, INVISIBLE)] == [
        b"m0",
        b"m1",
        b"m2",
    ]
    store.close()

    store = stores()
    store.put_message(message(TOPIC, b"while-away", TAGS="a"))
    store.dispatch_pending()
    popped = await _service(store, clock).pop(GROUP, TOPIC, 0, 8, INVISIBLE, from_first=False)
    assert [(p.message.body, p.message.queue_offset) for p in popped] == [(b"while-away", 3)]
