"""Draining surplus broker groups: the I/O around :mod:`orbitmq_operator.builders.drain`.

Each reconcile of a cluster with groups beyond ``spec.brokers.groups`` (highest first):

1. wipes the group's write permission on every name server (again each time: a name server
   keeps it in memory only, so one that restarted gets it back within a resync);
2. reads each consumer group's lag on the group from its master (``Admin.broker_backlog``),
   and which lagging groups have a consumer online there (``Admin.online_groups``), keeping
   since when the others have none in ``status.drains[].offlineGroups``;
3. lets :func:`~orbitmq_operator.builders.drain.decide_drain` say wait, remove or stuck, and
   on remove deletes the group's StatefulSet (its volumes follow
   ``persistentVolumeClaimRetentionPolicy``, i.e. ``spec.brokers.storage.retention``), its
   Service and its PodDisruptionBudget.

A group in ``status.drains`` that the spec wants again gets its write permission back and is
kept. Only one group is removed per reconcile, so names stay contiguous (a higher group first).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from lightkube import ApiError, AsyncClient
from lightkube.resources.apps_v1 import StatefulSet
from lightkube.resources.core_v1 import Service
from lightkube.resources.policy_v1 import PodDisruptionBudget

from orbitmq.common.errors import OrbitError
from orbitmq_operator.builders import Cluster, names
from orbitmq_operator.builders.drain import (
    DELAYED_GROUP,
    DrainDecision,
    DrainPolicy,
    DrainStep,
    decide_drain,
    track_offline,
)
from orbitmq_operator.reconcile.access import PLAINTEXT, Access


@dataclass
class DrainOutcome:
    decisions: list[DrainDecision] = field(default_factory=list)
    drains: list[dict[str, Any]] = field(default_factory=list)
    """``status.drains``: the groups still draining (or stuck)."""
    events: list[tuple[str, str, bool]] = field(default_factory=list)
    """(reason, message, warning)."""


def policy_of(cluster: Cluster, grace_s: float | None = None) -> DrainPolicy:
    brokers = cluster.spec.brokers
    extra = {} if grace_s is None else {"grace_s": grace_s}
    return DrainPolicy(
        brokers.drain_timeout_s,
        brokers.discard_backlog_after_timeout,
        offline_grace_s=brokers.drain_offline_group_grace_s,
        **extra,
    )


@dataclass(frozen=True)
class GroupDrain:
    """One drain step's outcome: the decision, and since when each lagging consumer group has
    had no consumer online (``status.drains[].offlineGroups``)."""

    decision: DrainDecision
    offline_since: dict[str, str]


async def drain_group(
    namesrv: str | list[str],
    broker_name: str,
    started: datetime.datetime,
    now: datetime.datetime,
    policy: DrainPolicy,
    offline_since: Mapping[str, str],
    access: Access = PLAINTEXT,
) -> GroupDrain:
    """Wipe ``broker_name``'s write permission on every name server, read its backlog and which
    lagging consumer groups have a consumer online there, decide. A name server or master that
    does not answer makes the backlog unknown (never drained). ``offline_since``: the last
    step's, by group (RFC 3339)."""
    elapsed_s = (now - started).total_seconds()
    try:
        async with access.admin(namesrv) as admin:
            await admin.wipe_write_perm(broker_name)
            backlog = await admin.broker_backlog(broker_name)
            lagging = {group for group, _ in backlog if group != DELAYED_GROUP}
            online = await admin.online_groups(broker_name, lagging)
    except (grpc.aio.AioRpcError, OrbitError) as error:
        problem = error.details() if isinstance(error, grpc.aio.AioRpcError) else str(error)
        decision = decide_drain(broker_name, elapsed_s, None, policy, problem or "")
        return GroupDrain(decision, dict(offline_since))
    since = track_offline(backlog, online, offline_since, _format(now))
    offline_s = {group: (now - _parse(stamp)).total_seconds() for group, stamp in since.items()}
    return GroupDrain(decide_drain(broker_name, elapsed_s, backlog, policy, offline_s=offline_s), since)


async def cancel_drain(namesrv: str | list[str], broker_name: str, access: Access = PLAINTEXT) -> None:
    """The spec wants the group again: producers may send to it again."""
    async with access.admin(namesrv) as admin:
        await admin.add_write_perm(broker_name)


async def delete_group_objects(client: AsyncClient, cluster: Cluster, index: int) -> None:
    """The group's StatefulSet, headless Service and PDB; one already gone is fine."""
    name = names.broker_group(cluster.name, index)
    for kind in (StatefulSet, Service, PodDisruptionBudget):
        try:
            await client.delete(kind, name, namespace=cluster.namespace)
        except ApiError as error:
            if error.status.code != 404:
                raise


def _parse(stamp: str) -> datetime.datetime:
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


def _format(moment: datetime.datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


async def reconcile_drains(
    client: AsyncClient | None,
    cluster: Cluster,
    surplus: Sequence[int],
    previous: Sequence[Mapping[str, Any]],
    namesrv: str | list[str],
    now: datetime.datetime,
    *,
    grace_s: float | None = None,
    access: Access = PLAINTEXT,
) -> DrainOutcome:
    """One step of every drain; ``previous`` is ``status.drains``. ``client`` None deletes
    nothing (the decision is still reported), for callers without a Kubernetes API."""
    outcome = DrainOutcome()
    started = {d["name"]: d.get("startedAt", "") for d in previous}
    wanted = {names.broker_group(cluster.name, i) for i in surplus}
    for name in sorted(set(started) - wanted):
        await cancel_drain(namesrv, name, access)
        outcome.events.append(("DrainCancelled", f"{name} is wanted again: write permission restored", False))
    policy = policy_of(cluster, grace_s)
    stamp = _format(now)
    removed = False
    for index in surplus:
        name = names.broker_group(cluster.name, index)
        before = next((d for d in previous if d["name"] == name), {})
        since = started.get(name) or stamp
        offline = {g["group"]: g["since"] for g in before.get("offlineGroups", [])}
        step = await drain_group(namesrv, name, _parse(since), now, policy, offline, access)
        decision = step.decision
        if name not in started:
            outcome.events.append(("Draining", f"{name}: write permission wiped; {decision.message}", False))
        newly_ignored = set(decision.ignored) - set(before.get("ignoredGroups", []))
        if newly_ignored:
            message = f"{name}: no consumer online for {', '.join(sorted(newly_ignored))}; {decision.message}"
            outcome.events.append(("DrainIgnoredGroups", message, True))
        if decision.step is DrainStep.REMOVE and not removed and client is not None:
            await delete_group_objects(client, cluster, index)
            outcome.events.append(("Removed", decision.message, decision.lag > 0))
            removed = True
            continue
        if decision.step is DrainStep.STUCK and started.get(name) and name not in _stuck(previous):
            outcome.events.append(("DrainStuck", decision.message, True))
        outcome.decisions.append(decision)
        outcome.drains.append(
            {
                "name": name,
                "startedAt": since,
                "lag": decision.lag,
                "step": str(decision.step),
                "offlineGroups": [{"group": g, "since": t} for g, t in step.offline_since.items()],
                "ignoredGroups": list(decision.ignored),
            }
        )
    return outcome


def _stuck(previous: Sequence[Mapping[str, Any]]) -> set[str]:
    return {d["name"] for d in previous if d.get("step") == DrainStep.STUCK}
