"""The Helm chart on the test bed's API server (kwok nodes: the operator's pod is scheduled and
reported running by kwok, but no container runs; the install with a Ready cluster on the real
node is another test's).

* Every object the chart renders, with the default and the production-like values, passes
  ``kubectl apply --dry-run=server``: the API server validates the built-in kinds with its own
  schemas (which kubeconform has no offline copy of, see ``tests/unit/chart``) and the custom
  resources with the CRDs' (orbitmq's, kopf's peering, the prometheus-operator's).
* ``helm install`` creates the operator's Deployment, its RBAC, the monitors (the
  monitoring.coreos.com/v1 API exists, so ``monitoring.enabled: auto`` renders them), the
  dashboards and the cluster, topics and groups; ``helm upgrade`` with other operator resources
  changes the Deployment; ``helm uninstall`` leaves nothing of the release but the CRDs (kept
  by Helm's design).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_testbed_support import E2E_TIMEOUT, K8sCluster

pytestmark = [pytest.mark.e2e, E2E_TIMEOUT]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "orbitmq"
PROD_VALUES = ROOT / "tests" / "unit" / "chart" / "values-prod.yaml"
NAMESPACE = "chart-e2e"
WATCHED = "chart-e2e-watched"
RELEASE = "mq"
CRDS = (
    "orbitmqclusters.orbitmq.io",
    "orbitmqtopics.orbitmq.io",
    "orbitmqconsumergroups.orbitmq.io",
    "kopfpeerings.kopf.dev",
    "clusterkopfpeerings.kopf.dev",
    "servicemonitors.monitoring.coreos.com",
    "podmonitors.monitoring.coreos.com",
    "prometheusrules.monitoring.coreos.com",
)


def prometheus_crds(k8s: K8sCluster) -> list[Path]:
    return sorted((k8s.bin_dir.parent / "share" / "prometheus-operator-crds").glob("*.yaml"))


def established(k8s: K8sCluster, crd: str) -> bool:
    result = k8s.kubectl("get", "crd", crd, "-o", "json", check=False)
    if result.returncode != 0:
        return False
    conditions = (json.loads(result.stdout).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@pytest.fixture(scope="module")
def chart_cluster(k8s_cluster: K8sCluster) -> Iterator[K8sCluster]:
    """The chart's CRDs and the prometheus-operator's served; two namespaces."""
    k8s = k8s_cluster
    # Server-side: the large prometheus-operator CRDs exceed a client-side apply's annotation.
    k8s.kubectl("apply", "--server-side", "-f", str(CHART / "crds"))
    k8s.kubectl("apply", "--server-side", *(a for f in prometheus_crds(k8s) for a in ("-f", str(f))))
    for crd in CRDS:
        k8s.wait_for(f"{crd} Established", lambda crd=crd: established(k8s, crd))
        k8s.wait_for(
            f"{crd} served", lambda crd=crd: k8s.kubectl("get", crd, "-A", check=False).returncode == 0
        )
    for ns in (NAMESPACE, WATCHED):
        k8s.kubectl("create", "namespace", ns)
    try:
        yield k8s
    finally:
        k8s.helm("uninstall", RELEASE, "-n", NAMESPACE, "--ignore-not-found", check=False)
        for ns in (NAMESPACE, WATCHED):
            k8s.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def template(k8s: K8sCluster, *args: str) -> str:
    return k8s.helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args).stdout


def docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


VALUES = {
    "default": [],
    # the watched namespaces must exist for their RoleBindings
    "prod": [
        "-f",
        str(PROD_VALUES),
        "--set-json",
        f"operator.watchNamespaces={json.dumps([NAMESPACE, WATCHED])}",
    ],
}


@pytest.mark.parametrize("values", VALUES)
def test_the_api_server_accepts_every_rendered_object(chart_cluster: K8sCluster, values: str) -> None:
    """Server-side dry run: schema validation (unknown fields refused) of every object."""
    k8s = chart_cluster
    rendered = template(k8s, "--set", "monitoring.enabled=true", *VALUES[values])
    kinds = sorted(d["kind"] for d in docs(rendered))
    result = k8s.kubectl(
        "apply",
        "--dry-run=server",
        "--validate=strict",
        "-f",
        "-",
        input=rendered,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    applied = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
    print(f"\n{values}: {len(applied)} objects accepted: {', '.join(sorted(set(kinds)))}")
    assert len(applied) == len(kinds), result.stdout
    assert {"Deployment", "PodMonitor", "PrometheusRule", "ConfigMap", "ClusterRole"} <= set(kinds)
    if values == "prod":
        assert {"OrbitMQCluster", "OrbitMQTopic", "OrbitMQConsumerGroup", "RoleBinding", "Pod"} <= set(kinds)


def test_the_api_server_refuses_what_the_schemas_refuse(chart_cluster: K8sCluster) -> None:
    """The dry run bites: an unknown field of a PodMonitor is refused by its CRD's schema."""
    rendered = template(
        chart_cluster, "--set", "monitoring.enabled=true", "--show-only", "templates/monitoring.yaml"
    )
    bad = rendered.replace("honorLabels: true", "honourLabels: true")
    assert bad != rendered
    result = chart_cluster.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-f", "-", input=bad, check=False
    )
    assert result.returncode != 0
    assert "honourLabels" in result.stderr, result.stderr


