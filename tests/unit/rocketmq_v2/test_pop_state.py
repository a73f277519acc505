"""The broker's POP state (what ReceiveMessage, AckMessage and ChangeInvisibleDuration need),
as a pure model: invisibility, attempts, dead letters, FIFO blocking, stale receipt handles,
and a replay of its records that rebuilds exactly the state that was served."""

from __future__ import annotations

import random

import pytest

from orbitmq.broker.pop import records
from orbitmq.broker.pop.handles import InvalidReceiptHandle, ReceiptHandle
from orbitmq.broker.pop.state import AckOutcome, Delivered, PopKey, PopState

KEY = PopKey("group-a", "Orders", 0)
NOW = 1_700_000_000_000
INVISIBLE = 30_000


def _receive(
    state: PopState, now: int, n: int, max_offset: int = 100, *, fifo: bool = False, attempts: int = 3
):
    plan = state.plan(KEY, now, n, max_offset, fifo=fifo, max_attempts=attempts)
    record = state.deliver(KEY, plan.offsets, now, INVISIBLE)
    return plan, {offset: lease for offset, _, lease in record.entries}


def test_received_messages_are_invisible_until_acked_or_expired() -> None:
    state = PopState()
    plan, leases = _receive(state, NOW, 3)
    assert plan.new == (0, 1, 2) and plan.redeliver == ()
    assert state.in_flight_count(KEY) == 3
    again, _ = _receive(state, NOW + 1, 3, max_offset=4)
    assert again.offsets == (3,), "in-flight messages must not be handed out twice"
    assert state.ack(KEY, 1, leases[1])[0] is AckOutcome.ACKED
    assert state.queue(KEY).floor == 0, "offset 0 is not acked yet"
    state.ack(KEY, 0, leases[0])
    assert state.queue(KEY).floor == 2, "the consumer offset moves over contiguous acks"


def test_an_expired_message_is_delivered_again_with_its_attempt_counted() -> None:
    state = PopState()
    _, first = _receive(state, NOW, 1, max_offset=1)
    assert _receive(state, NOW + INVISIBLE - 1, 1, max_offset=1)[0].offsets == ()
    plan, second = _receive(state, NOW + INVISIBLE, 1, max_offset=1)
    assert plan.redeliver == (0,)
    assert state.queue(KEY).in_flight[0].attempt == 2
    assert state.ack(KEY, 0, first[0])[0] is AckOutcome.STALE, "the first handle was superseded"
    assert state.ack(KEY, 0, second[0])[0] is AckOutcome.ACKED
    assert state.ack(KEY, 0, second[0])[0] is AckOutcome.ALREADY_DONE, "a repeated ack is harmless"


def test_past_the_maximum_attempts_a_message_is_for_the_dead_letter_topic() -> None:
    state = PopState()
    now = NOW
    for attempt in (1, 2):
        _receive(state, now, 1, max_offset=1, attempts=2)
        assert state.queue(KEY).in_flight[0].attempt == attempt
        now += INVISIBLE
    plan = state.plan(KEY, now, 1, 1, fifo=False, max_attempts=2)
    assert plan.dead == (0,) and plan.offsets == ()
    state.dead_letter(KEY, 0)
    assert state.queue(KEY).floor == 1 and state.in_flight_count(KEY) == 0


def test_fifo_group_gets_the_next_message_only_after_the_previous_is_acked() -> None:
    state = PopState()
    plan, leases = _receive(state, NOW, 2, fifo=True)
    assert plan.new == (0, 1)
    assert _receive(state, NOW + 1, 2, fifo=True)[0].offsets == (), "blocked while invisible"
    state.ack(KEY, 0, leases[0])
    assert _receive(state, NOW + 2, 2, fifo=True)[0].offsets == (), "offset 1 is still in flight"
    state.ack(KEY, 1, leases[1])
    assert _receive(state, NOW + 3, 2, fifo=True)[0].new == (2, 3)


def test_fifo_group_gets_an_expired_message_again_before_anything_newer() -> None:
    state = PopState()
    _receive(state, NOW, 2, fifo=True)
    plan, _ = _receive(state, NOW + INVISIBLE, 5, fifo=True)
    assert (plan.redeliver, plan.new) == ((0, 1), ())


