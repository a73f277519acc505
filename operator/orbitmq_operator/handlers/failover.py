"""Failover of every ``OrbitMQCluster`` with ``spec.failover.enabled``: a kopf daemon per
cluster stepping :class:`~orbitmq_operator.reconcile.failover.ClusterFailover` every 500 ms.

The broker pods come from a kopf index (one watch of the operator's namespaces, kept current
by kopf), not from a list call per step: two steps a second per cluster would otherwise cost
two API requests each. Every promotion is an Event on the cluster and counts in
``orbitmq_operator_failovers_total``.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any

import grpc
import kopf

from orbitmq.ha import Policy
from orbitmq_operator import metrics
from orbitmq_operator.builders import names
from orbitmq_operator.handlers import events
from orbitmq_operator.reconcile.access import PLAINTEXT, Access, cluster_access
from orbitmq_operator.reconcile.failover import STEP_INTERVAL_S, ClusterFailover, GroupPods, wanted_groups
from orbitmq_operator.spec import GROUP, VERSION, ClusterSpec

ACCESS_REFRESH_S = 10.0
"""How often the daemon re-reads the cluster's access (its CA and operator user Secrets): a
rotated CA reaches the failover within this, at two API reads per cluster per period rather
than per step."""

BROKER_PODS = {names.LABEL_NAME: names.APP, names.LABEL_COMPONENT: names.BROKER}


@kopf.index("pods", labels=BROKER_PODS)
def broker_pods(
    name: str, namespace: str, labels: kopf.Labels, status: kopf.Status, meta: kopf.Meta, **_: Any
) -> Any:
    """``{(namespace, cluster): (group, pod name, IP while Running else None)}``."""
    running = status.get("phase") == "Running" and not meta.get("deletionTimestamp")
    group = names.broker_group(
        labels.get(names.LABEL_INSTANCE, ""), int(labels.get(names.LABEL_BROKER_GROUP, "0"))
    )
    return {
        (namespace, labels.get(names.LABEL_INSTANCE, "")): (
            group,
            name,
            status.get("podIP") if running else None,
        )
    }


def pods_by_group(index: kopf.Index, namespace: str, cluster: str) -> dict[str, GroupPods]:
    out: dict[str, dict[str, str | None]] = defaultdict(dict)
    for group, pod, ip in index.get((namespace, cluster), []):
        out[group][pod] = ip
    return dict(out)


@kopf.daemon(GROUP, VERSION, "orbitmqclusters", cancellation_timeout=5)
async def failover(
    stopped: kopf.DaemonStopped,
    name: str,
    namespace: str,
    body: kopf.Body,
    spec: kopf.Spec,
    broker_pods: kopf.Index,
    memo: kopf.Memo,
    logger: kopf.Logger,
    **_: Any,
) -> None:
    state = ClusterFailover()
    ha_lock: asyncio.Lock = memo.setdefault("ha_lock", asyncio.Lock())  # shared with rolling updates
    access: Access = PLAINTEXT
    access_read = float("-inf")
    while not stopped:
        try:
            parsed = ClusterSpec.model_validate(dict(spec))
        except ValueError:
            parsed = None  # the reconcile reports it; nothing to fail over with
        if parsed is not None and parsed.failover.enabled:
            policy = Policy(detection_window_ms=parsed.failover.detection_window_ms)
            pods = wanted_groups(pods_by_group(broker_pods, namespace, name), name, parsed.brokers.groups)
            if time.monotonic() - access_read >= ACCESS_REFRESH_S:
                access = await read_access(memo, namespace, name, parsed, access, logger)
                access_read = time.monotonic()
            state.configure(pods, parsed.brokers.replication_mode.value, policy, access)
            try:
                async with ha_lock:  # never in the middle of a rolling update's switchover
                    acted = await state.step(int(time.time() * 1000))
            except grpc.aio.AioRpcError as error:  # a role change refused or timed out: next step
                logger.warning("failover step of %s failed: %s %s", name, error.code().name, error.details())
                acted = {}
            for group, decision in acted.items():
                record(body, namespace, name, group, decision, logger)
        await stopped.wait(STEP_INTERVAL_S)


async def read_access(
    memo: kopf.Memo, namespace: str, name: str, spec: ClusterSpec, last: Access, logger: kopf.Logger
) -> Access:
    """The cluster's access now; the last one while it cannot be read (the reconcile reports
    a missing or bad Secret in the cluster's status)."""
    try:
        return await cluster_access(memo["client"], namespace, name, spec)
    except Exception as error:  # an API error or an unusable Secret: keep failing over as before
        logger.warning("failover of %s keeps its last TLS and credentials: %s", name, error)
        return last


def record(
    body: kopf.Body, namespace: str, cluster: str, group: str, decision: Any, logger: kopf.Logger
) -> None:
    if decision.promote is not None:
        metrics.FAILOVERS.labels(namespace, cluster, group).inc()
        message = (
            f"{group}: {decision.promote} promoted to master under epoch {decision.epoch} ({decision.reason})"
        )
        events.warning(body, "Failover", message)
    if decision.demote:
        message = f"{group}: {', '.join(decision.demote)} turned into slave(s) under epoch {decision.epoch}"
        events.normal(body, "RoleChange", message)
    metrics.LAST_DECISION.info(
        {
            "namespace": namespace,
            "cluster": cluster,
            "broker_group": group,
            "promote": decision.promote or "",
            "demote": ",".join(decision.demote),
            "epoch": str(decision.epoch),
            "reason": decision.reason,
        }
    )
    logger.warning("failover %s: %s", group, decision.reason)
