"""Rolling broker groups to their StatefulSet's update revision: the I/O around
:mod:`orbitmq_operator.builders.rolling`.

Each reconcile, for every broker group of the spec: read its StatefulSet's ``updateRevision``
(empty while the controller has not observed the latest generation), its pods' revisions and
readiness, and each Ready pod's ``GetHaState`` (a slave is in sync when the master reports it
streaming with little lag); ask :func:`~orbitmq_operator.builders.rolling.decide_roll`; do one
step: delete a pod, or switch the master over (``BrokerGroupFailover.switchover``) under the
cluster's HA lock, which the failover daemon holds for each of its steps: between the demotion
and the promotion the group has no master, and the daemon must not fail over into that gap.
The next step waits for the next reconcile, when the effect of this one can be observed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import grpc
from lightkube import ApiError, AsyncClient
from lightkube.resources.apps_v1 import StatefulSet
from lightkube.resources.core_v1 import Pod

from orbitmq.ha import Policy
from orbitmq.ha.group import SWITCHOVER_LAG_BYTES, BrokerGroupFailover, GroupMember, SwitchoverFailed
from orbitmq.v1 import broker_pb2, broker_pb2_grpc
from orbitmq_operator.builders import Cluster, names
from orbitmq_operator.builders.rolling import PodState, RollDecision, RollStep, decide_roll
from orbitmq_operator.reconcile.access import PLAINTEXT, Access

REVISION_LABEL = "controller-revision-hash"
HA_STATE_TIMEOUT_S = 1.0

AddressOf = Callable[[str, str], str]
"""``(pod name, pod IP) -> host:port`` of its broker; the pod IP and broker port by default."""


def pod_address(pod: str, ip: str) -> str:
    return f"{ip}:{names.BROKER_PORT}"


@dataclass
class RollOutcome:
    decisions: list[RollDecision] = field(default_factory=list)
    """Every group not at its update revision (done ones left out)."""
    events: list[tuple[str, str, bool]] = field(default_factory=list)
    """(reason, message, warning)."""


@dataclass(frozen=True)
class _GroupPods:
    update_revision: str
    replicas: int
    pods: list[PodState]
    addresses: dict[str, str]
    """Pod name -> broker address, for Ready pods."""


async def _ha_state(address: str, access: Access, server_name: str | None) -> broker_pb2.HaState | None:
    try:
        async with access.channel(address, server_name) as channel:
            return await broker_pb2_grpc.BrokerStub(channel).GetHaState(
                broker_pb2.GetHaStateRequest(), timeout=HA_STATE_TIMEOUT_S
            )
    except grpc.aio.AioRpcError:
        return None


def _known_as(access: Access, group: str, pod: str, addresses: dict[str, str]) -> str:
    """The address its master reports a slave pod by: its advertised DNS name with TLS, else
    the pod address the operator dials."""
    host = access.broker_host(group, pod)
    return f"{host}:{names.BROKER_PORT}" if host else addresses[pod]


def _is_ready(pod: Pod) -> bool:
    status = pod.status
    if status is None or status.phase != "Running" or pod.metadata.deletionTimestamp is not None:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in status.conditions or [])


async def observe_group(
    client: AsyncClient, cluster: Cluster, index: int, address_of: AddressOf, access: Access = PLAINTEXT
) -> _GroupPods:
    """The group's update revision, and its pods with revision, readiness, role and sync."""
    name = names.broker_group(cluster.name, index)
    sts = await client.get(StatefulSet, name, namespace=cluster.namespace)
    observed = sts.status is not None and (sts.status.observedGeneration or 0) >= (
        sts.metadata.generation or 0
    )
    update_revision = (sts.status.updateRevision or "") if observed and sts.status is not None else ""
    replicas = sts.spec.replicas if sts.spec is not None and sts.spec.replicas is not None else 1
    selector = names.selector_labels(cluster.name, names.BROKER, index)
    found = [pod async for pod in client.list(Pod, namespace=cluster.namespace, labels=selector)]
    addresses = {
        p.metadata.name: address_of(p.metadata.name, p.status.podIP)
        for p in found
        if _is_ready(p) and p.status is not None and p.status.podIP
    }
    revisions = {p.metadata.name: (p.metadata.labels or {}).get(REVISION_LABEL, "") for p in found}
    rolling = not update_revision or any(r != update_revision for r in revisions.values())
    asked = addresses if rolling else {}  # an up-to-date group costs no broker calls
    states = dict(
        zip(
            asked,
            await asyncio.gather(
                *(_ha_state(a, access, access.broker_host(name, p)) for p, a in asked.items())
            ),
            strict=True,
        )
    )
    master = next((s for s in states.values() if s is not None and s.role != "SLAVE"), None)
    streaming = {s.address for s in master.slaves if s.lag_bytes <= SWITCHOVER_LAG_BYTES} if master else set()
    pods = []
    for p in found:
        pod = p.metadata.name
        state = states.get(pod)
        pods.append(
            PodState(
                pod,
                revisions[pod],
                pod in addresses,
                state.role if state is not None else None,
                state is not None
                and state.role == "SLAVE"
                and _known_as(access, name, pod, addresses) in streaming,
            )
        )
    return _GroupPods(update_revision, replicas, pods, addresses)


