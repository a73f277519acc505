"""A cluster's status from what was observed of it: pure, so every verdict is unit-tested.

The reconciler gathers an :class:`Observed` (StatefulSets' ready replicas from the API, each
broker pod's ``GetHaState`` answer when it is reachable) and :func:`cluster_status` turns it
into ``status``. A broker group counts as ready only when a member answers as a writable
master: a pod the kubelet calls ready but whose broker does not answer (or answers as a slave)
serves nobody, so ``Ready`` never claims more than clients can get.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orbitmq_operator.builders import Cluster, namesrv_address, proxy_address
from orbitmq_operator.builders.drain import DrainDecision, DrainStep
from orbitmq_operator.builders.rolling import RollDecision
from orbitmq_operator.reconcile import conditions
from orbitmq_operator.reconcile.conditions import Reason, Verdict


@dataclass(frozen=True)
class MemberState:
    """One broker pod's answer to ``GetHaState``."""

    pod: str
    role: str
    """``SYNC_MASTER``, ``ASYNC_MASTER`` or ``SLAVE``."""
    epoch: int
    writable: bool


@dataclass(frozen=True)
class ObservedGroup:
    name: str
    replicas: int
    """Pods the StatefulSet wants (``1 + slavesPerGroup``)."""
    ready_replicas: int
    members: Sequence[MemberState] = ()
    """The members that answered; empty when none is reachable (or none runs)."""

    def master(self) -> MemberState | None:
        """The master of the newest epoch among those that answered."""
        masters = [m for m in self.members if m.role != "SLAVE"]
        return max(masters, key=lambda m: m.epoch, default=None)


@dataclass(frozen=True)
class Observed:
    namesrv_replicas: int
    namesrv_ready: int
    groups: Sequence[ObservedGroup]
    surplus_groups: Sequence[int] = field(default_factory=tuple)
    """Broker groups beyond ``spec.brokers.groups`` kept without a drain (no name servers)."""
    drains: Sequence[DrainDecision] = field(default_factory=tuple)
    """Groups being drained, and what the drain decided this time."""
    rolls: Sequence[RollDecision] = field(default_factory=tuple)
    """Groups whose pods are not all at their StatefulSet's update revision, and the step taken."""
    proxy_replicas: int = 0
    proxy_ready: int = 0


def group_status(group: ObservedGroup) -> dict[str, Any]:
    master = group.master()
    return {
        "name": group.name,
        "master": master.pod if master else "",
        "epoch": max((m.epoch for m in group.members), default=0),
        "replicasReady": group.ready_replicas,
        "writable": bool(master and master.writable),
    }


def verdicts(cluster: Cluster, observed: Observed) -> list[Verdict]:
    """Ready when every name server is ready and every group has a writable master; degraded
    when serving short of the spec (a slave not ready, surplus groups waiting for a drain)."""
    not_writable = [g.name for g in observed.groups if not group_status(g)["writable"]]
    if observed.namesrv_ready < 1 or not_writable:
        parts = []
        if not_writable:
            parts.append(
                f"no writable master in broker group(s) {', '.join(not_writable)} "
                "(pods starting, brokers not answering GetHaState, or a failover under way)"
            )
        parts.append(f"{observed.namesrv_ready}/{observed.namesrv_replicas} name servers ready")
        return conditions.waiting(Reason.BROKERS_NOT_READY, "; ".join(parts))
    stuck = [d.message for d in observed.drains if d.step is DrainStep.STUCK]
    if stuck:
        return conditions.degraded(Reason.DRAIN_STUCK, "; ".join(stuck))
    waiting = [d.message for d in observed.drains if d.step is DrainStep.WAIT]
    if waiting:
        return conditions.progressing(Reason.DRAINING, "; ".join(waiting))
    if observed.rolls:
        return conditions.progressing(Reason.ROLLING_UPDATE, "; ".join(r.message for r in observed.rolls))
    if observed.surplus_groups:
        groups = ", ".join(str(g) for g in observed.surplus_groups)
        return conditions.degraded(
            Reason.DRAIN_REQUIRED,
            f"broker group(s) {groups} are beyond spec.brokers.groups={cluster.spec.brokers.groups}; "
            "they keep running (with their messages) until drained and removed by hand, or until "
            "spec.brokers.groups is raised again",
        )
    short = [
        f"{g.name} {g.ready_replicas}/{g.replicas}" for g in observed.groups if g.ready_replicas < g.replicas
    ]
    if observed.namesrv_ready < observed.namesrv_replicas:
        short.append(f"name servers {observed.namesrv_ready}/{observed.namesrv_replicas}")
    if observed.proxy_ready < observed.proxy_replicas:
        short.append(f"proxies {observed.proxy_ready}/{observed.proxy_replicas}")
    if short:
        message = f"serving, with pods not ready: {', '.join(short)}"
        return conditions.degraded(Reason.REPLICAS_NOT_READY, message)
    writable = len(observed.groups)
    message = f"{writable} broker group(s) writable, {observed.namesrv_ready} name server(s) ready"
    if observed.proxy_replicas:
        message += f", {observed.proxy_ready} proxy(ies) ready"
    return conditions.ready(Reason.RECONCILED, message)


def cluster_status(
    cluster: Cluster, observed: Observed, previous: Mapping[str, Any] | None, now: str
) -> dict[str, Any]:
    """The whole ``status`` of an applied cluster (camelCase, as the CRD stores it)."""
    groups = [group_status(g) for g in observed.groups]
    return {
        **conditions.generation_status(verdicts(cluster, observed), cluster.generation, previous, now),
        "nameServersReady": observed.namesrv_ready,
        "brokerGroupsReady": sum(1 for g in groups if g["writable"]),
        "brokerGroups": groups,
        "namesrvAddress": namesrv_address(cluster),
        "proxiesReady": observed.proxy_ready,
        "proxyAddress": proxy_address(cluster),
    }


def invalid_status(
    message: str, generation: int, previous: Mapping[str, Any] | None, now: str
) -> dict[str, Any]:
    """A spec the operator refuses: the conditions say why; the rest of the status (the groups
    of the last good spec, still running) is left as it was."""
    return conditions.generation_status(
        conditions.refused(Reason.INVALID_SPEC, message), generation, previous, now
    )


def apply_failed_status(
    message: str, generation: int, previous: Mapping[str, Any] | None, now: str
) -> dict[str, Any]:
    """The API server refused an object: retried (``Progressing``), the rest of the status as
    it was."""
    return conditions.generation_status(
        conditions.waiting(Reason.APPLY_FAILED, message), generation, previous, now
    )
