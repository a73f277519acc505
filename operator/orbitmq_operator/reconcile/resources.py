"""Topics and consumer groups: their custom resources reconciled through the brokers' admin RPCs.

A topic or group is created on every master of its cluster with
:class:`~orbitmq.client.admin.Admin` at the cluster's name-server address, and updated in place
(``update_existing``): create is idempotent, so applying the same CR again changes nothing and
a broker group added later gets it on the next periodic reconcile. What the operator cannot do
is a status, never a crash: a missing cluster is ``ClusterNotFound``, unreachable brokers are
``BrokersUnreachable``, a change that would hide unconsumed messages is ``WouldHideMessages``
(until the CR says ``force: true``); all of them are retried.

The pure halves (CR → Admin arguments, outcome → status) are apart from the calls and
unit-tested; :func:`apply_topic` and friends are what the kopf handlers call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from orbitmq.client.admin import Admin, TopicChangeReport
from orbitmq.common.errors import OrbitError
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.v1.broker_pb2 import ErrorReason
from orbitmq_operator.reconcile import conditions
from orbitmq_operator.reconcile.access import PLAINTEXT, Access
from orbitmq_operator.reconcile.conditions import Reason, Verdict
from orbitmq_operator.spec import ConsumerGroupSpec, TopicSpec


@dataclass(frozen=True)
class Applied:
    """Where the topic or group now is (orbitmq broker names) and what changed."""

    broker_names: Sequence[str]
    changed: Sequence[str] = ()
    """``created``/``updated`` outcomes per broker, for events; empty when nothing changed."""


class ResourceRefused(Exception):
    """The brokers refused or could not be asked; ``reason`` and ``message`` go to the status,
    ``retriable`` says whether waiting alone can help (kopf retries either way)."""

    def __init__(self, reason: Reason, message: str, *, retriable: bool = True) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.retriable = retriable


def topic_arguments(spec: TopicSpec, cluster: str) -> dict[str, Any]:
    """``Admin.create_topic`` keyword arguments for a topic CR: every master of ``cluster``,
    updating a topic that exists, forcing only if the CR says so."""
    return {
        "read_queue_nums": spec.read_queues,
        "write_queue_nums": spec.write_queues,
        "perm": spec.perm,
        "order": spec.order,
        "cluster": cluster,
        "update_existing": True,
        "force": spec.force,
    }


def group_arguments(spec: ConsumerGroupSpec, cluster: str) -> dict[str, Any]:
    """``Admin.create_group`` keyword arguments for a consumer-group CR."""
    return {
        "retry_max_times": spec.retry_max_times,
        "consume_broadcast_enable": spec.broadcast_allowed,
        "orderly": spec.orderly,
        "cluster": cluster,
    }


def changed_outcomes(reports: Sequence[TopicChangeReport], address_names: Mapping[str, str]) -> list[str]:
    """``broker: outcome`` for each broker where the topic was created or updated."""
    return [
        f"{address_names.get(r.address, r.address)}: {r.outcome}"
        for r in reports
        if r.outcome in ("created", "updated")
    ]


def refusal_of(error: Exception, what: str) -> ResourceRefused:
    """What a failed admin call means for the user, as a condition reason."""
    failure = error if isinstance(error, RpcFailure) else None
    if isinstance(error, grpc.aio.AioRpcError):
        failure = failure_of(error)
        if failure is None:
            return ResourceRefused(
                Reason.BROKERS_UNREACHABLE, f"{what}: {error.code().name}: {error.details()}"
            )
    if failure is None:
        return ResourceRefused(Reason.REFUSED, f"{what}: {error}", retriable=False)
    if failure.reason == ErrorReason.WOULD_HIDE_MESSAGES:
        return ResourceRefused(
            Reason.WOULD_HIDE_MESSAGES,
            f"{what}: {failure.message}; set spec.force: true to apply it anyway",
            retriable=False,
        )
    if failure.reason == ErrorReason.SERVICE_NOT_AVAILABLE or failure.retriable:
        return ResourceRefused(Reason.BROKERS_UNREACHABLE, f"{what}: {failure.message}")
    return ResourceRefused(Reason.REFUSED, f"{what}: {failure.message}", retriable=False)


def applied_verdicts(applied: Applied, kind: str) -> list[Verdict]:
    where = ", ".join(applied.broker_names)
    return conditions.ready(Reason.APPLIED, f"{kind} is on every master of the cluster: {where}")


def resource_status(
    verdicts: Sequence[Verdict],
    generation: int,
    previous: Mapping[str, Any] | None,
    now: str,
    applied_to: Sequence[str] | None = None,
) -> dict[str, Any]:
    """``status`` of a topic or group; ``applied_to`` is kept as it was when not given."""
    status = conditions.generation_status(verdicts, generation, previous, now)
    if applied_to is not None:
        status["appliedTo"] = sorted(applied_to)
    return status


async def _names_by_address(admin: Admin, cluster: str) -> dict[str, str]:
    return {b.address: b.broker_name for b in await admin.masters(cluster)}


async def apply_topic(namesrv: str, spec: TopicSpec, cluster: str, access: Access = PLAINTEXT) -> Applied:
    """Create or update the topic on every master of ``cluster``."""
    what = f"topic {spec.topic_name!r}"
    try:
        async with access.admin(namesrv) as admin:
            reports = await admin.create_topic(spec.topic_name, **topic_arguments(spec, cluster))
            names = await _names_by_address(admin, cluster)
    except (grpc.aio.AioRpcError, OrbitError) as error:
        raise refusal_of(error, what) from error
    return Applied(sorted(names.get(r.address, r.address) for r in reports), changed_outcomes(reports, names))


async def apply_group(
    namesrv: str, spec: ConsumerGroupSpec, cluster: str, access: Access = PLAINTEXT
) -> Applied:
    """Create or update the subscription group on every master of ``cluster``."""
    what = f"consumer group {spec.group_name!r}"
    try:
        async with access.admin(namesrv) as admin:
            addresses = await admin.create_group(spec.group_name, **group_arguments(spec, cluster))
            names = await _names_by_address(admin, cluster)
    except (grpc.aio.AioRpcError, OrbitError) as error:
        raise refusal_of(error, what) from error
    return Applied(sorted(names.get(a, a) for a in addresses))


async def delete_topic(namesrv: str, topic: str, cluster: str, access: Access = PLAINTEXT) -> list[str]:
    """Delete the topic from every master; one already gone is fine (a finalizer retried after
    a partial deletion, or a topic deleted by hand)."""
    try:
        async with access.admin(namesrv) as admin:
            return await admin.delete_topic(topic, cluster=cluster)
    except (grpc.aio.AioRpcError, OrbitError) as error:
        if _is_reason(error, ErrorReason.TOPIC_NOT_EXIST):
            return []
        raise refusal_of(error, f"deleting topic {topic!r}") from error


async def delete_group(namesrv: str, group: str, cluster: str, access: Access = PLAINTEXT) -> list[str]:
    """Delete the group and its offsets from every master; one already gone is fine."""
    try:
        async with access.admin(namesrv) as admin:
            return await admin.delete_group(group, cluster=cluster)
    except (grpc.aio.AioRpcError, OrbitError) as error:
        if _is_reason(error, ErrorReason.SUBSCRIPTION_GROUP_NOT_EXIST):
            return []
        raise refusal_of(error, f"deleting consumer group {group!r}") from error


def _is_reason(error: Exception, reason: int) -> bool:
    failure = failure_of(error) if isinstance(error, grpc.aio.AioRpcError) else error
    return isinstance(failure, RpcFailure) and failure.reason == reason
