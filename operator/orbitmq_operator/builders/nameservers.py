"""The name servers: a StatefulSet, its headless Service, the ClusterIP Service everyone else
uses as *the* name-server address, and a PodDisruptionBudget.

Name servers are stateless (brokers re-register every 30 s), so their pods start in parallel
and roll one at a time by the StatefulSet controller itself. A StatefulSet rather than a
Deployment for the stable per-pod DNS names: brokers must register with *every* name server
(they never talk to each other), so brokers list them by name (see
:func:`~orbitmq_operator.builders.names.namesrv_pod_addresses`).
"""

from __future__ import annotations

from typing import Any

from orbitmq_operator.builders import auth, common, names, tls
from orbitmq_operator.builders.common import Cluster, Manifest

CONTAINER = "namesrv"
STARTUP_BUDGET_S = 60
"""A name server holds nothing on disk: it serves within seconds, or something is wrong."""
TERMINATION_GRACE_S = 30
"""The name server's own grace (``grace_ms``, 5 s) for in-flight calls, with ample margin."""


def namesrv_objects(cluster: Cluster) -> list[Manifest]:
    """Services first, so DNS names exist before the pods that use them."""
    return [
        headless_service(cluster),
        client_service(cluster),
        statefulset(cluster),
        disruption_budget(cluster),
    ]


def headless_service(cluster: Cluster) -> Manifest:
    return common.headless_service(
        cluster, names.namesrv_headless(cluster.name), names.NAMESRV, names.NAMESRV_PORT
    )


def client_service(cluster: Cluster) -> Manifest:
    """``<cluster>-namesrv.<ns>.svc:9876``: the one address clients are given. Any name server
    answers a route query, so spreading connections over the ready pods is right here."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": common.object_meta(cluster, names.namesrv(cluster.name), names.NAMESRV),
        "spec": {
            "type": "ClusterIP",
            "selector": names.selector_labels(cluster.name, names.NAMESRV),
            "ports": [common.service_port("grpc", names.NAMESRV_PORT)],
        },
    }


def disruption_budget(cluster: Cluster) -> Manifest:
    return common.pod_disruption_budget(cluster, names.namesrv(cluster.name), names.NAMESRV)


def statefulset(cluster: Cluster) -> Manifest:
    spec = cluster.spec
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": common.object_meta(cluster, names.namesrv(cluster.name), names.NAMESRV),
        "spec": {
            "serviceName": names.namesrv_headless(cluster.name),
            "replicas": spec.name_servers.replicas,
            # stateless peers: no reason to start or replace them one after another
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "RollingUpdate"},
            "selector": {"matchLabels": names.selector_labels(cluster.name, names.NAMESRV)},
            "template": common.pod_template(cluster, names.NAMESRV, _pod_spec(cluster)),
        },
    }


def namesrv_command(metrics_port: int, cluster: str) -> list[str]:
    return [
        "orbitmq",
        "--log-level",
        "INFO",
        "namesrv",
        "--listen",
        f"0.0.0.0:{names.NAMESRV_PORT}",
        "--metrics-listen",
        f"0.0.0.0:{metrics_port}",
        "--cluster",
        cluster,  # what Cluster:<name> grants mean at the name server: the brokers' cluster
    ]


def _pod_spec(cluster: Cluster) -> dict[str, Any]:
    spec = cluster.spec
    pod = common.stateless_pod_spec(
        cluster,
        names.NAMESRV,
        container=CONTAINER,
        command=namesrv_command(spec.metrics.port, cluster.name),
        grpc_port=names.NAMESRV_PORT,
        startup_budget_s=STARTUP_BUDGET_S,
        resources=spec.name_servers.resources,
        termination_grace_s=TERMINATION_GRACE_S,
        env=auth.server_env(cluster, "ORBITMQ_NAMESRV_"),
    )
    return tls.with_tls(cluster, pod)
