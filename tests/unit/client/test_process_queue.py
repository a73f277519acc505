from __future__ import annotations

import random
import threading
from dataclasses import dataclass

import pytest

from orbitmq.client.process_queue import PULL_MAX_IDLE_MS, REBALANCE_LOCK_MAX_LIVE_MS, ProcessQueue
from orbitmq.common.clock import ManualClock


@dataclass(frozen=True)
class Msg:
    queue_offset: int
    body: bytes = b"x"


def msgs(*offsets: int, size: int = 1) -> list[Msg]:
    return [Msg(o, b"x" * size) for o in offsets]


def span(first: int, last: int) -> list[Msg]:
    return msgs(*range(first, last + 1))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=1_000_000)


@pytest.fixture
def pq(clock: ManualClock) -> ProcessQueue[Msg]:
    return ProcessQueue(clock=clock)


# -------------------------------------------------------------------------- committable offset


def test_seed_scenario_slow_first_message_holds_the_offset_back(pq: ProcessQueue[Msg]) -> None:
    pq.put(span(1001, 1010))
    # 1005..1010 consumed while 1001 (and 1002..1004) are still in flight
    assert pq.remove(span(1005, 1010)) == 1001
    assert pq.remove(msgs(1002, 1003, 1004)) == 1001
    # then 1001 finishes: everything is consumed, commit one past the largest
    assert pq.remove(msgs(1001)) == 1011
    assert pq.count == 0


def test_seed_scenario_all_removed_at_once(pq: ProcessQueue[Msg]) -> None:
    pq.put(span(1001, 1010))
    assert pq.remove(span(1005, 1010)) == 1001
    assert pq.remove(span(1001, 1004)) == 1011


def test_partial_removal_from_the_front_returns_the_next_in_flight(pq: ProcessQueue[Msg]) -> None:
    pq.put(span(1001, 1010))
    assert pq.remove(span(1001, 1008)) == 1009


def test_nothing_ever_put_means_no_offset(pq: ProcessQueue[Msg]) -> None:
    assert pq.remove(msgs(5)) == -1
    assert pq.committable_offset == -1


def test_removing_again_is_harmless(pq: ProcessQueue[Msg]) -> None:
    pq.put(span(0, 2))
    assert pq.remove(span(0, 2)) == 3
    assert pq.remove(span(0, 2)) == 3
    assert pq.count == 0 and pq.size_bytes == 0


def test_offsets_kept_in_order_whatever_the_put_order(pq: ProcessQueue[Msg]) -> None:
    offsets = list(range(100, 140))
    random.Random(3).shuffle(offsets)
    for chunk in range(0, len(offsets), 7):
        pq.put(msgs(*offsets[chunk : chunk + 7]))
    assert pq.span == 39
    assert [m.queue_offset for m in pq.take(40)] == list(range(100, 140))


# ---------------------------------------------------------------------------- accounting


def test_count_size_and_span(pq: ProcessQueue[Msg]) -> None:
    assert (pq.count, pq.size_bytes, pq.span) == (0, 0, 0)
    pq.put(msgs(10, 11, size=100))
    pq.put(msgs(12, 20, size=5))
    assert (pq.count, pq.size_bytes, pq.span) == (4, 210, 10)
    pq.put(msgs(11, size=100))  # already held: ignored
    assert (pq.count, pq.size_bytes) == (4, 210)
    pq.remove(msgs(10, size=100))
    assert (pq.count, pq.size_bytes, pq.span) == (3, 110, 9)
    pq.remove(msgs(11, 12, 20))
    assert (pq.count, pq.size_bytes, pq.span) == (0, 0, 0)


def test_put_says_when_to_dispatch(pq: ProcessQueue[Msg]) -> None:
    assert pq.put([]) is False  # nothing to consume
    assert pq.put(msgs(1)) is True  # idle -> has messages
    assert pq.put(msgs(2)) is False  # a task is already dispatched
    assert len(pq.take(10)) == 2
    assert pq.put(msgs(3)) is False  # the running task will take it
    assert len(pq.take(10)) == 1
    assert pq.take(10) == []  # the task finds nothing and ends: idle again
    assert pq.put(msgs(4)) is True


