"""The prometheus-operator CRDs on the test bed's API server: the chart's monitoring objects
(ServiceMonitor, PodMonitor, PrometheusRule) are validated by the real schemas, not by hope.

The CRDs are the files of the pinned prometheus-operator module that `scripts/k8s-testbed
build` copies into the cache (share/prometheus-operator-crds/, next to the test bed's bin/).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_testbed_support import E2E_TIMEOUT, CommandError, K8sCluster

pytestmark = [pytest.mark.e2e, E2E_TIMEOUT]

API = "monitoring.coreos.com/v1"
NAMESPACE = "monitoring-crds"
KINDS = {
    "ServiceMonitor": "servicemonitors.monitoring.coreos.com",
    "PodMonitor": "podmonitors.monitoring.coreos.com",
    "PrometheusRule": "prometheusrules.monitoring.coreos.com",
}


def crd_dir(cluster: K8sCluster) -> Path:
    return cluster.bin_dir.parent / "share" / "prometheus-operator-crds"


@pytest.fixture(scope="module")
def monitoring_crds(k8s_cluster: K8sCluster) -> Iterator[K8sCluster]:
    """Every prometheus-operator CRD applied and served; a namespace for the objects."""
    files = sorted(crd_dir(k8s_cluster).glob("*.yaml"))
    assert {f.name for f in files} >= {
        f"monitoring.coreos.com_{crd.split('.')[0]}.yaml" for crd in KINDS.values()
    }
    # Server-side: the big CRDs (Prometheus, Alertmanager) exceed the 256 KiB annotation that a
    # client-side apply would store the whole object in.
    k8s_cluster.kubectl("apply", "--server-side", *(arg for f in files for arg in ("-f", str(f))))
    for crd in KINDS.values():
        # Not `kubectl wait`: right after the apply a CRD may have no status.conditions yet.
        k8s_cluster.wait_for(f"{crd} Established", lambda crd=crd: established(k8s_cluster, crd))
        # Served (in discovery, watch cache started) a moment after Established.
        k8s_cluster.wait_for(
            f"{crd} served",
            lambda crd=crd: k8s_cluster.kubectl("get", crd, "-A", check=False).returncode == 0,
        )
    k8s_cluster.kubectl("create", "namespace", NAMESPACE)
    try:
        yield k8s_cluster
    finally:
        k8s_cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false")
        k8s_cluster.kubectl(
            "delete", "--ignore-not-found", "--wait=false", *(arg for f in files for arg in ("-f", str(f)))
        )


def established(cluster: K8sCluster, crd: str) -> bool:
    conditions = (cluster.get_json("crd", crd).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API, "kind": kind, "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


SELECTOR = {"matchLabels": {"app.kubernetes.io/name": "orbitmq", "app.kubernetes.io/component": "broker"}}

SERVICE_MONITOR = obj(
    "ServiceMonitor",
    "orbitmq-broker",
    {"selector": SELECTOR, "endpoints": [{"port": "metrics", "interval": "15s", "path": "/metrics"}]},
)
POD_MONITOR = obj(
    "PodMonitor",
    "orbitmq-broker",
    {"selector": SELECTOR, "podMetricsEndpoints": [{"port": "metrics", "interval": "15s"}]},
)
PROMETHEUS_RULE = obj(
    "PrometheusRule",
    "orbitmq-alerts",
    {
        "groups": [
            {
                "name": "orbitmq.brokers",
                "rules": [
                    {
                        "alert": "OrbitMQBrokerDown",
                        "expr": 'up{job="orbitmq-broker"} == 0',
                        "for": "2m",
                        "labels": {"severity": "critical"},
                        "annotations": {"summary": "Broker {{ $labels.instance }} is down"},
                    },
                    {"record": "orbitmq:up:sum", "expr": "sum(up)"},
                ],
            }
        ]
    },
)


def create(cluster: K8sCluster, manifest: dict[str, Any]) -> dict[str, Any]:
    """Create via the API server (schema validation included); the stored object."""
    out = cluster.kubectl("create", "-o", "json", "-f", "-", input=json.dumps(manifest)).stdout
    return json.loads(out)


@pytest.mark.parametrize("manifest", [SERVICE_MONITOR, POD_MONITOR, PROMETHEUS_RULE], ids=lambda m: m["kind"])
def test_minimal_monitoring_objects_are_accepted(
    monitoring_crds: K8sCluster, manifest: dict[str, Any]
) -> None:
    stored = create(monitoring_crds, manifest)
    assert stored["kind"] == manifest["kind"] and stored["spec"] == manifest["spec"]
    listed = monitoring_crds.get_json(KINDS[manifest["kind"]], "--namespace", NAMESPACE)
    assert manifest["metadata"]["name"] in {item["metadata"]["name"] for item in listed["items"]}


@pytest.mark.parametrize(
    ("manifest", "field"),
    [
        (obj("ServiceMonitor", "no-endpoints", {"selector": SELECTOR}), "spec.endpoints: Required value"),
        (
            obj(
                "ServiceMonitor",
                "ftp",
                {"selector": SELECTOR, "endpoints": [{"port": "metrics", "scheme": "ftp"}]},
            ),
            "spec.endpoints[0].scheme",
        ),
        (obj("PodMonitor", "no-selector", {"podMetricsEndpoints": [{"port": "metrics"}]}), "spec.selector"),
        (
            obj(
                "PrometheusRule",
                "bad-for",
                {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up", "for": "ten minutes"}]}]},
            ),
            "spec.groups[0].rules[0].for",
        ),
    ],
    ids=[
        "service-monitor-without-endpoints",
        "unknown-scheme",
        "pod-monitor-without-selector",
        "bad-duration",
    ],
)
def test_invalid_monitoring_objects_are_refused_with_the_field(
    monitoring_crds: K8sCluster, manifest: dict[str, Any], field: str
) -> None:
    with pytest.raises(CommandError) as refused:
        create(monitoring_crds, manifest)
    assert field in refused.value.stderr, refused.value.stderr
