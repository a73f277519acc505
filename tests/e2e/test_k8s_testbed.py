"""Smoke tests proving the k8s test bed is a real control plane, not a mock.

Each test exercises a different real component: the API server's CRD schema validation,
the controller manager + scheduler + kwok (StatefulSet pods reaching Running on a fake
node), helm against the API, and a kopf operator logging in with the test bed's kubeconfig.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from k8s_testbed_support import E2E_TIMEOUT, REPO_ROOT, CommandError, K8sCluster
from kopf.testing import KopfRunner

pytestmark = [pytest.mark.e2e, E2E_TIMEOUT]

HERE = Path(__file__).resolve().parent
CHART = HERE / "charts" / "testbed-smoke"
OPERATOR = HERE / "testbed_operator.py"
GROUP = "testbed.orbitmq.io"

# Pods must target the kwok fake node: it is the only node, and it is tainted.
KWOK_PLACEMENT: dict[str, Any] = {
    "nodeSelector": {"type": "kwok"},
    "tolerations": [
        {"key": "kwok.x-k8s.io/node", "operator": "Equal", "value": "fake", "effect": "NoSchedule"}
    ],
}


def pinned_versions() -> dict[str, str]:
    """The pins the test bed was built from (to check that what runs is what was pinned)."""
    pins = {}
    for line in (REPO_ROOT / "scripts" / "k8s-testbed.d" / "versions.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            pins[key.strip()] = value.strip()
    return pins


def crd(plural: str, kind: str, spec_schema: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A namespaced v1 CRD with a structural OpenAPI v3 schema (status left open for kopf)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "required": ["spec"],
                            "properties": {
                                "spec": {"type": "object", "required": required, "properties": spec_schema},
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                            },
                        }
                    },
                }
            ],
        },
    }


def apply_crd(cluster: K8sCluster, manifest: dict[str, Any]) -> None:
    """Apply a CRD and wait until the API server serves it (Established)."""
    name = manifest["metadata"]["name"]
    cluster.apply(manifest)
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{name}", "--timeout=60s")
    # Established comes slightly before the watch cache for the new resource is initialized
    # (requests get 429 "storage is (re)initializing"); kubectl retries those, so one list
    # makes sure watchers such as kopf start against a ready resource.
    cluster.kubectl("get", name, "--all-namespaces")


def test_control_plane_versions_and_fake_node(k8s_cluster: K8sCluster) -> None:
    """The API server reports the pinned version (ldflags stamping) and the kwok node is Ready."""
    version = json.loads(k8s_cluster.kubectl("version", "-o", "json").stdout)
    pinned = pinned_versions()["KUBERNETES_VERSION"]
    assert version["serverVersion"]["gitVersion"] == pinned
    assert version["clientVersion"]["gitVersion"] == pinned
    node = k8s_cluster.get_json("node", k8s_cluster.info["node"])
    ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}
    assert ready.get("Ready") == "True", node["status"]
    readyz = k8s_cluster.kubectl("get", "--raw", "/readyz?verbose").stdout
    assert "readyz check passed" in readyz


def test_crd_schema_validation(k8s_cluster: K8sCluster, namespace: str) -> None:
    """Valid custom resources are stored; invalid ones are rejected by the API server's schema."""
    apply_crd(
        k8s_cluster,
        crd("widgets", "Widget", {"replicas": {"type": "integer", "minimum": 1}}, required=["replicas"]),
    )

    def widget(name: str, replicas: object) -> dict[str, Any]:
        return {
            "apiVersion": f"{GROUP}/v1",
            "kind": "Widget",
            "metadata": {"name": name},
            "spec": {"replicas": replicas},
        }

    k8s_cluster.apply(widget("good", 3), namespace=namespace)
    stored = k8s_cluster.get_json("widgets.testbed.orbitmq.io", "good", "-n", namespace)
    assert stored["spec"]["replicas"] == 3

    with pytest.raises(CommandError) as too_small:
        k8s_cluster.apply(widget("zero", 0), namespace=namespace)
    assert "spec.replicas" in too_small.value.stderr
    assert "greater than or equal to 1" in too_small.value.stderr

    with pytest.raises(CommandError) as wrong_type:
        k8s_cluster.apply(widget("text", "three"), namespace=namespace)
    assert "spec.replicas" in wrong_type.value.stderr
    assert "integer" in wrong_type.value.stderr

    missing = k8s_cluster.get_json("widgets.testbed.orbitmq.io", "-n", namespace)
    assert [item["metadata"]["name"] for item in missing["items"]] == ["good"]