def release_objects(k8s: K8sCluster) -> list[str]:
    """Every object labelled with the release, in any namespace and of any listable kind."""
    names = k8s.kubectl("api-resources", "--verbs=list,delete", "-o", "name").stdout.split()
    names = [n for n in names if not n.startswith(("events", "componentstatuses"))]
    result = k8s.kubectl(
        "get", ",".join(names), "-A", "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "name", check=False
    )
    assert result.returncode == 0, result.stderr
    return sorted(result.stdout.split())


def deployment(k8s: K8sCluster) -> dict[str, Any]:
    return k8s.get_json("deployment", f"{RELEASE}-operator", "-n", NAMESPACE)


def test_install_upgrade_uninstall(chart_cluster: K8sCluster) -> None:
    k8s = chart_cluster
    values = [
        "--set",
        "cluster.enabled=true",
        "--set",
        "cluster.name=prod",
        "--set-json",
        'topics=[{"topicName": "Orders", "readQueues": 8, "writeQueues": 8}]',
        "--set-json",
        'consumerGroups=[{"groupName": "billing"}]',
        # the operator and the uninstall hook's Job on the kwok node (kwok completes Job pods)
        "--set-json",
        'operator.tolerations=[{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]',
    ]
    k8s.helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, *values)
    installed = release_objects(k8s)
    print("\ninstalled:\n  " + "\n  ".join(installed))
    for expected in (
        "deployment.apps/mq-operator",
        "serviceaccount/mq-operator",
        "clusterrole.rbac.authorization.k8s.io/mq-operator",
        "clusterrolebinding.rbac.authorization.k8s.io/mq-operator",
        "podmonitor.monitoring.coreos.com/mq-operator",
        "podmonitor.monitoring.coreos.com/mq-operator-orbitmq",
        "prometheusrule.monitoring.coreos.com/mq-operator",
        "configmap/mq-operator-dashboard-overview",
        "orbitmqcluster.orbitmq.io/prod",
        "orbitmqtopic.orbitmq.io/prod-orders",
        "orbitmqconsumergroup.orbitmq.io/prod-billing",
        "clusterkopfpeering.kopf.dev/mq-operator",
    ):
        assert expected in installed
    before = deployment(k8s)
    container = before["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][0] == "--all-namespaces"
    assert container["resources"]["limits"] == {"memory": "512Mi"}
    # kwok schedules the pod and reports it running (no container runs on a kwok node)
    k8s.wait_for(
        "the operator's pod",
        lambda: bool(
            k8s.get_json("pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=orbitmq-operator")["items"]
        ),
    )

    k8s.helm(
        "upgrade",
        RELEASE,
        str(CHART),
        "--namespace",
        NAMESPACE,
        "--reuse-values",
        "--set",
        "operator.resources.limits.memory=1Gi",
        "--set",
        "operator.resources.limits.cpu=2",
    )
    after = deployment(k8s)
    assert after["metadata"]["generation"] > before["metadata"]["generation"]
    limits = after["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"memory": "1Gi", "cpu": "2"}
    assert k8s.get_json("orbitmqcluster", "prod", "-n", NAMESPACE)["metadata"]["generation"] == 1
    history = json.loads(k8s.helm("history", RELEASE, "-n", NAMESPACE, "-o", "json").stdout)
    assert [h["revision"] for h in history] == [1, 2]

    k8s.helm("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "120s")
    k8s.wait_for("no object of the release left", lambda: not release_objects(k8s), timeout=60)
    for crd in CRDS:  # kept by Helm's design (crds/ are never deleted)
        assert established(k8s, crd), crd
