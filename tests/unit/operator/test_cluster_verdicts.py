"""Every reason a cluster's conditions can give, which one wins when several apply, and how
``observedGeneration`` and ``lastTransitionTime`` follow (a condition whose status does not
flip keeps its time, even when its reason changes)."""

from __future__ import annotations

import pytest

from orbitmq_operator.builders import Cluster
from orbitmq_operator.builders.drain import DrainDecision, DrainStep
from orbitmq_operator.reconcile.cluster_status import (
    MemberState,
    Observed,
    ObservedGroup,
    apply_failed_status,
    cluster_status,
    invalid_status,
    verdicts,
)
from orbitmq_operator.reconcile.conditions import Reason
from orbitmq_operator.spec import ClusterSpec

T0, T1, T2 = "2025-01-01T00:00:00Z", "2025-01-01T00:05:00Z", "2025-01-01T00:10:00Z"

WAIT = DrainDecision("demo-broker-2", DrainStep.WAIT, "demo-broker-2 draining: Billing/Orders 12", 12)
REMOVE = DrainDecision("demo-broker-4", DrainStep.REMOVE, "demo-broker-4 drained: no backlog")
"""Drained, left for the next reconcile (one group is removed per reconcile)."""
STUCK = DrainDecision("demo-broker-3", DrainStep.STUCK, "demo-broker-3 not drained: Audit/Orders 3", 3)


def cluster(groups: int = 2, generation: int = 3) -> Cluster:
    spec = ClusterSpec.model_validate({"image": "orbitmq:test", "brokers": {"groups": groups}})
    return Cluster("demo", "ns", "uid-1", spec, generation)


def group(index: int, ready: int = 2, writable: bool = True) -> ObservedGroup:
    members = (MemberState(f"demo-broker-{index}-0", "SYNC_MASTER", 1, writable),) if writable else ()
    return ObservedGroup(f"demo-broker-{index}", 2, ready, members)


def observed(
    namesrv_ready: int = 2, groups: tuple[ObservedGroup, ...] | None = None, **more: object
) -> Observed:
    return Observed(2, namesrv_ready, (group(0), group(1)) if groups is None else groups, **more)  # type: ignore[arg-type]


def triple(found: list) -> tuple[tuple[str, bool | None], ...]:
    """(reason, status) of Ready, Progressing, Degraded."""
    by_type = {v.type.value: v for v in found}
    return tuple((by_type[t].reason.value, by_type[t].status) for t in ("Ready", "Progressing", "Degraded"))


def by_type(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status["conditions"]}


@pytest.mark.parametrize(
    ("seen", "reason", "ready", "progressing", "degraded"),
    [
        pytest.param(observed(), Reason.RECONCILED, True, False, False, id="reconciled"),
        pytest.param(
            observed(groups=(group(0), group(1, writable=False))),
            Reason.BROKERS_NOT_READY,
            False,
            True,
            False,
            id="a-group-without-a-writable-master",
        ),
        pytest.param(observed(0), Reason.BROKERS_NOT_READY, False, True, False, id="no-name-server-ready"),
        pytest.param(
            observed(groups=(group(0), group(1, ready=1))),
            Reason.REPLICAS_NOT_READY,
            True,
            False,
            True,
            id="a-slave-not-ready",
        ),
        pytest.param(observed(1), Reason.REPLICAS_NOT_READY, True, False, True, id="a-name-server-not-ready"),
        pytest.param(
            observed(surplus_groups=(2,)), Reason.DRAIN_REQUIRED, True, False, True, id="drain-required"
        ),
        pytest.param(observed(drains=(WAIT,)), Reason.DRAINING, True, True, False, id="draining"),
        pytest.param(observed(drains=(STUCK,)), Reason.DRAIN_STUCK, True, False, True, id="drain-stuck"),
    ],
)
def test_each_reason_and_what_it_means(
    seen: Observed, reason: Reason, ready: bool, progressing: bool, degraded: bool
) -> None:
    assert triple(verdicts(cluster(), seen)) == ((reason, ready), (reason, progressing), (reason, degraded))


def test_the_messages_say_what_is_short() -> None:
    found = {v.type.value: v.message for v in verdicts(cluster(), observed(1, (group(0), group(1, ready=1))))}
    assert found["Degraded"] == "serving, with pods not ready: demo-broker-1 1/2, name servers 1/2"
    found = {v.type.value: v.message for v in verdicts(cluster(), observed(drains=(WAIT, STUCK)))}
    assert found["Degraded"] == STUCK.message, "only the stuck drains are named"
    found = {v.type.value: v.message for v in verdicts(cluster(), observed(drains=(WAIT, WAIT)))}
    assert found["Progressing"] == f"{WAIT.message}; {WAIT.message}"
    assert found["Degraded"] == "", "a condition that is False says nothing"


