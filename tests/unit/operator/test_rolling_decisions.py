"""The rolling update of a broker group: slaves one at a time, then a switchover, then the old
master; never while a pod is down, unanswering or catching up."""

from __future__ import annotations

import dataclasses

import pytest

from orbitmq_operator.builders import Cluster
from orbitmq_operator.builders.rolling import PodState, RollDecision, RollStep, decide_roll
from orbitmq_operator.reconcile.cluster_status import MemberState, Observed, ObservedGroup, verdicts
from orbitmq_operator.reconcile.conditions import Reason
from orbitmq_operator.spec import ClusterSpec

NEW, OLD = "demo-broker-0-new", "demo-broker-0-old"
GROUP = "demo-broker-0"


def pod(
    ordinal: int, role: str, revision: str = OLD, *, ready: bool = True, in_sync: bool = True
) -> PodState:
    return PodState(f"{GROUP}-{ordinal}", revision, ready, role, in_sync if role == "SLAVE" else False)


def simulate(pods: list[PodState], replicas: int = 3, limit: int = 20) -> list[tuple[RollStep, str]]:
    """Carry the decisions out on ``pods`` the way the cluster would, until the roll is done."""
    steps: list[tuple[RollStep, str]] = []
    for _ in range(limit):
        decision = decide_roll(GROUP, NEW, replicas, pods)
        if decision.step is RollStep.DONE:
            return steps
        assert decision.step is not RollStep.WAIT, decision.message
        steps.append((decision.step, decision.pod))
        index = next(i for i, p in enumerate(pods) if p.name == decision.pod)
        if decision.step is RollStep.SWITCHOVER:
            chosen = next(i for i, p in enumerate(pods) if p.is_slave)
            pods[chosen] = dataclasses.replace(pods[chosen], role="SYNC_MASTER", in_sync=False)
            pods[index] = dataclasses.replace(pods[index], role="SLAVE", in_sync=True)
        else:  # deleted: back at the new revision, in its persisted role, caught up
            pods[index] = dataclasses.replace(pods[index], revision=NEW)
    raise AssertionError(f"no end after {steps}")


def test_slaves_go_first_one_at_a_time_then_a_switchover_then_the_old_master() -> None:
    pods = [pod(0, "SYNC_MASTER"), pod(1, "SLAVE"), pod(2, "SLAVE")]
    assert simulate(pods) == [
        (RollStep.DELETE, f"{GROUP}-1"),
        (RollStep.DELETE, f"{GROUP}-2"),
        (RollStep.SWITCHOVER, f"{GROUP}-0"),
        (RollStep.DELETE, f"{GROUP}-0"),
    ]
    assert decide_roll(GROUP, NEW, 3, pods).step is RollStep.DONE


def test_after_a_failover_the_master_may_be_any_ordinal() -> None:
    pods = [pod(0, "SLAVE"), pod(1, "ASYNC_MASTER")]
    assert simulate(pods, replicas=2) == [
        (RollStep.DELETE, f"{GROUP}-0"),
        (RollStep.SWITCHOVER, f"{GROUP}-1"),
        (RollStep.DELETE, f"{GROUP}-1"),
    ]


def test_a_master_without_slaves_is_restarted_and_the_message_says_it_stops_writes() -> None:
    decision = decide_roll(GROUP, NEW, 1, [pod(0, "SYNC_MASTER")])
    assert (decision.step, decision.pod) == (RollStep.DELETE, f"{GROUP}-0")
    assert "no slave" in decision.message


@pytest.mark.parametrize(
    ("pods", "waits_for"),
    [
        ([pod(0, "SYNC_MASTER"), pod(1, "SLAVE", NEW, ready=False)], f"{GROUP}-1 is not Ready"),
        ([pod(0, "SYNC_MASTER"), pod(1, "SLAVE", NEW, in_sync=False)], f"{GROUP}-1 catching up"),
        ([pod(0, "SYNC_MASTER"), PodState(f"{GROUP}-1", NEW, True)], "does not answer GetHaState"),
        ([pod(0, "SYNC_MASTER")], "1/2 pods exist"),
        ([pod(0, "SLAVE"), pod(1, "SLAVE")], "exactly one master (found: none)"),
        ([pod(0, "SYNC_MASTER"), pod(1, "SYNC_MASTER")], "exactly one master"),
    ],
)
def test_nothing_is_deleted_while_the_group_is_not_whole_and_in_sync(
    pods: list[PodState], waits_for: str
) -> None:
    decision = decide_roll(GROUP, NEW, 2, pods)
    assert decision.step is RollStep.WAIT and waits_for in decision.message, decision


def test_done_when_every_pod_is_at_the_update_revision_even_if_one_is_restarting() -> None:
    pods = [pod(0, "SYNC_MASTER", NEW), pod(1, "SLAVE", NEW, ready=False)]
    assert decide_roll(GROUP, NEW, 2, pods).step is RollStep.DONE
    assert decide_roll(GROUP, "", 2, pods).step is RollStep.WAIT, "no update revision reported yet"


def test_a_rolling_group_makes_the_cluster_progressing_with_the_pod_named() -> None:
    spec = ClusterSpec.model_validate({"image": "orbitmq:test", "brokers": {"groups": 1}})
    master = MemberState(f"{GROUP}-0", "SYNC_MASTER", 1, True)
    roll = RollDecision(GROUP, RollStep.DELETE, f"{GROUP}: restarting slave {GROUP}-1", f"{GROUP}-1")
    observed = Observed(1, 1, (ObservedGroup(GROUP, 2, 2, (master,)),), rolls=(roll,))
    progressing = next(
        v for v in verdicts(Cluster("demo", "ns", "uid", spec, 1), observed) if v.type == "Progressing"
    )
    assert progressing.status is True and progressing.reason is Reason.ROLLING_UPDATE
    assert f"{GROUP}-1" in progressing.message
