"""Reconciling one ``OrbitMQCluster``: build, apply what changed, observe, compute the status.

The order is the builders' (name servers, then the brokers' ConfigMap, then each group), and a
spec the builders refuse applies nothing: the last good objects keep running and the status
says which field to fix. Broker groups beyond ``spec.brokers.groups`` are removed only once
drained (:mod:`~orbitmq_operator.reconcile.drain`: ``Progressing``/``Draining``, or
``Degraded``/``DrainStuck``); without a name-server address to drain through they are kept
(``DrainRequired``).

Observation reads the StatefulSets' ready replicas from the API and asks each running broker
pod for its ``GetHaState`` at its pod IP; an operator that cannot reach the pods (out of the
cluster, a network policy) reports the groups as not writable rather than guessing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from orbitmq.v1 import broker_pb2, broker_pb2_grpc
from orbitmq_operator.builders import Cluster, SpecError, desired_objects, names, proxies
from orbitmq_operator.builders.changes import surplus_broker_groups
from orbitmq_operator.reconcile import apply, certificates, conditions, drain, rolling
from orbitmq_operator.reconcile.access import PLAINTEXT, Access, cluster_access
from orbitmq_operator.reconcile.certificates import TlsProblem
from orbitmq_operator.reconcile.cluster_status import (
    MemberState,
    Observed,
    ObservedGroup,
    cluster_status,
    invalid_status,
)

HA_STATE_TIMEOUT_S = 1.0
"""A broker slower than this to say its role counts as not answering (the status is retried)."""


@dataclass(frozen=True)
class Event:
    """A Kubernetes Event for the handler to post on the cluster resource."""

    reason: str
    message: str
    warning: bool = False


@dataclass
class Outcome:
    status: dict[str, Any]
    events: list[Event] = field(default_factory=list)
    result: apply.ApplyResult | None = None
    error: SpecError | None = None


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def reconcile_cluster(
    client: AsyncClient,
    body: Mapping[str, Any],
    *,
    observe_brokers: bool = True,
    namesrv: str | list[str] | None = None,
    ha_lock: asyncio.Lock | None = None,
) -> Outcome:
    """Apply ``body``'s cluster (only what changed) and compute its status from what runs.

    ``namesrv``: every name server of the cluster, through which surplus broker groups are
    drained; None keeps them without draining (``DrainRequired``). ``ha_lock``: held by the
    failover daemon for each step, and here for a rolling update's switchover. Rolling updates
    need the brokers (``observe_brokers``)."""
    previous = body.get("status") or {}
    meta = body["metadata"]
    try:
        cluster = Cluster.from_resource(body)
        desired = desired_objects(cluster)
    except SpecError as error:
        generation = int(meta.get("generation", 0))
        status = invalid_status(str(error), generation, previous, now_rfc3339())
        return Outcome(status, [Event("InvalidSpec", f"{error}; nothing applied", warning=True)], error=error)
    try:
        secured = await certificates.ensure_tls(client, cluster)
        access = await cluster_access(client, cluster.namespace, cluster.name, cluster.spec)
    except TlsProblem as problem:
        return tls_problem_outcome(cluster, problem, previous)
    current = await apply.existing_objects(client, cluster)
    result = await apply.apply_objects(client, cluster, desired, current)
    leftovers = apply.prunable_leftovers(desired, current, proxies.PRUNABLE)
    await apply.prune_objects(client, cluster, leftovers, result)
    events = [Event(reason, message, warning) for reason, message, warning in secured.events]
    events += _apply_events(result)
    surplus = surplus_broker_groups(cluster, current.values())
    drains = drain.DrainOutcome()
    if namesrv is not None and (surplus or previous.get("drains")):
        now = datetime.datetime.now(datetime.UTC)
        before = previous.get("drains", [])
        drains = await drain.reconcile_drains(client, cluster, surplus, before, namesrv, now, access=access)
        events += [Event(reason, message, warning) for reason, message, warning in drains.events]
        surplus = []
    if surplus:
        events.append(
            Event(
                "DrainRequired",
                f"broker groups {surplus} exceed spec.brokers.groups={cluster.spec.brokers.groups}: "
                "kept running, not deleted (their messages would be lost)",
                warning=True,
            )
        )
    rolls = rolling.RollOutcome()
    if observe_brokers:
        rolls = await rolling.reconcile_rolls(client, cluster, ha_lock, access=access)
        events += [Event(reason, message, warning) for reason, message, warning in rolls.events]
    observed = await observe(
        client, cluster, current, surplus, observe_brokers=observe_brokers, access=access
    )
    observed = dataclasses.replace(observed, drains=tuple(drains.decisions), rolls=tuple(rolls.decisions))
    status = cluster_status(cluster, observed, previous, now_rfc3339())
    status["drains"] = drains.drains
    status["rollingUpdates"] = rolling.rolling_status(rolls.decisions)
    return Outcome(status, events, result)


def tls_problem_outcome(cluster: Cluster, problem: TlsProblem, previous: Mapping[str, Any]) -> Outcome:
    """TLS Secrets the cluster cannot start with: nothing is applied (running pods keep the
    certificate they have); the conditions name the Secret and the rule, ``Progressing`` while
    cert-manager is issuing, ``Degraded`` when the user must act."""
    verdict = conditions.waiting if problem.waiting else conditions.refused
    status = conditions.generation_status(
        verdict(problem.reason, problem.message), cluster.generation, previous, now_rfc3339()
    )
    event = Event(problem.reason.value, f"{problem.message}; nothing applied", warning=not problem.waiting)
    return Outcome(status, [event])


def _apply_events(result: apply.ApplyResult) -> list[Event]:
    events = [
        Event("Scaling", f"StatefulSet {name}: {before} -> {after} replicas")
        for name, before, after in result.scaled
    ]
    workloads = ("StatefulSet", "Deployment")
    events += [Event("Created", f"{kind} {name}") for kind, name in result.created if kind in workloads]
    events += [Event("Deleted", f"{kind} {name} (no longer in the spec)") for kind, name in result.deleted]
    events += [
        Event("Recreated", f"StatefulSet {name} re-created for an immutable change (pods and volumes kept)")
        for _, name in result.recreated
    ]
    return events


async def observe(
    client: AsyncClient,
    cluster: Cluster,
    current: Mapping[apply.Key, Mapping[str, Any]],
    surplus: Sequence[int] = (),
    *,
    observe_brokers: bool = True,
    access: Access = PLAINTEXT,
) -> Observed:
    """Ready replicas of each StatefulSet, and each reachable broker's role and epoch."""

    def ready(name: str, kind: str = "StatefulSet") -> int:
        obj = current.get((kind, name)) or {}
        return int((obj.get("status") or {}).get("readyReplicas") or 0)

    pods = await broker_pods(client, cluster) if observe_brokers else {}
    groups = []
    for index in range(cluster.spec.brokers.groups):
        name = names.broker_group(cluster.name, index)
        running = sorted((pod, ip) for pod, ip in pods.get(index, {}).items() if ip)
        members = await asyncio.gather(
            *(ha_state(pod, ip, access, access.broker_host(name, pod)) for pod, ip in running)
        )
        groups.append(
            ObservedGroup(
                name,
                1 + cluster.spec.brokers.slaves_per_group,
                ready(name),
                tuple(m for m in members if m is not None),
            )
        )
    return Observed(
        cluster.spec.name_servers.replicas,
        ready(names.namesrv(cluster.name)),
        tuple(groups),
        tuple(surplus),
        proxy_replicas=cluster.spec.proxy.replicas,
        proxy_ready=ready(names.proxy(cluster.name), "Deployment"),
    )


