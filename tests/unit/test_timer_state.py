"""The timer's pure state: due order, the low-water mark over out-of-order deliveries, timer-log
records that round-trip, and a replay from the last checkpoint that restores exactly what was
delivered."""

from __future__ import annotations

import pytest

from orbitmq.broker.timer.state import TimerRecord, TimerRecordError, TimerState


def test_due_timers_come_out_earliest_first_and_never_before_their_time() -> None:
    state = TimerState()
    for offset, at in enumerate([300, 100, 200, 100]):
        assert state.add(offset, 1_000 + offset, 10, at)
    assert state.pop_due(99, 10, 1_000) == []
    assert [e[1] for e in state.pop_due(200, 10, 1_000)] == [1, 3, 2]  # ties in queue order
    assert state.next_due_ms() == 300 and len(state) == 1


def test_a_batch_is_cut_by_count_and_bytes_but_always_takes_one() -> None:
    state = TimerState()
    for offset in range(5):
        state.add(offset, offset, 600, 0)
    assert len(state.pop_due(0, 3, 10_000)) == 3
    assert len(state.pop_due(0, 3, 100)) == 1  # bigger than the budget: alone
    state.put_back(state.pop_due(0, 10, 10_000))
    assert len(state) == 1


def test_low_water_mark_moves_only_over_a_delivered_prefix() -> None:
    state = TimerState()
    state.mark_done([1, 2, 5])
    assert (state.low, state.done) == (0, {1, 2, 5})
    state.mark_done([0])
    assert (state.low, state.done) == (3, {5})
    assert not state.add(2, 0, 1, 0) and not state.add(5, 0, 1, 0)  # delivered: not pending again
    assert state.add(6, 0, 1, 0) and len(state) == 1


def test_records_round_trip_as_compact_runs() -> None:
    batch = TimerRecord((7, 3, 4, 5, 100))
    assert TimerRecord.decode(batch.encode()) == TimerRecord((3, 4, 5, 7, 100))
    checkpoint = TimerRecord(tuple(range(1_000, 11_000)), low=900)
    encoded = checkpoint.encode()
    assert len(encoded) < 40  # ten thousand offsets in one run
    assert TimerRecord.decode(encoded) == checkpoint


@pytest.mark.parametrize(
    "body", [b"", b"[]", b'{"done": [1]}', b'{"done": [-1, 2]}', b'{"low": "x", "done": []}']
)
def test_a_malformed_record_is_named(body: bytes) -> None:
    with pytest.raises(TimerRecordError, match=r"timer-log record .* is malformed"):
        TimerRecord.decode(body)


def test_replay_starts_at_the_last_checkpoint_and_applies_later_batches() -> None:
    live = TimerState()
    for offset, at in enumerate([50, 10, 40, 20, 30]):
        live.add(offset, offset, 1, at)
    records = []
    first = [e[1] for e in live.pop_due(20, 10, 100)]  # offsets 1, 3
    records.append(TimerRecord(tuple(first)))
    live.mark_done(first)
    second = [e[1] for e in live.pop_due(30, 10, 100)]  # offset 4
    records.append(live.checkpoint_with(second))
    live.mark_done(second)
    third = [e[1] for e in live.pop_due(40, 10, 100)]  # offset 2
    records.append(TimerRecord(tuple(third)))
    live.mark_done(third)

    restored = TimerState.replay(records[1:])  # a restart reads back to the checkpoint
    assert (restored.low, restored.done) == (live.low, live.done) == (0, {1, 2, 3, 4})
    for offset, at in enumerate([50, 10, 40, 20, 30]):
        restored.add(offset, offset, 1, at)
    assert [e[1] for e in restored.pop_due(1_000, 10, 100)] == [0]  # only the undelivered one
