"""The drain state machine of a surplus broker group: wait, remove, or stay stuck."""

from __future__ import annotations

from orbitmq_operator.builders.drain import DrainPolicy, DrainStep, decide_drain, describe_backlog

POLICY = DrainPolicy(timeout_s=600, grace_s=35)
LAG = {("Billing", "Orders"): 12, ("Audit", "Orders"): 3}


def test_backlog_left_waits_then_is_stuck_and_names_the_groups() -> None:
    waiting = decide_drain("demo-broker-1", 10, LAG, POLICY)
    assert (waiting.step, waiting.lag) == (DrainStep.WAIT, 15)
    assert "Billing/Orders 12, Audit/Orders 3" in waiting.message
    stuck = decide_drain("demo-broker-1", 600, LAG, POLICY)
    assert stuck.step is DrainStep.STUCK
    assert "Billing/Orders 12" in stuck.message and "nothing deleted" in stuck.message


def test_empty_backlog_removes_only_after_the_route_refresh_grace() -> None:
    assert decide_drain("g", 5, {}, POLICY).step is DrainStep.WAIT
    assert decide_drain("g", 35, {}, POLICY).step is DrainStep.REMOVE
    assert decide_drain("g", 5000, {}, POLICY).step is DrainStep.REMOVE, "late is not stuck"


def test_unreadable_backlog_never_counts_as_drained() -> None:
    waiting = decide_drain("g", 100, None, POLICY, "no master registered")
    assert waiting.step is DrainStep.WAIT and "no master registered" in waiting.message
    assert decide_drain("g", 600, None, POLICY).step is DrainStep.STUCK


def test_discard_after_timeout_removes_with_the_loss_said() -> None:
    policy = DrainPolicy(timeout_s=600, discard_after_timeout=True)
    assert decide_drain("g", 599, LAG, policy).step is DrainStep.WAIT
    removed = decide_drain("g", 600, LAG, policy)
    assert removed.step is DrainStep.REMOVE and "losing 15 message(s)" in removed.message


def test_backlog_description_is_bounded() -> None:
    many = {(f"G{i}", "T"): i + 1 for i in range(8)}
    assert describe_backlog(many, limit=2) == "G7/T 8, G6/T 7 and 6 more"
