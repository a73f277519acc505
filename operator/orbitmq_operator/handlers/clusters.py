"""``OrbitMQCluster`` handlers: reconcile on create, update, resume and on a resync timer.

Every path runs the same :func:`~orbitmq_operator.reconcile.cluster.reconcile_cluster` under a
per-cluster lock (a timer may fire while a change is being applied), posts the events it
returns, and writes the status only when it differs from the stored one. Errors are statuses:
an invalid spec is ``Ready=False``/``InvalidSpec`` and waits for the next change; an API error
is ``ApplyFailed`` and retried by kopf. Deletion needs no handler: every child carries an owner
reference to the cluster, and the garbage collector removes them (volumes per
``spec.brokers.storage.retention``, ``Retain`` by default).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import kopf
from lightkube import ApiError

from orbitmq_operator import metrics
from orbitmq_operator.config import OperatorConfig
from orbitmq_operator.handlers import events
from orbitmq_operator.reconcile.cluster import Outcome, now_rfc3339, reconcile_cluster
from orbitmq_operator.reconcile.cluster_status import apply_failed_status
from orbitmq_operator.reconcile.conditions import Reason
from orbitmq_operator.reconcile.namesrv import drain_namesrvs
from orbitmq_operator.spec import GROUP, VERSION

PLURAL = "orbitmqclusters"
KIND = "OrbitMQCluster"
RESYNC_S = OperatorConfig.from_env().cluster_resync_s
"""kopf fixes a timer's interval when the handler is registered, so it is read at import."""


def post_events(body: kopf.Body, outcome: Outcome) -> None:
    for event in outcome.events:
        (events.warning if event.warning else events.normal)(body, event.reason, event.message)


def write_status(patch: kopf.Patch, current: Mapping[str, Any] | None, status: Mapping[str, Any]) -> None:
    """Only the keys whose value changed: an unchanged cluster gets no status write either."""
    for key, value in status.items():
        if (current or {}).get(key) != value:
            patch.status[key] = value


async def reconcile(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, logger: kopf.Logger) -> None:
    lock: asyncio.Lock = memo.setdefault("lock", asyncio.Lock())
    async with lock:
        started = time.monotonic()
        try:
            namesrv = await drain_namesrvs(memo["client"], memo["config"], body)
            ha_lock: asyncio.Lock = memo.setdefault("ha_lock", asyncio.Lock())
            outcome = await reconcile_cluster(memo["client"], body, namesrv=namesrv, ha_lock=ha_lock)
        except ApiError as error:
            metrics.RECONCILE_ERRORS.labels(KIND, Reason.APPLY_FAILED).inc()
            message = f"the API server refused an object: {error.status.message}"
            generation = int(body.metadata.get("generation") or 0)
            status = apply_failed_status(message, generation, body.status, now_rfc3339())
            write_status(patch, body.status, status)
            events.warning(body, Reason.APPLY_FAILED, message)
            raise kopf.TemporaryError(message, delay=10) from error
        finally:
            metrics.RECONCILE_SECONDS.labels(KIND).observe(time.monotonic() - started)
        if outcome.error is not None:
            metrics.RECONCILE_ERRORS.labels(KIND, Reason.INVALID_SPEC).inc()
            logger.warning("invalid spec, nothing applied: %s", outcome.error)
        post_events(body, outcome)
        write_status(patch, body.status, outcome.status)


@kopf.on.resume(GROUP, VERSION, PLURAL)
@kopf.on.create(GROUP, VERSION, PLURAL)
@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def cluster_changed(
    body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    await reconcile(body, patch, memo, logger)


BUSY_RESYNC_S = min(2.0, RESYNC_S)
"""How often a cluster in the middle of a rolling update or a drain is reconciled: each step
(a pod deleted, a switchover, a drained group removed) waits for the one before it, so a
15 s pace would make a 3-group roll take minutes of idling."""


def resync_due(status: Mapping[str, Any] | None, since_last_s: float | None) -> bool:
    """Whether the timer (ticking every :data:`BUSY_RESYNC_S`) reconciles now: at once while a
    roll or a drain is under way, else once per :data:`RESYNC_S`."""
    busy = bool((status or {}).get("rollingUpdates") or (status or {}).get("drains"))
    return busy or since_last_s is None or since_last_s >= RESYNC_S - BUSY_RESYNC_S / 2


@kopf.timer(GROUP, VERSION, PLURAL, interval=BUSY_RESYNC_S, initial_delay=RESYNC_S)
async def cluster_resync(
    body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, logger: kopf.Logger, **_: Any
) -> None:
    """Status follows the pods and brokers; a deleted child object comes back.

    No ``idle``: the operator's own status writes change the resource, and an idle timer would
    wait a whole period after each of them before the next step of a roll."""
    last: float | None = memo.get("last_resync")
    if not resync_due(body.status, None if last is None else time.monotonic() - last):
        return
    memo["last_resync"] = time.monotonic()
    await reconcile(body, patch, memo, logger)