@pytest.mark.timeout(240, func_only=True)
def test_statefulset_pods_run_on_kwok_node(k8s_cluster: K8sCluster, namespace: str) -> None:
    """Controller manager creates the pods, the scheduler binds them, kwok makes them Running."""
    labels = {"app": "web"}
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web"},
        "spec": {"clusterIP": "None", "selector": labels, "ports": [{"port": 80}]},
    }
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "web"},
        "spec": {
            "serviceName": "web",
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "web", "image": "registry.k8s.io/pause:3.10"}],
                    **KWOK_PLACEMENT,
                },
            },
        },
    }
    k8s_cluster.apply(service, statefulset, namespace=namespace)
    k8s_cluster.kubectl(
        "rollout", "status", "statefulset/web", "-n", namespace, "--timeout=120s", timeout=150
    )

    pods = k8s_cluster.get_json("pods", "-n", namespace, "-l", "app=web")["items"]
    assert sorted(p["metadata"]["name"] for p in pods) == ["web-0", "web-1"]
    for pod in pods:
        assert pod["spec"]["nodeName"] == k8s_cluster.info["node"]
        assert pod["status"]["phase"] == "Running"
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"
    sts = k8s_cluster.get_json("statefulset", "web", "-n", namespace)
    assert sts["status"]["readyReplicas"] == 2


@pytest.mark.timeout(240, func_only=True)
def test_helm_lint_template_install(k8s_cluster: K8sCluster, namespace: str) -> None:
    """helm lints and renders the smoke chart, then installs it and waits for it to be ready."""
    version = k8s_cluster.helm("version", "--short").stdout
    assert version.startswith(pinned_versions()["HELM_VERSION"])

    lint = k8s_cluster.helm("lint", str(CHART))
    assert "1 chart(s) linted, 0 chart(s) failed" in lint.stdout

    rendered = k8s_cluster.helm("template", "smoke", str(CHART), "--set", "message=rendered").stdout
    assert "kind: Deployment" in rendered
    assert re.search(r"message: \"?rendered\"?", rendered)

    k8s_cluster.helm(
        "install",
        "smoke",
        str(CHART),
        "-n",
        namespace,
        "--set",
        "message=installed",
        "--wait",
        "--timeout",
        "2m",
    )
    releases = json.loads(k8s_cluster.helm("list", "-n", namespace, "-o", "json").stdout)
    assert [(r["name"], r["status"]) for r in releases] == [("smoke", "deployed")]
    configmap = k8s_cluster.get_json("configmap", "smoke-config", "-n", namespace)
    assert configmap["data"]["message"] == "installed"
    deployment = k8s_cluster.get_json("deployment", "smoke-app", "-n", namespace)
    assert deployment["status"]["readyReplicas"] == 2
    k8s_cluster.helm("uninstall", "smoke", "-n", namespace, "--wait", "--timeout", "2m")


@pytest.mark.timeout(180, func_only=True)
def test_kopf_operator_creates_configmap(
    k8s_cluster: K8sCluster, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kopf operator logs in via KUBECONFIG, sees a new custom resource and creates a ConfigMap."""
    apply_crd(k8s_cluster, crd("echoes", "Echo", {"message": {"type": "string"}}, required=["message"]))
    # kopf's kubeconfig login reads the process environment.
    monkeypatch.setenv("KUBECONFIG", str(k8s_cluster.kubeconfig))
    echo = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Echo",
        "metadata": {"name": "hello"},
        "spec": {"message": "hi from kopf"},
    }

    def configmap_exists() -> bool:
        result = k8s_cluster.kubectl("get", "configmap", "hello-echo", "-n", namespace, check=False)
        return result.returncode == 0

    args = ["run", "--standalone", "--namespace", namespace, "--verbose", str(OPERATOR)]
    with KopfRunner(args, timeout=60) as runner:
        k8s_cluster.apply(echo, namespace=namespace)
        k8s_cluster.wait_for("the operator's ConfigMap hello-echo", configmap_exists, timeout=60)

    assert runner.exception is None, runner.output
    assert runner.exit_code == 0, runner.output
    assert "Handler 'create_echo_configmap' succeeded" in runner.output
    configmap = k8s_cluster.get_json("configmap", "hello-echo", "-n", namespace)
    assert configmap["data"]["message"] == "hi from kopf"
    assert configmap["metadata"]["ownerReferences"][0]["kind"] == "Echo"
