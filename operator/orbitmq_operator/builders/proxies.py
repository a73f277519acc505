"""``orbitmq proxy`` (``spec.proxy``): a Deployment, the ClusterIP Service the Apache RocketMQ 5
clients are given as their endpoint, and a PodDisruptionBudget.

A Deployment, not a StatefulSet: proxies hold nothing (POP and transaction state live in the
brokers, a transaction id names the broker of its half message), nobody addresses one proxy
pod by name, and any replica answers any client. It reaches the cluster through the name
servers' Service like any client; a v2 client's ``QueryRoute`` is answered with the address the
client used (the Service), so no pod address leaks to clients. Rolling updates surge one pod
before removing one: a client's calls move to the remaining replicas.

With ``replicas: 0`` there are no proxy objects at all; the reconciler deletes those left from
an earlier spec (:data:`PRUNABLE`).
"""

from __future__ import annotations

from typing import Any

from orbitmq_operator.builders import auth, common, names, tls
from orbitmq_operator.builders.common import Cluster, Manifest

CONTAINER = "proxy"
STARTUP_BUDGET_S = 60
"""The proxy only connects to the name servers: it serves within seconds."""
TERMINATION_GRACE_S = 30
"""The proxy's own grace (``grace_ms``, 5 s) for in-flight calls (long polls end sooner), with
ample margin."""
PRUNABLE = frozenset({names.PROXY})
"""Components whose objects may disappear from the desired set while the cluster lives (a
proxy scaled to 0): the reconciler deletes their objects that are no longer desired."""


def proxy_objects(cluster: Cluster) -> list[Manifest]:
    """The Service first, so its name resolves before a pod could be asked for it."""
    if cluster.spec.proxy.replicas == 0:
        return []
    return [client_service(cluster), deployment(cluster), disruption_budget(cluster)]


def client_service(cluster: Cluster) -> Manifest:
    """``<cluster>-proxy.<ns>.svc:8081``: the endpoint of every RocketMQ 5 client. The metrics
    port is on it too, for a ServiceMonitor (a PodMonitor finds the pods by their labels)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": common.object_meta(cluster, names.proxy(cluster.name), names.PROXY),
        "spec": {
            "type": "ClusterIP",
            "selector": names.selector_labels(cluster.name, names.PROXY),
            "ports": [
                common.service_port("grpc", names.PROXY_PORT),
                common.service_port("metrics", cluster.spec.metrics.port),
            ],
        },
    }


def disruption_budget(cluster: Cluster) -> Manifest:
    return common.pod_disruption_budget(cluster, names.proxy(cluster.name), names.PROXY)


def deployment(cluster: Cluster) -> Manifest:
    spec = cluster.spec
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": common.object_meta(cluster, names.proxy(cluster.name), names.PROXY),
        "spec": {
            "replicas": spec.proxy.replicas,
            # a new pod is ready before an old one goes: clients always find a proxy
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "selector": {"matchLabels": names.selector_labels(cluster.name, names.PROXY)},
            "template": common.pod_template(cluster, names.PROXY, _pod_spec(cluster)),
        },
    }


def proxy_command(cluster: Cluster) -> list[str]:
    return [
        "orbitmq",
        "--log-level",
        "INFO",
        "proxy",
        "--namesrv",
        names.namesrv_service_address(cluster.name, cluster.namespace),
        "--listen",
        f"0.0.0.0:{names.PROXY_PORT}",
        "--metrics-listen",
        f"0.0.0.0:{cluster.spec.metrics.port}",
    ]


def _pod_spec(cluster: Cluster) -> dict[str, Any]:
    pod = common.stateless_pod_spec(
        cluster,
        names.PROXY,
        container=CONTAINER,
        command=proxy_command(cluster),
        grpc_port=names.PROXY_PORT,
        startup_budget_s=STARTUP_BUDGET_S,
        resources=cluster.spec.proxy.resources,
        termination_grace_s=TERMINATION_GRACE_S,
        env=auth.server_env(cluster, "ORBITMQ_PROXY_"),
    )
    return tls.with_tls(cluster, pod, as_client=True)