def test_bad_offset_rejects_the_whole_batch(pq: ProcessQueue[Msg]) -> None:
    with pytest.raises(ValueError, match="-3"):
        pq.put([Msg(1), Msg(-3)])
    assert pq.count == 0


# ------------------------------------------------------------------------------- orderly


def test_orderly_take_commit(pq: ProcessQueue[Msg]) -> None:
    pq.put(span(0, 9))
    batch = pq.take(3)
    assert [m.queue_offset for m in batch] == [0, 1, 2]
    assert pq.count == 10  # taken messages are still held until committed
    assert pq.committable_offset == 0
    assert pq.commit() == 3
    assert (pq.count, pq.size_bytes) == (7, 7)
    assert pq.commit() == -1  # nothing taken
    assert [m.queue_offset for m in pq.take(100)] == list(range(3, 10))
    assert pq.commit() == 10
    assert pq.count == 0 and pq.committable_offset == 10


def test_orderly_suspend_puts_messages_back_first(pq: ProcessQueue[Msg]) -> None:
    pq.put(span(0, 5))
    batch = pq.take(2)
    pq.make_available_again(batch)
    assert pq.count == 6  # no double counting
    assert [m.queue_offset for m in pq.take(3)] == [0, 1, 2]
    assert pq.commit() == 3
    assert pq.count == 3


def test_orderly_suspend_part_of_a_batch(pq: ProcessQueue[Msg]) -> None:
    pq.put(span(0, 3))
    batch = pq.take(4)
    pq.make_available_again(batch[2:])
    assert pq.committable_offset == 0
    assert pq.commit() == 2
    assert [m.queue_offset for m in pq.take(10)] == [2, 3]


def test_take_needs_a_positive_batch(pq: ProcessQueue[Msg]) -> None:
    with pytest.raises(ValueError, match="0"):
        pq.take(0)


# ----------------------------------------------------------------------------- expiry and time


def test_expired_messages(pq: ProcessQueue[Msg], clock: ManualClock) -> None:
    timeout_ms = 15 * 60_000
    pq.put(span(0, 4))
    pq.mark_consume_start(msgs(0, 1), now_ms=clock.now_ms())
    clock.advance(60_000)
    pq.mark_consume_start(msgs(2))
    clock.advance(timeout_ms)
    assert [m.queue_offset for m in pq.expired(clock.now_ms(), timeout_ms)] == [0, 1]
    clock.advance(60_000)
    assert pq.expired(clock.now_ms(), timeout_ms - 1) == msgs(0, 1, 2)
    pq.remove(msgs(0))
    assert [m.queue_offset for m in pq.expired(clock.now_ms(), timeout_ms)] == [1, 2]
    assert pq.expired(clock.now_ms(), 10 * timeout_ms) == []


def test_pull_idle_expiry(pq: ProcessQueue[Msg], clock: ManualClock) -> None:
    assert not pq.is_pull_expired(clock.now_ms())
    clock.advance(PULL_MAX_IDLE_MS + 1)
    assert pq.is_pull_expired(clock.now_ms())
    pq.mark_pulled()
    assert pq.last_pull_ms == clock.now_ms()
    assert not pq.is_pull_expired(clock.now_ms())
    assert pq.is_pull_expired(clock.now_ms() + 11, max_idle_ms=10)


def test_lock_expiry(pq: ProcessQueue[Msg], clock: ManualClock) -> None:
    assert not pq.locked
    pq.set_locked(True)
    assert pq.locked and pq.last_lock_time_ms == clock.now_ms()
    clock.advance(REBALANCE_LOCK_MAX_LIVE_MS)
    assert not pq.is_lock_expired(clock.now_ms())
    clock.advance(1)
    assert pq.is_lock_expired(clock.now_ms())
    pq.set_locked(True, now_ms=clock.now_ms())
    assert not pq.is_lock_expired(clock.now_ms())
    pq.set_locked(False)
    assert not pq.locked