@pytest.mark.parametrize(
    ("seen", "reason"),
    [
        pytest.param(observed(0, drains=(STUCK,)), Reason.BROKERS_NOT_READY, id="not-ready-over-stuck"),
        pytest.param(observed(drains=(WAIT, STUCK)), Reason.DRAIN_STUCK, id="stuck-over-draining"),
        pytest.param(
            observed(drains=(WAIT,), surplus_groups=(3,)), Reason.DRAINING, id="draining-over-required"
        ),
        pytest.param(
            observed(groups=(group(0), group(1, ready=1)), surplus_groups=(2,)),
            Reason.DRAIN_REQUIRED,
            id="required-over-replicas",
        ),
        pytest.param(
            observed(groups=(group(0), group(1, ready=1)), drains=(WAIT,)),
            Reason.DRAINING,
            id="draining-over-replicas",
        ),
    ],
)
def test_the_reason_that_wins_when_several_apply(seen: Observed, reason: Reason) -> None:
    assert {v.reason for v in verdicts(cluster(), seen)} == {reason}


def test_a_drained_group_waiting_for_its_removal_is_not_a_drain_to_report() -> None:
    assert {v.reason for v in verdicts(cluster(), observed(drains=(REMOVE,)))} == {Reason.RECONCILED}
    assert {v.reason for v in verdicts(cluster(), observed(drains=(REMOVE, WAIT)))} == {Reason.DRAINING}


def test_a_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    draining = cluster_status(cluster(), observed(drains=(WAIT,)), None, T0)
    stuck = cluster_status(cluster(), observed(drains=(STUCK,)), draining, T1)
    ready, progressing, degraded = (by_type(stuck)[t] for t in ("Ready", "Progressing", "Degraded"))
    assert (ready["reason"], ready["status"], ready["lastTransitionTime"]) == ("DrainStuck", "True", T0)
    assert (progressing["status"], progressing["lastTransitionTime"]) == ("False", T1)
    assert (degraded["status"], degraded["lastTransitionTime"]) == ("True", T1)
    done = cluster_status(cluster(), observed(), stuck, T2)
    assert [by_type(done)[t]["lastTransitionTime"] for t in ("Ready", "Progressing", "Degraded")] == [
        T0,
        T1,
        T2,
    ]


def test_observed_generation_follows_the_spec_without_moving_transition_times() -> None:
    first = cluster_status(cluster(generation=3), observed(), None, T0)
    later = cluster_status(cluster(generation=4), observed(), first, T1)
    assert later["observedGeneration"] == 4
    assert {c["observedGeneration"] for c in later["conditions"]} == {4}
    assert {c["lastTransitionTime"] for c in later["conditions"]} == {T0}


def test_an_invalid_spec_keeps_the_last_good_status_and_moves_the_generation() -> None:
    good = cluster_status(cluster(generation=3), observed(), None, T0)
    status = invalid_status("spec.brokers.groups: must be at least 1", 4, good, T1)
    assert set(status) == {"observedGeneration", "conditions"}, "the groups' status is left as it was"
    ready, progressing, degraded = (by_type(status)[t] for t in ("Ready", "Progressing", "Degraded"))
    assert (ready["reason"], ready["status"], progressing["status"], degraded["status"]) == (
        "InvalidSpec",
        "False",
        "False",
        "True",
    )
    assert (ready["lastTransitionTime"], progressing["lastTransitionTime"]) == (T1, T0)
    assert status["observedGeneration"] == 4 and ready["observedGeneration"] == 4


def test_an_api_refusal_is_apply_failed_and_retried() -> None:
    good = cluster_status(cluster(generation=3), observed(), None, T0)
    status = apply_failed_status("the API server refused an object: quota", 5, good, T1)
    assert set(status) == {"observedGeneration", "conditions"}
    ready, progressing, degraded = (by_type(status)[t] for t in ("Ready", "Progressing", "Degraded"))
    assert (ready["reason"], ready["status"], progressing["status"], degraded["status"]) == (
        "ApplyFailed",
        "False",
        "True",
        "False",
    )
    assert "quota" in ready["message"] and degraded["message"] == ""
    assert (ready["lastTransitionTime"], degraded["lastTransitionTime"]) == (T1, T0)
    assert status["observedGeneration"] == 5 and ready["observedGeneration"] == 5
