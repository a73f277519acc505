"""The transactions checker on small hand-made histories: a committed transaction missing from
the live consumers or from a complete final read is reported; one a final read that stopped
short did not reach is not called missing from it (the check still fails on the short read)."""

from __future__ import annotations

from orbitmq.chaos.checkers import check_transactions
from orbitmq.chaos.history import Delivery, History, Outcome, Transaction


def _history() -> History:
    """t0 committed, t1 rolled back, t2 committed by a check-back: all seen as they should be."""
    history = History()
    history.transactions = [
        Transaction("t0", True, "commit", Outcome.ACKNOWLEDGED.value),
        Transaction("t1", False, "rollback", Outcome.ACKNOWLEDGED.value),
        Transaction("t2", True, "unknown", Outcome.ACKNOWLEDGED.value, checks=1),
    ]
    for offset, message_id in enumerate(("t0", "t2")):
        history.add_delivery(Delivery(message_id, "ChaosTxConsumer", 1.0 + offset, 0, offset))
    history.drained = [Delivery(m, "drain", 9.0, 0, n) for n, m in enumerate(("t0", "t2"))]
    return history


def test_all_or_nothing_passes_and_a_committed_transaction_missing_from_the_final_read_fails() -> None:
    assert check_transactions(_history()).ok
    history = _history()
    history.drained = history.drained[:1]
    check = check_transactions(history)
    assert not check.ok
    assert check.violations == [{"message_id": "t2", "committed_but_missing_from": "final drain"}]
    assert check.summary["committed_missing_stored"] == 1


def test_a_final_read_that_stopped_short_calls_nothing_missing_from_it() -> None:
    history = _history()
    history.drained = history.drained[:1]
    history.drain_complete = False
    check = check_transactions(history)
    assert not check.ok  # not judged: the read did not reach everything
    assert check.violations == []
    assert check.summary["committed_missing_stored"] is None
    assert check.summary["committed_missing_live"] == 0
