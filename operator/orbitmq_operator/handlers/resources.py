"""``OrbitMQTopic`` and ``OrbitMQConsumerGroup`` handlers: apply through the brokers' admin
RPCs on create, update, resume and a resync timer (so a broker group added later gets them);
delete through a finalizer.

Whatever goes wrong is a status and a retry, never a crash: a CR naming a missing cluster is
``Ready=False``/``ClusterNotFound`` and retried (the cluster may be created next), unreachable
brokers are ``BrokersUnreachable``, a refused change is ``WouldHideMessages`` or ``Refused``.

Deletion: the finalizer deletes the topic or group from every master. When the cluster
resource is gone or being deleted there is nothing to delete from, and the finalizer is
released at once: a cluster that no longer exists never blocks a deletion. (Its brokers' kept
volumes, ``retention: Retain``, still hold the topic's messages and config; a cluster
re-created on them serves the topic again until it is deleted there.) When the cluster exists
but its brokers do not answer, deletion is retried every 30 s: removing the resource without
removing the topic would leave a topic nobody manages. To give up on that, remove the
finalizer by hand (``kubectl patch ... --type=merge -p '{"metadata":{"finalizers":[]}}'``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import kopf
from lightkube import ApiError, AsyncClient
from lightkube.generic_resource import create_namespaced_resource

from orbitmq_operator import metrics
from orbitmq_operator.config import OperatorConfig
from orbitmq_operator.handlers import events
from orbitmq_operator.handlers.clusters import RESYNC_S, write_status
from orbitmq_operator.reconcile import conditions
from orbitmq_operator.reconcile.access import Access, access_of
from orbitmq_operator.reconcile.certificates import TlsProblem
from orbitmq_operator.reconcile.cluster import now_rfc3339
from orbitmq_operator.reconcile.conditions import Reason, Verdict
from orbitmq_operator.reconcile.namesrv import namesrv_for
from orbitmq_operator.reconcile.resources import (
    Applied,
    ResourceRefused,
    applied_verdicts,
    apply_group,
    apply_topic,
    delete_group,
    delete_topic,
    resource_status,
)
from orbitmq_operator.spec import GROUP, VERSION, ConsumerGroupSpec, TopicSpec

OrbitMQCluster = create_namespaced_resource(GROUP, VERSION, "OrbitMQCluster", "orbitmqclusters")
RESOURCE_RESYNC_S = OperatorConfig.from_env().resource_resync_s
RETRY_S = 15


async def find_cluster(client: AsyncClient, namespace: str, name: str) -> Mapping[str, Any] | None:
    """The cluster resource, or None when it does not exist or is being deleted."""
    try:
        found = await client.get(OrbitMQCluster, name, namespace=namespace)
    except ApiError as error:
        if error.status.code == 404:
            return None
        raise
    body = found.to_dict()
    return None if body["metadata"].get("deletionTimestamp") else body


async def cluster_access_or_refuse(client: AsyncClient, cluster: Mapping[str, Any]) -> Access:
    """The cluster's access for a resource's handler (topic, group, user); TLS Secrets it cannot
    be reached with are a refusal naming them (retried: the cluster's reconcile makes or waits
    for them)."""
    try:
        return await access_of(client, cluster)
    except TlsProblem as problem:
        raise ResourceRefused(problem.reason, problem.message) from None


Apply = Callable[[str | list[str], Any, str, Access], Awaitable[Applied]]


async def apply_resource(
    kind: str, what: str, apply: Apply, spec: Any, body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo
) -> None:
    """Apply a topic or group; the status says the outcome, failures are retried."""
    generation = int(body.metadata.get("generation") or 0)
    started = time.monotonic()

    def refuse(reason: Reason, message: str, verdicts: list[Verdict]) -> None:
        metrics.RECONCILE_ERRORS.labels(kind, reason).inc()
        write_status(patch, body.status, resource_status(verdicts, generation, body.status, now_rfc3339()))
        events.warning(body, reason, message)

    try:
        cluster = await find_cluster(memo["client"], body.metadata.namespace or "", spec.cluster)
        if cluster is None:
            message = (
                f"OrbitMQCluster {spec.cluster!r} does not exist in namespace {body.metadata.namespace!r}; "
                f"create it or fix spec.cluster (retried every {RETRY_S} s)"
            )
            refuse(Reason.CLUSTER_NOT_FOUND, message, conditions.refused(Reason.CLUSTER_NOT_FOUND, message))
            raise kopf.TemporaryError(message, delay=RETRY_S)
        namesrv = await namesrv_for(memo["client"], memo["config"], cluster)
        access = await cluster_access_or_refuse(memo["client"], cluster)
        applied = await apply(namesrv, spec, spec.cluster, access)
    except ResourceRefused as error:
        verdict = conditions.waiting if error.retriable else conditions.refused
        refuse(error.reason, error.message, verdict(error.reason, error.message))
        raise kopf.TemporaryError(error.message, delay=RETRY_S) from error
    finally:
        metrics.RECONCILE_SECONDS.labels(kind).observe(time.monotonic() - started)
    if applied.changed:
        events.normal(body, "Applied", f"{what}: {', '.join(applied.changed)}")
    status = resource_status(
        applied_verdicts(applied, what), generation, body.status, now_rfc3339(), applied.broker_names
    )
    write_status(patch, body.status, status)


async def delete_resource(
    what: str,
    delete: Callable[[str | list[str], str, str, Access], Awaitable[list[str]]],
    name: str,
    cluster_name: str,
    body: kopf.Body,
    memo: kopf.Memo,
    logger: kopf.Logger,
) -> None:
    cluster = await find_cluster(memo["client"], body.metadata.namespace or "", cluster_name)
    if cluster is None:
        logger.info("%s: cluster %r is gone, nothing to delete from", what, cluster_name)
        return
    try:
        namesrv = await namesrv_for(memo["client"], memo["config"], cluster)
        access = await cluster_access_or_refuse(memo["client"], cluster)
        deleted = await delete(namesrv, name, cluster_name, access)
    except ResourceRefused as error:
        events.warning(body, error.reason, f"{error.message}; deletion retried in 30 s")
        raise kopf.TemporaryError(error.message, delay=30) from error
    events.normal(body, "Deleted", f"{what} deleted from {len(deleted)} master(s)")


TOPICS = "orbitmqtopics"
GROUPS = "orbitmqconsumergroups"


@kopf.on.resume(GROUP, VERSION, TOPICS)
@kopf.on.create(GROUP, VERSION, TOPICS)
@kopf.on.update(GROUP, VERSION, TOPICS, field="spec")
@kopf.timer(
    GROUP, VERSION, TOPICS, interval=RESOURCE_RESYNC_S, initial_delay=RESOURCE_RESYNC_S, idle=RESYNC_S
)
async def topic_changed(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    spec = TopicSpec.model_validate(body.spec)
    await apply_resource("OrbitMQTopic", f"topic {spec.topic_name!r}", apply_topic, spec, body, patch, memo)


@kopf.on.delete(GROUP, VERSION, TOPICS)
async def topic_deleted(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    spec = TopicSpec.model_validate(body.spec)
    await delete_resource(
        f"topic {spec.topic_name!r}", delete_topic, spec.topic_name, spec.cluster, body, memo, logger
    )


@kopf.on.resume(GROUP, VERSION, GROUPS)
@kopf.on.create(GROUP, VERSION, GROUPS)
@kopf.on.update(GROUP, VERSION, GROUPS, field="spec")
@kopf.timer(
    GROUP, VERSION, GROUPS, interval=RESOURCE_RESYNC_S, initial_delay=RESOURCE_RESYNC_S, idle=RESYNC_S
)
async def group_changed(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    spec = ConsumerGroupSpec.model_validate(body.spec)
    what = f"consumer group {spec.group_name!r}"
    await apply_resource("OrbitMQConsumerGroup", what, apply_group, spec, body, patch, memo)


@kopf.on.delete(GROUP, VERSION, GROUPS)
async def group_deleted(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    spec = ConsumerGroupSpec.model_validate(body.spec)
    what = f"consumer group {spec.group_name!r}"
    await delete_resource(what, delete_group, spec.group_name, spec.cluster, body, memo, logger)
