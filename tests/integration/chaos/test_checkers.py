"""The chaos checkers on small hand-made histories: each guarantee's violation is reported,
and what the guarantees allow (re-delivery, unknown outcomes) is not."""

from __future__ import annotations

from orbitmq.chaos.checkers import (
    check_acknowledged_consumed,
    check_duplicates,
    check_order,
    check_recovery,
    check_unacknowledged,
)
from orbitmq.chaos.history import Delivery, FaultRecord, History, Outcome, Send


def _history() -> History:
    """Key k sends 0, 1, 2 (all acknowledged); m-unknown timed out and was never stored."""
    sends = [Send(f"o-{n}", "ordered", n, n + 0.1, Outcome.ACKNOWLEDGED, 0, n, "k", n) for n in range(3)]
    sends.append(Send("m-unknown", "sync", 1.0, 6.0, Outcome.UNKNOWN, error="DEADLINE_EXCEEDED"))
    history = History(sends=sends)
    history.faults.append(FaultRecord(1, "kill-master", "broker broker-a", 1, injected_at=0.5))
    for n in range(3):
        history.add_delivery(Delivery(f"o-{n}", "G", n + 0.2, 0, n, "k", n))
    history.drained = [Delivery(f"o-{n}", "drain", 9.0, 0, n, "k", n) for n in range(3)]
    return history


def test_a_clean_history_passes_and_an_unknown_send_is_not_loss() -> None:
    history = _history()
    assert check_acknowledged_consumed(history).ok
    assert check_order(history).ok
    unknown = check_unacknowledged(history)
    assert unknown.summary == {"unknown": {"messages": 1, "stored_anyway": 0}}
    recovery = check_recovery(history)
    assert recovery.ok
    assert recovery.summary["per_fault"] == [  # the first send started after 0.5 s: o-1, acked at 1.1
        {"round": 1, "fault": "kill-master", "target": "broker broker-a", "writes_s": 0.6, "caught_up_s": 0.7}
    ]


def test_a_lost_acknowledged_message_is_reported() -> None:
    history = _history()
    history.drained = [d for d in history.drained if d.message_id != "o-1"]
    check = check_acknowledged_consumed(history)
    assert not check.ok
    assert check.violations == [{"message_id": "o-1", "missing_from": "final drain"}]


def test_a_retired_groups_messages_need_only_the_live_consumers() -> None:
    """A group drained and removed (a Kubernetes scale-down) is nowhere to read after: its
    messages must have reached the live groups, the final read is not asked for them."""
    history = _history()
    history.sends[1].broker = "b1"
    history.drained = [d for d in history.drained if d.message_id != "o-1"]
    assert not check_acknowledged_consumed(history).ok
    history.retired_brokers.add("b1")
    assert check_acknowledged_consumed(history).ok
    history.deliveries = [d for d in history.deliveries if d.message_id != "o-1"]
    check = check_acknowledged_consumed(history)
    assert not check.ok
    assert check.violations == [{"message_id": "o-1", "missing_from": "live consumers"}]


def test_a_fault_of_one_group_recovers_with_that_groups_writes() -> None:
    """With two broker groups, the other group's writes never stopped: a fault that names its
    group recovers when that group acknowledges again."""
    history = _history()
    for send in history.sends:
        send.broker = "b1"
    history.sends.append(Send("s-b0", "sync", 2.0, 2.5, Outcome.ACKNOWLEDGED, 0, 0, broker="b0"))
    history.add_delivery(Delivery("s-b0", "G", 2.6, 0, 0))
    assert check_recovery(history).summary["per_fault"][0]["writes_s"] == 0.6  # type: ignore[index]
    history.faults[0].group = "b0"
    row = check_recovery(history).summary["per_fault"][0]  # type: ignore[index]
    assert (row["writes_s"], row["caught_up_s"]) == (2.0, 2.1)


def test_a_reordering_is_reported_and_a_rewind_is_a_duplicate_not_a_reordering() -> None:
    history = _history()
    history.add_delivery(Delivery("o-1", "G", 3.0, 0, 1, "k", 1))  # re-delivered after a rebalance
    assert check_order(history).ok
    duplicates = check_duplicates(history).summary["G"]  # 1 fault x 3.5 s x 3 messages / 2.8 s, + 1
    assert duplicates == {"deliveries": 4, "unique": 3, "redelivered": 1, "bound": 4, "second_copies": 0}  # type: ignore[comparison-overlap]

    history.deliveries[0], history.deliveries[1] = history.deliveries[1], history.deliveries[0]
    check = check_order(history)
    assert not check.ok
    assert [(v["seq"], v["after"]) for v in check.violations] == [(0, 1)]


def test_a_fault_writes_never_recovered_from_fails_recovery() -> None:
    history = _history()
    history.faults.append(FaultRecord(2, "pause-slave", "broker broker-a-s1", 2, injected_at=5.0))
    check = check_recovery(history)
    assert not check.ok
    assert check.violations[0]["never_recovered"]["round"] == 2  # type: ignore[index]


def test_a_resent_copy_is_not_a_redelivery_and_redeliveries_beyond_the_bound_fail() -> None:
    history = _history()
    history.add_delivery(Delivery("o-2", "G", 2.5, 0, 3, "k", 2))  # its resend, stored at offset 3
    summary = check_duplicates(history).summary["G"]
    assert (summary["redelivered"], summary["second_copies"]) == (0, 1)  # type: ignore[index]

    for _ in range(10):  # the group rewound to offset 0 again and again: more than 3.5 s a fault
        history.add_delivery(Delivery("o-0", "G", 2.6, 0, 0, "k", 0))
    check = check_duplicates(history)
    assert not check.ok
    assert check.summary["G"]["redelivered"] == 10  # type: ignore[index]


def test_a_refused_send_found_stored_fails_and_an_unknown_one_does_not() -> None:
    history = _history()
    history.sends.append(Send("m-refused", "sync", 2.0, 2.1, Outcome.FAILED, error="RpcFailure: DISK_FULL"))
    assert check_unacknowledged(history).ok
    history.drained.append(Delivery("m-refused", "drain", 9.0, 1, 0))
    history.drained.append(Delivery("m-unknown", "drain", 9.0, 1, 1))
    check = check_unacknowledged(history)
    assert not check.ok
    assert check.violations == [{"message_id": "m-refused", "refused_but_stored": True}]
    assert check.summary["unknown"] == {"messages": 1, "stored_anyway": 1}


def test_a_message_lost_before_a_fault_leaves_that_faults_recovery_time() -> None:
    history = _history()
    history.sends.insert(0, Send("m-lost", "sync", 0.1, 0.2, Outcome.ACKNOWLEDGED, 1, 0))
    check = check_recovery(history)
    assert check.ok  # the loss is check_acknowledged_consumed's to report
    assert check.summary["per_fault"][0]["caught_up_s"] == 0.7  # type: ignore[index]
    assert not check_acknowledged_consumed(history).ok
