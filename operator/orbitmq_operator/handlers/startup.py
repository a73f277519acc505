"""Operator start and stop: kopf's settings, one lightkube client and the config in the memo.

kopf logs in by itself (in-cluster service account, else ``$KUBECONFIG``/``~/.kube/config``);
the reconcilers use a lightkube client built the same way (``KubeConfig.from_env``), kept in
the operator's memo, which kopf copies into every resource's memo.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf
from lightkube import AsyncClient, KubeConfig

from orbitmq_operator.config import OperatorConfig
from orbitmq_operator.spec import FINALIZER, GROUP

TICKING_TIMERS = ("Timer 'cluster_resync' succeeded.",)
"""Lines kopf logs at INFO each time a timer returns: the cluster timer ticks every 2 s and
mostly finds nothing due (``handlers.clusters.resync_due``), which would flood the log."""
ANNOTATIONS_PREFIX = f"operator.{GROUP}"
"""kopf's own bookkeeping goes in annotations under our prefix, never in ``status`` (whose
schema the CRDs define field by field: the API server would prune kopf's entries)."""


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATIONS_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATIONS_PREFIX, key="last-handled-configuration"
    )
    # events are the ones the reconcilers post on purpose (scaling, role changes, refusals);
    # kopf's per-handler "succeeded" lines would bury them under one per resync
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    # A deleted cluster waits for its timer and failover daemon to exit before its finalizer
    # goes; kopf looks again only every 60 s by default, so a resync that happened to be running
    # held a `kubectl delete` for a minute. Both exit within seconds of being asked.
    settings.background.cancellation_polling = 1
    _quiet_ticks(logging.getLogger("kopf.objects"))
    # kopf's liveness endpoint logs every request at INFO: a probe every few seconds would
    # drown the operator's own lines
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    if "config" not in memo:
        memo["config"] = OperatorConfig.from_env()
    memo["client"] = AsyncClient(config=KubeConfig.from_env(), field_manager="orbitmq-operator")
    logger.info("orbitmq operator started: %s", memo["config"])


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    client = memo.get("client")
    if client is not None:
        await client.close()


class _TickFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() not in TICKING_TIMERS


def _quiet_ticks(logger: logging.Logger) -> None:
    if not any(isinstance(f, _TickFilter) for f in logger.filters):
        logger.addFilter(_TickFilter())