def test_last_consume_time_moves_on_remove_and_take(pq: ProcessQueue[Msg], clock: ManualClock) -> None:
    pq.put(span(0, 1))
    clock.advance(5)
    pq.remove(msgs(0))
    assert pq.last_consume_ms == clock.now_ms()
    clock.advance(5)
    pq.take(1)
    assert pq.last_consume_ms == clock.now_ms()


def test_drop_and_consume_lock(pq: ProcessQueue[Msg]) -> None:
    assert not pq.dropped
    with pq.consume_lock:
        # rebalance cannot drop the queue while a listener runs
        assert not pq.consume_lock.acquire(timeout=0.01)
    assert pq.consume_lock.acquire(timeout=0.01)
    pq.drop()
    pq.consume_lock.release()
    pq.drop()
    assert pq.dropped


# ------------------------------------------------------------------------------ threads


def test_concurrent_put_and_remove(pq: ProcessQueue[Msg]) -> None:
    total = 5000
    pulled: list[list[Msg]] = []
    available = threading.Condition()
    errors: list[BaseException] = []

    def puller() -> None:
        try:
            for start in range(0, total, 32):
                batch = span(start, min(start + 31, total - 1))
                pq.put(batch)
                with available:
                    pulled.append(batch)
                    available.notify()
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    results: list[int] = []

    def consumer() -> None:
        try:
            done = 0
            rng = random.Random(11)
            while done < total:
                with available:
                    available.wait_for(lambda: pulled, timeout=5)
                    batch = list(pulled.pop(0))
                rng.shuffle(batch)  # consume tasks finish out of order
                for message in batch:
                    results.append(pq.remove([message]))
                done += len(batch)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=puller), threading.Thread(target=consumer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors
    assert results[-1] == total
    assert results == sorted(results)  # the committable offset never moves back
    assert (pq.count, pq.size_bytes, pq.span) == (0, 0, 0)


@pytest.mark.parametrize("seed", range(30))
def test_bulk_and_single_paths_agree_with_a_plain_model(seed: int) -> None:
    """Puts of whole ascending pulls and removals of the oldest messages take bulk paths; any
    other shape (overlaps, repeats, gaps, removals out of order or of messages not held) takes
    the per-message one. Either way count, size, span and the committable offset are what a
    plain set of held offsets says."""
    rng = random.Random(seed)
    pq: ProcessQueue[Msg] = ProcessQueue()
    held: dict[int, int] = {}  # offset -> body size
    most = -1
    next_offset = 0
    for _ in range(300):
        if rng.random() < 0.5:
            if rng.random() < 0.7:  # the next pull
                batch = [
                    Msg(o, b"x" * rng.randrange(0, 5))
                    for o in range(next_offset, next_offset + rng.randrange(1, 40))
                ]
            else:  # overlaps, repeats, out of order
                batch = [
                    Msg(rng.randrange(0, next_offset + 20), b"y" * rng.randrange(0, 5))
                    for _ in range(rng.randrange(1, 10))
                ]
            pq.put(batch)
            for m in batch:
                held.setdefault(m.queue_offset, len(m.body))
                most = max(most, m.queue_offset)
            next_offset = max(next_offset, most + 1)
        elif held:
            ordered = sorted(held)
            if rng.random() < 0.6:  # the oldest, in order
                gone = ordered[: rng.randrange(1, len(ordered) + 1)]
            else:
                gone = rng.sample(range(0, next_offset + 5), rng.randrange(1, 10))
            offset = pq.remove([Msg(o) for o in gone])
            for o in gone:
                held.pop(o, None)
            expected = min(held) if held else most + 1
            assert offset == expected
        assert pq.count == len(held)
        assert pq.size_bytes == sum(held.values())
        assert pq.span == (max(held) - min(held) if held else 0)
        assert pq.committable_offset == (min(held) if held else most + 1 if most >= 0 else -1)
