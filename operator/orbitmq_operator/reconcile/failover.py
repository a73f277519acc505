"""Failover of a cluster's broker groups from the operator: pods in, role changes out.

The decision and the role changes are :mod:`orbitmq.ha.group`'s, shared with the local
supervisor; this module only keeps one :class:`BrokerGroupFailover` per broker group in step
with the group's pods (a pod's name is the member's identity, its IP the address while it is
Running) and runs one step of each. Members keep their last observed state when a pod restarts
or moves, so the decision still knows a dead master's epoch; a member whose pod is gone for
good (a scaled-down ordinal) is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from orbitmq.ha import Policy
from orbitmq.ha.decision import Decision
from orbitmq.ha.group import BrokerGroupFailover, GroupMember
from orbitmq_operator.builders import names
from orbitmq_operator.reconcile.access import PLAINTEXT, Access

log = logging.getLogger(__name__)

STEP_INTERVAL_S = 0.5
"""How often each group is observed: far below any sensible detection window (>= 1 s)."""

GroupPods = Mapping[str, str | None]
"""``{pod name: pod IP, or None while the pod is not Running}`` of one broker group."""


def member_address(ip: str | None) -> str | None:
    return f"{ip}:{names.BROKER_PORT}" if ip else None


def sync_members(
    failover: BrokerGroupFailover, pods: GroupPods, group: str = "", access: Access = PLAINTEXT
) -> None:
    """Bring ``failover.members`` in line with ``pods``: new pods join, addresses follow the
    pods, members whose pod is gone leave (their state goes with them). With TLS a member is
    dialled at its pod IP, checked for its DNS name, and known to the others by that name."""
    known = {m.name: m for m in failover.members}
    failover.members = [known.get(pod) or GroupMember(pod, None) for pod in sorted(pods)]
    for member in failover.members:
        member.address = member_address(pods[member.name])
        member.server_name = access.broker_host(group, member.name)
        member.advertised = f"{member.server_name}:{names.BROKER_PORT}" if member.server_name else None


def wanted_groups(pods_by_group: Mapping[str, GroupPods], cluster: str, groups: int) -> dict[str, GroupPods]:
    """Only the groups the spec asks for: a surplus group is being drained (its writes are off,
    consumers read from its slave) or removed, and its pods terminate one by one as its
    StatefulSet goes, which would otherwise look like a dead master with a live slave."""
    wanted = {names.broker_group(cluster, n) for n in range(groups)}
    return {group: pods for group, pods in pods_by_group.items() if group in wanted}


@dataclass
class ClusterFailover:
    """The failover state of one cluster's groups, kept across steps (in the daemon's memo)."""

    groups: dict[str, BrokerGroupFailover] = field(default_factory=dict)

    def configure(
        self,
        pods_by_group: Mapping[str, GroupPods],
        master_role: str,
        policy: Policy,
        access: Access = PLAINTEXT,
    ) -> None:
        """Follow the spec (role, window), the cluster's access (TLS, credentials) and the
        pods; groups with no pod left are dropped."""
        for group in list(self.groups):
            if group not in pods_by_group:
                del self.groups[group]
        for group, pods in pods_by_group.items():
            failover = self.groups.get(group)
            if failover is None:
                failover = self.groups[group] = BrokerGroupFailover([], master_role, policy)
            failover.master_role, failover.policy = master_role, policy
            failover.tls, failover.credentials = access.tls, access.credentials
            sync_members(failover, pods, group, access)

    async def step(self, now_ms: int) -> dict[str, Decision]:
        """One observe-decide-act step of every group; the decisions that did something."""
        acted = {}
        for group, failover in sorted(self.groups.items()):
            decision = await failover.step(now_ms)
            if decision is not None and not decision.nothing:
                acted[group] = decision
        return acted