async def broker_pods(client: AsyncClient, cluster: Cluster) -> dict[int, dict[str, str | None]]:
    """``{group: {pod name: pod IP or None}}`` of the cluster's broker pods; the IP only for a
    Running pod (a pending or terminating pod's old IP may already belong to another pod)."""
    selector = names.selector_labels(cluster.name, names.BROKER)
    found: dict[int, dict[str, str | None]] = {}
    async for pod in client.list(Pod, namespace=cluster.namespace, labels=selector):
        group = (pod.metadata.labels or {}).get(names.LABEL_BROKER_GROUP, "")
        if not group.isdigit():
            continue
        status = pod.status
        running = status is not None and status.phase == "Running" and pod.metadata.deletionTimestamp is None
        ip = status.podIP if running and status is not None else None
        found.setdefault(int(group), {})[pod.metadata.name] = ip
    return found


async def ha_state(
    pod: str, ip: str, access: Access = PLAINTEXT, server_name: str | None = None
) -> MemberState | None:
    """A broker pod's role and epoch, None when it does not answer in time; ``server_name``:
    the name its TLS certificate holds (its DNS name)."""
    try:
        async with access.channel(f"{ip}:{names.BROKER_PORT}", server_name) as channel:
            state = await broker_pb2_grpc.BrokerStub(channel).GetHaState(
                broker_pb2.GetHaStateRequest(), timeout=HA_STATE_TIMEOUT_S
            )
    except grpc.aio.AioRpcError:
        return None
    return member_state(pod, state)


def member_state(pod: str, state: broker_pb2.HaState) -> MemberState:
    """Writable: a master that can acknowledge a send now (a SYNC_MASTER needs a slave)."""
    master = state.role != "SLAVE"
    writable = master and (state.role != "SYNC_MASTER" or len(state.slaves) > 0)
    return MemberState(pod, state.role, state.epoch, writable)
