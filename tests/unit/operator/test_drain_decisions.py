"""The drain state machine of a surplus broker group: wait, remove, or stay stuck."""

from __future__ import annotations

from orbitmq_operator.builders.drain import (
    DELAYED_GROUP,
    DrainPolicy,
    DrainStep,
    decide_drain,
    describe_backlog,
    track_offline,
)

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


def test_a_group_without_consumers_is_waited_on_only_for_the_offline_grace() -> None:
    """A ``helm test`` group left with offsets on every queue: waited on while it may be a
    consumer between two pods, then ignored (named in the decision), so the drain ends."""
    policy = DrainPolicy(timeout_s=3600, grace_s=35, offline_grace_s=300)
    lag = {("mq-helm-test", "Orders"): 7}
    early = decide_drain("g", 100, lag, policy, offline_s={"mq-helm-test": 100})
    assert (early.step, early.ignored) == (DrainStep.WAIT, ())
    late = decide_drain("g", 400, lag, policy, offline_s={"mq-helm-test": 300})
    assert (late.step, late.ignored, late.lag) == (DrainStep.REMOVE, ("mq-helm-test",), 7)
    assert "not waiting on mq-helm-test" in late.message
    assert "drainOfflineGroupGraceS=300" in late.message and "lost with the group" in late.message


def test_groups_with_consumers_online_are_still_waited_on() -> None:
    policy = DrainPolicy(timeout_s=3600, offline_grace_s=300)
    decision = decide_drain("g", 900, LAG, policy, offline_s={"Audit": 900})
    assert (decision.step, decision.ignored, decision.lag) == (DrainStep.WAIT, ("Audit",), 15)
    assert "Billing/Orders 12" in decision.message and "not waiting on Audit" in decision.message
    stuck = decide_drain("g", 3600, LAG, policy, offline_s={"Audit": 3600})
    assert stuck.step is DrainStep.STUCK and "Billing/Orders 12" in stuck.message


def test_delayed_messages_are_never_ignored() -> None:
    policy = DrainPolicy(timeout_s=3600, offline_grace_s=0)
    delayed = {(DELAYED_GROUP, "SCHEDULE_TOPIC_XXXX"): 4}
    assert track_offline(delayed, online=set(), previous={}, stamp="t0") == {}
    decision = decide_drain("g", 100, delayed, policy, offline_s={DELAYED_GROUP: 100})
    assert (decision.step, decision.ignored) == (DrainStep.WAIT, ())


def test_offline_clock_starts_when_first_seen_and_restarts_after_a_consumer_returns() -> None:
    lag = {("Audit", "Orders"): 3, ("Billing", "Orders"): 1}
    first = track_offline(lag, online={"Billing"}, previous={}, stamp="t0")
    assert first == {"Audit": "t0"}
    assert track_offline(lag, online={"Billing"}, previous=first, stamp="t1") == {"Audit": "t0"}
    assert track_offline(lag, online={"Audit", "Billing"}, previous=first, stamp="t2") == {}
    assert track_offline({("Billing", "Orders"): 1}, online=(), previous=first, stamp="t3") == {
        "Billing": "t3"
    }, "a group with nothing left drops out; a newly offline one starts now"
    assert track_offline(None, online=(), previous=first, stamp="t4") == first, "unreadable: kept"


def test_the_delayed_pseudo_group_is_the_admin_clients() -> None:
    from orbitmq.client.admin import DELAYED

    assert DELAYED_GROUP == DELAYED
