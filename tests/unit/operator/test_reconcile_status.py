"""What a user reads in a cluster's status, from what the operator observed: conditions with
reasons, transition times that move only on a flip, each group's master, epoch, writability."""

from __future__ import annotations

import pytest

from orbitmq.v1 import broker_pb2
from orbitmq_operator.builders import Cluster
from orbitmq_operator.reconcile.cluster import member_state
from orbitmq_operator.reconcile.cluster_status import (
    MemberState,
    Observed,
    ObservedGroup,
    cluster_status,
    invalid_status,
)
from orbitmq_operator.spec import ClusterSpec

T0, T1 = "2025-01-01T00:00:00Z", "2025-01-01T00:05:00Z"


def cluster(groups: int = 2, generation: int = 3) -> Cluster:
    spec = ClusterSpec.model_validate({"image": "orbitmq:test", "brokers": {"groups": groups}})
    return Cluster("demo", "ns", "uid-1", spec, generation)


def by_type(status: dict) -> dict[str, dict]:
    return {c["type"]: c for c in status["conditions"]}


def group(index: int, ready: int = 2, *members: MemberState) -> ObservedGroup:
    return ObservedGroup(f"demo-broker-{index}", 2, ready, members)


MASTER = MemberState("demo-broker-0-0", "SYNC_MASTER", 1, True)
SLAVE = MemberState("demo-broker-0-1", "SLAVE", 1, False)


def healthy(index: int) -> ObservedGroup:
    return group(
        index,
        2,
        MemberState(f"demo-broker-{index}-0", "SYNC_MASTER", 1, True),
        MemberState(f"demo-broker-{index}-1", "SLAVE", 1, False),
    )


def test_nothing_answering_is_brokers_not_ready_and_progressing() -> None:
    observed = Observed(2, 0, (group(0, 0), group(1, 0)))
    status = cluster_status(cluster(), observed, None, T0)
    ready, progressing, degraded = (by_type(status)[t] for t in ("Ready", "Progressing", "Degraded"))
    assert (ready["status"], ready["reason"]) == ("False", "BrokersNotReady")
    assert "demo-broker-0, demo-broker-1" in ready["message"] and "0/2 name servers" in ready["message"]
    assert (progressing["status"], degraded["status"]) == ("True", "False")
    assert status["observedGeneration"] == 3 and ready["observedGeneration"] == 3
    assert status["brokerGroupsReady"] == 0
    assert status["namesrvAddress"] == "demo-namesrv.ns.svc:9876"


def test_pods_ready_but_no_broker_answering_is_not_ready() -> None:
    """kubelet readiness is not enough: a group serves only with a writable master."""
    status = cluster_status(cluster(1), Observed(2, 2, (group(0, 2),)), None, T0)
    assert by_type(status)["Ready"]["reason"] == "BrokersNotReady"
    assert status["brokerGroups"] == [
        {"name": "demo-broker-0", "master": "", "epoch": 0, "replicasReady": 2, "writable": False}
    ]


def test_every_group_writable_is_ready() -> None:
    status = cluster_status(cluster(), Observed(2, 2, (healthy(0), healthy(1))), None, T0)
    ready = by_type(status)["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "Reconciled")
    assert by_type(status)["Degraded"]["status"] == "False"
    assert status["brokerGroupsReady"] == 2
    assert status["brokerGroups"][0] == {
        "name": "demo-broker-0",
        "master": "demo-broker-0-0",
        "epoch": 1,
        "replicasReady": 2,
        "writable": True,
    }


def test_a_slave_down_is_ready_but_degraded() -> None:
    one_down = group(1, 1, MemberState("demo-broker-1-0", "ASYNC_MASTER", 0, True))
    status = cluster_status(cluster(), Observed(2, 2, (healthy(0), one_down)), None, T0)
    conditions = by_type(status)
    assert conditions["Ready"]["status"] == "True"
    assert (conditions["Degraded"]["status"], conditions["Degraded"]["reason"]) == (
        "True",
        "ReplicasNotReady",
    )
    assert "demo-broker-1 1/2" in conditions["Degraded"]["message"]


def test_surplus_groups_are_kept_and_reported() -> None:
    observed = Observed(2, 2, (healthy(0), healthy(1)), surplus_groups=(3, 2))
    degraded = by_type(cluster_status(cluster(), observed, None, T0))["Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", "DrainRequired")
    assert "3, 2" in degraded["message"] and "spec.brokers.groups=2" in degraded["message"]


def test_newest_epoch_master_wins_after_a_failover() -> None:
    old = MemberState("demo-broker-0-0", "SYNC_MASTER", 1, True)
    new = MemberState("demo-broker-0-1", "SYNC_MASTER", 2, True)
    status = cluster_status(cluster(1), Observed(1, 1, (group(0, 2, old, new),)), None, T0)
    assert status["brokerGroups"][0]["master"] == "demo-broker-0-1"
    assert status["brokerGroups"][0]["epoch"] == 2


def test_transition_time_moves_only_when_the_status_flips() -> None:
    waiting = cluster_status(cluster(1), Observed(1, 0, (group(0, 0),)), None, T0)
    again = cluster_status(cluster(1), Observed(1, 0, (group(0, 0),)), waiting, T1)
    assert again == waiting, "an unchanged cluster gives an equal status: nothing to write"
    up = cluster_status(cluster(1), Observed(1, 1, (healthy(0),)), waiting, T1)
    assert by_type(up)["Ready"]["lastTransitionTime"] == T1
    assert by_type(up)["Degraded"]["lastTransitionTime"] == T0, "Degraded stayed False"


def test_invalid_spec_names_the_field() -> None:
    status = invalid_status("spec.brokers.settings.listne: not a broker setting", 4, None, T0)
    ready = by_type(status)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "spec.brokers.settings.listne" in ready["message"]
    assert by_type(status)["Progressing"]["status"] == "False"
    assert status["observedGeneration"] == 4


@pytest.mark.parametrize(
    ("role", "slaves", "writable"),
    [("SYNC_MASTER", 1, True), ("SYNC_MASTER", 0, False), ("ASYNC_MASTER", 0, True), ("SLAVE", 0, False)],
)
def test_writable_means_a_send_can_be_acknowledged(role: str, slaves: int, writable: bool) -> None:
    state = broker_pb2.HaState(role=role, epoch=2, slaves=[broker_pb2.SlaveState()] * slaves)
    assert member_state("p", state) == MemberState("p", role, 2, writable)
