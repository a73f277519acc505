"""The rolling update of one broker group as a pure decision (issue 14, item 5).

Broker StatefulSets use ``updateStrategy: OnDelete``: a changed pod template (image, resources,
the ``broker.yaml`` config hash) gives the StatefulSet a new ``updateRevision``, but each pod
keeps its old revision until somebody deletes it. The operator does, in an order that keeps the
group writable:

1. **slaves first**, one at a time, each only once every pod is Ready and every slave is in sync
   with the master again (a restarted slave copies what it missed before the next one goes);
2. then, with every slave at the new revision and in sync, a **planned switchover**: the master
   hands over to an in-sync slave (:meth:`orbitmq.ha.group.BrokerGroupFailover.switchover`)
   while it still runs, so producers only retry for the moment writes move;
3. then the **old master**, now a slave (its ``ha-role.json`` says so), is deleted like a slave.

A group without slaves has nobody to hand over to: its master is deleted, and the group is
unwritable while the pod restarts (the message says so). :func:`decide_roll` looks at what was
observed once and says what to do next; the reconciler acts and asks again on the next resync.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class RollStep(StrEnum):
    DONE = "Done"
    """Every pod runs the StatefulSet's update revision."""
    WAIT = "Wait"
    """A pod is missing, terminating, not Ready, not answering or not in sync: not now."""
    DELETE = "Delete"
    """Delete :attr:`RollDecision.pod` (a slave, or a master with no slave to hand over to)."""
    SWITCHOVER = "Switchover"
    """Move mastership off :attr:`RollDecision.pod` to an in-sync slave; delete it afterwards."""


@dataclass(frozen=True)
class PodState:
    """One broker pod of the group as observed for the roll."""

    name: str
    revision: str
    """Its ``controller-revision-hash`` label: the StatefulSet revision it was created from."""
    ready: bool
    """Running, Ready and not terminating."""
    role: str | None = None
    """``SYNC_MASTER``/``ASYNC_MASTER``/``SLAVE`` from ``GetHaState``; None when it did not answer."""
    in_sync: bool = False
    """For a slave: streaming from the master and (nearly) caught up with it."""

    @property
    def is_slave(self) -> bool:
        return self.role == "SLAVE"


@dataclass(frozen=True)
class RollDecision:
    group: str
    step: RollStep
    message: str
    pod: str = ""
    """The pod the step is about (to delete, to switch over from, or waited for)."""


def decide_roll(group: str, update_revision: str, replicas: int, pods: Sequence[PodState]) -> RollDecision:
    """What to do next to bring ``group``'s ``pods`` to ``update_revision``.

    ``replicas`` is how many pods the StatefulSet wants; an empty ``update_revision`` (the
    controller has not observed the StatefulSet yet) means wait.
    """
    stale = sorted((p for p in pods if p.revision != update_revision), key=lambda p: p.name)
    if update_revision and not stale:  # a missing pod comes back at the update revision
        return RollDecision(group, RollStep.DONE, f"{group}: every pod at revision {update_revision}")
    if not update_revision:
        return _wait(group, "", "the StatefulSet controller has not reported its update revision yet")
    if len(pods) < replicas:
        return _wait(group, "", f"{len(pods)}/{replicas} pods exist (one is being re-created)")
    for pod in sorted(pods, key=lambda p: p.name):
        if not pod.ready:
            return _wait(group, pod.name, f"{pod.name} is not Ready")
        if pod.role is None:
            return _wait(group, pod.name, f"{pod.name} does not answer GetHaState")
    masters = [p for p in pods if not p.is_slave]
    if len(masters) != 1:
        found = ", ".join(p.name for p in masters) or "none"
        return _wait(group, "", f"waiting for exactly one master (found: {found})")
    (master,) = masters
    slaves = [p for p in pods if p.is_slave]
    lagging = [p.name for p in slaves if not p.in_sync]
    if lagging:
        return _wait(group, lagging[0], f"{', '.join(lagging)} catching up with master {master.name}")
    stale_slaves = [p for p in stale if p.is_slave]
    if stale_slaves:
        pod = stale_slaves[0]
        left = len(stale) - 1
        message = f"{group}: restarting slave {pod.name} at revision {update_revision} ({left} more after it)"
        return RollDecision(group, RollStep.DELETE, message, pod.name)
    if not slaves:
        message = (
            f"{group}: restarting master {master.name} at revision {update_revision}; "
            "it has no slave to hand over to, so the group takes no writes until it is back"
        )
        return RollDecision(group, RollStep.DELETE, message, master.name)
    message = (
        f"{group}: switching master {master.name} over to an in-sync slave before it restarts "
        f"at revision {update_revision}"
    )
    return RollDecision(group, RollStep.SWITCHOVER, message, master.name)


def _wait(group: str, pod: str, why: str) -> RollDecision:
    return RollDecision(group, RollStep.WAIT, f"{group}: rolling update waits: {why}", pod)
