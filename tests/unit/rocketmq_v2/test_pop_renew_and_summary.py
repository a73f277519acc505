"""POP state: a renewal (what the proxy does for auto-renewed push-consumer messages) keeps the
delivery's lease, so the client's receipt handle still acks it, and survives a replay; a
client's own change of invisibility still replaces the lease. The per-queue summary is what
``orbitmq admin group progress`` shows of a POP group."""

from __future__ import annotations

from orbitmq.broker.pop import records
from orbitmq.broker.pop.state import AckOutcome, Delivered, PopKey, PopState, QueueSummary

KEY = PopKey("group-a", "Orders", 0)
NOW = 1_700_000_000_000
INVISIBLE = 30_000


def _deliver(state: PopState, n: int, max_offset: int = 10) -> dict[int, int]:
    plan = state.plan(KEY, NOW, n, max_offset, fifo=False, max_attempts=3)
    record = state.deliver(KEY, plan.offsets, NOW, INVISIBLE)
    return {offset: lease for offset, _, lease in record.entries}


def test_a_renewal_keeps_the_lease_and_the_handle_acks_after_it() -> None:
    state = PopState()
    leases = _deliver(state, 1)
    outcome, renewed = state.change_invisible(KEY, 0, leases[0], NOW + 20_000, INVISIBLE, renew=True)
    assert outcome is AckOutcome.ACKED and renewed is not None and renewed.lease == leases[0]
    later = NOW + INVISIBLE + 10_000  # past the first deadline, within the renewed one
    assert state.plan(KEY, later, 1, 1, fifo=False, max_attempts=3).offsets == ()
    delivered = Delivered(KEY, ((0, 1, leases[0]),), NOW + INVISIBLE)
    replayed = records.replay([records.encode(r) for r in (delivered, renewed)])
    assert replayed.queue(KEY).in_flight == state.queue(KEY).in_flight
    assert state.ack(KEY, 0, leases[0])[0] is AckOutcome.ACKED


def test_a_clients_change_of_invisibility_replaces_the_lease() -> None:
    state = PopState()
    leases = _deliver(state, 1)
    _, changed = state.change_invisible(KEY, 0, leases[0], NOW, INVISIBLE)
    assert changed is not None and changed.lease != leases[0]
    assert state.ack(KEY, 0, leases[0])[0] is AckOutcome.STALE


def test_summary_counts_in_flight_expired_and_the_consume_offset() -> None:
    state = PopState()
    assert state.summary(KEY, NOW) is None
    leases = _deliver(state, 4)
    state.ack(KEY, 0, leases[0])
    state.ack(KEY, 2, leases[2])
    state.change_invisible(KEY, 3, leases[3], NOW, 1_000)
    assert state.summary(KEY, NOW + 5_000) == QueueSummary(
        consume_offset=1, delivered_offset=4, in_flight=2, expired=1, done_above=1
    )
    assert state.topics_of("group-a") == {"Orders"} and state.topics_of("group-b") == set()