def test_change_invisible_duration_issues_a_new_lease_and_moves_the_deadline() -> None:
    state = PopState()
    _, leases = _receive(state, NOW, 1, max_offset=1)
    outcome, changed = state.change_invisible(KEY, 0, leases[0], NOW + 10, 60_000)
    assert outcome is AckOutcome.ACKED and changed is not None
    assert _receive(state, NOW + INVISIBLE, 1, max_offset=1)[0].offsets == (), "still invisible"
    assert state.ack(KEY, 0, leases[0])[0] is AckOutcome.STALE
    assert state.queue(KEY).in_flight[0].attempt == 1, "a change is not a delivery attempt"
    assert state.ack(KEY, 0, changed.lease)[0] is AckOutcome.ACKED


def test_acks_for_deliveries_that_never_happened_are_unknown() -> None:
    state = PopState()
    assert state.ack(KEY, 0, 1)[0] is AckOutcome.UNKNOWN
    _receive(state, NOW, 1, max_offset=1)
    assert state.ack(KEY, 5, 1)[0] is AckOutcome.UNKNOWN
    assert state.ack(PopKey("other", "Orders", 0), 0, 1)[0] is AckOutcome.UNKNOWN


def test_filtered_offsets_are_skipped_and_a_group_starts_at_its_offset() -> None:
    state = PopState()
    state.start_at(KEY, 10)
    state.skip(KEY, [10, 11])
    plan, _ = _receive(state, NOW, 2)
    assert plan.new == (12, 13)
    assert state.queue(KEY).floor == 12
    with pytest.raises(ValueError, match="frontier"):
        state.skip(KEY, [20])


def test_deliver_refuses_offsets_that_are_not_the_next_ones() -> None:
    state = PopState()
    with pytest.raises(ValueError, match="next undelivered one"):
        state.deliver(KEY, [3], NOW, INVISIBLE)


def test_replaying_the_records_rebuilds_the_served_state_also_from_a_snapshot() -> None:
    """What survives a restart or a failover: the state rebuilt from the POP log equals the
    state that answered the requests, so nothing acked comes back and nothing unacked is lost,
    and receipt handles issued before stay valid."""
    rng = random.Random(7)
    live = PopState()
    log: list[bytes] = []
    handles: dict[int, int] = {}
    now = NOW
    for step in range(400):
        now += rng.randint(0, 12_000)
        key = PopKey("g", "T", rng.randint(0, 1))
        action = rng.random()
        if action < 0.45:
            plan = live.plan(key, now, rng.randint(1, 4), 60, fifo=key.queue_id == 1, max_attempts=3)
            for offset in plan.dead:
                log.append(records.encode(live.dead_letter(key, offset)))
            if plan.offsets:
                record = live.deliver(key, plan.offsets, now, INVISIBLE)
                log.append(records.encode(record))
                handles.update({o * 10 + key.queue_id: lease for o, _, lease in record.entries})
        elif action < 0.8 and handles:
            slot = rng.choice(sorted(handles))
            _, acked = live.ack(PopKey("g", "T", slot % 10), slot // 10, handles[slot])
            if acked is not None:
                log.append(records.encode(acked))
        elif handles:
            slot = rng.choice(sorted(handles))
            _, changed = live.change_invisible(
                PopKey("g", "T", slot % 10), slot // 10, handles[slot], now, 5_000
            )
            if changed is not None:
                log.append(records.encode(changed))
                handles[slot] = changed.lease
        if step == 200:
            log.append(records.encode_snapshot(live))
    assert records.replay(log).snapshot() == live.snapshot()
    overlapping = [*log[:150], records.encode_snapshot(records.replay(log[:150])), *log[100:]]
    assert records.replay(overlapping).snapshot() == live.snapshot(), (
        "a replay overlapping a snapshot converges"
    )


def test_pop_log_records_and_receipt_handles_reject_what_they_did_not_write() -> None:
    record = Delivered(KEY, ((0, 1, 5),), NOW)
    assert records.decode(records.encode(record)) == record
    for bad in (b"", b"{}", b'{"v":1,"t":"Q"}', b'{"v":9,"t":"A"}', b'{"v":1,"t":"A","g":"g"}'):
        with pytest.raises(records.PopRecordError):
            records.decode(bad)
    handle = ReceiptHandle("broker:a", 3, 42, 7)
    assert ReceiptHandle.decode(handle.encode()) == handle
    for bad in ("", "broker-a:1:2", "broker-a:x:2:3", ":1:2:3"):
        with pytest.raises(InvalidReceiptHandle, match="orbitmq's form"):
            ReceiptHandle.decode(bad)
