"""The operator's own Prometheus metrics (``orbitmq_operator_`` prefix, units in names).

One registry for the process, served on ``--metrics-port`` by prometheus_client's HTTP server,
as every orbitmq process serves its own. The reconcilers count; nothing here decides anything.
"""

from __future__ import annotations

import logging
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, Info, start_http_server

log = logging.getLogger(__name__)

REGISTRY = CollectorRegistry()

FAILOVERS = Counter(
    "orbitmq_operator_failovers_total",
    "Promotions of a slave to master carried out by the operator.",
    ["namespace", "cluster", "broker_group"],
    registry=REGISTRY,
)
LAST_DECISION = Info(
    "orbitmq_operator_last_failover_decision",
    "The last failover decision that changed a role (group, promoted member, epoch, reason).",
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "orbitmq_operator_reconcile_errors_total",
    "Reconciles that failed or were refused, by kind and reason.",
    ["kind", "reason"],
    registry=REGISTRY,
)
OBJECT_WRITES = Counter(
    "orbitmq_operator_object_writes_total",
    "Server-side applies of a cluster's objects (unchanged objects are skipped, not counted).",
    ["kind"],
    registry=REGISTRY,
)
RECONCILE_SECONDS = Histogram(
    "orbitmq_operator_reconcile_duration_seconds",
    "Time of one reconcile, API calls and broker queries included.",
    ["kind"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)


def serve(port: int, address: str = "0.0.0.0") -> Any:
    """Start serving ``/metrics``; returns the server (``shutdown()`` stops it)."""
    server, _thread = start_http_server(port, address, registry=REGISTRY)
    log.info("operator metrics on http://%s:%d/metrics", address, port)
    return server