async def reconcile_rolls(
    client: AsyncClient,
    cluster: Cluster,
    ha_lock: asyncio.Lock | None = None,
    address_of: AddressOf = pod_address,
    *,
    access: Access = PLAINTEXT,
) -> RollOutcome:
    """One step of the rolling update of every broker group of the spec."""
    outcome = RollOutcome()
    for index in range(cluster.spec.brokers.groups):
        group = names.broker_group(cluster.name, index)
        try:
            seen = await observe_group(client, cluster, index, address_of, access)
        except ApiError as error:
            if error.status.code == 404:
                continue  # not applied yet
            raise
        decision = decide_roll(group, seen.update_revision, seen.replicas, seen.pods)
        if decision.step is RollStep.DONE:
            continue
        if decision.step is RollStep.DELETE:
            try:
                await client.delete(Pod, decision.pod, namespace=cluster.namespace)
            except ApiError as error:
                if error.status.code != 404:  # already gone: the controller re-creates it anyway
                    raise
            outcome.events.append(("RollingUpdate", decision.message, False))
        elif decision.step is RollStep.SWITCHOVER:
            decision = await _switchover(cluster, decision, seen.addresses, ha_lock, outcome, access)
        outcome.decisions.append(decision)
    return outcome


async def _switchover(
    cluster: Cluster,
    decision: RollDecision,
    addresses: dict[str, str],
    ha_lock: asyncio.Lock | None,
    outcome: RollOutcome,
    access: Access,
) -> RollDecision:
    members = []
    for pod, address in sorted(addresses.items()):
        host = access.broker_host(decision.group, pod)
        advertised = f"{host}:{names.BROKER_PORT}" if host else None
        members.append(GroupMember(pod, address, server_name=host, advertised=advertised))
    failover = BrokerGroupFailover(
        members,
        cluster.spec.brokers.replication_mode.value,
        Policy(),
        credentials=access.credentials,
        tls=access.tls,
    )
    async with ha_lock if ha_lock is not None else contextlib.nullcontext():
        try:
            result = await failover.switchover(int(time.time() * 1000))
        except (SwitchoverFailed, grpc.aio.AioRpcError) as error:
            detail = error.details() if isinstance(error, grpc.aio.AioRpcError) else str(error)
            message = (
                f"{decision.group}: switchover from {decision.pod} failed, retried next resync: {detail}"
            )
            outcome.events.append(("SwitchoverFailed", message, True))
            return RollDecision(decision.group, RollStep.WAIT, message, decision.pod)
    if result is None or result.nothing or result.promote is None:
        why = result.reason if result is not None else "no broker answered"
        return RollDecision(
            decision.group, RollStep.WAIT, f"{decision.group}: switchover waits: {why}", decision.pod
        )
    message = (
        f"{decision.group}: {result.promote} is master under epoch {result.epoch}; "
        f"{decision.pod} is a slave now and restarts next"
    )
    outcome.events.append(("Switchover", message, False))
    return RollDecision(decision.group, RollStep.SWITCHOVER, message, decision.pod)


def rolling_status(decisions: Sequence[RollDecision]) -> list[dict[str, str]]:
    """``status.rollingUpdates``: each group still rolling, its step and the pod it is about."""
    return [{"name": d.group, "step": str(d.step), "pod": d.pod, "message": d.message} for d in decisions]
