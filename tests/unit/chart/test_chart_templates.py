"""The Helm chart ``charts/orbitmq/``: lint, render, validate, unit-test, refuse bad values.

The tools are the test bed's (``scripts/k8s-testbed build``: ``bin/helm``, ``bin/kubeconform``,
``share/helm-plugins/unittest``, ``share/prometheus-operator-crds``), found in
``$ORBITMQ_K8S_CACHE`` (default ``~/.cache/orbitmq-k8s-testbed``); no network.

kubeconform validates the rendered custom resources (orbitmq's, kopf's peering and the
prometheus-operator's) against JSON schemas made here from their CRDs' ``openAPIV3Schema``. No
schemas of the built-in kinds exist offline, so those are skipped by name here and validated
by the API server instead (``tests/e2e/test_chart.py``: ``kubectl apply --dry-run=server``).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from orbitmq_operator import rbac
from orbitmq_operator.chart import chart_files

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "orbitmq"
PROD_VALUES = Path(__file__).with_name("values-prod.yaml")
CACHE = Path(
    os.environ.get("ORBITMQ_K8S_CACHE") or Path.home() / ".cache" / "orbitmq-k8s-testbed"
).expanduser()
BIN = CACHE / "bin"
PROMETHEUS_CRDS = CACHE / "share" / "prometheus-operator-crds"
HELM_PLUGINS = CACHE / "share" / "helm-plugins"

BUILTIN_KINDS = (
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "RoleBinding",
    "Deployment",
    "ConfigMap",
    "Role",
    "Job",
    "NetworkPolicy",
    "Pod",
)
"""Built-in kinds the chart renders: no offline schema, validated by the API server in e2e."""


class _CrdLoader(yaml.SafeLoader):
    """PyYAML reads a bare ``=`` (an enum value in the prometheus-operator CRDs) as YAML 1.1's
    ``!!value`` tag; it is the string ``=``."""


_CrdLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))

VALUES = {"default": [], "prod": ["-f", str(PROD_VALUES)]}


def tool(name: str) -> Path:
    path = BIN / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"no {path}: run scripts/k8s-testbed build", pytrace=False)
    return path


def run(
    *args: str | Path, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=120, env={**os.environ, **(env or {})}
    )
    if check and result.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, args))} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )
    return result


def helm(*args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run(tool("helm"), *args, env={"HELM_PLUGINS": str(HELM_PLUGINS)}, check=check)


def render(*args: str, namespace: str = "orbitmq") -> list[dict[str, Any]]:
    out = helm("template", "mq", CHART, "--namespace", namespace, "--include-crds", *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


# -- generated files ----------------------------------------------------------------------------


def test_generated_files_are_current() -> None:
    """What ``scripts/gen-chart`` writes is what is committed (``--check`` in the test command)."""
    for name, text in chart_files().items():
        assert (CHART / name).read_text() == text, f"{name} is stale: run scripts/gen-chart"


# -- lint ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", VALUES)
def test_lint_strict(values: str) -> None:
    result = helm("lint", "--strict", CHART, "--namespace", "orbitmq", *VALUES[values])
    assert "0 chart(s) failed" in result.stdout


# -- RBAC ---------------------------------------------------------------------------------------


def _rbac_objects(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    kinds = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "RoleBinding"}
    return [d for d in docs if d["kind"] in kinds]


def _essence(obj: dict[str, Any]) -> tuple[Any, ...]:
    meta = obj["metadata"]
    return (
        obj["kind"],
        meta["name"],
        meta.get("namespace"),
        json.dumps(obj.get("rules"), sort_keys=True),
        json.dumps(obj.get("roleRef"), sort_keys=True),
        json.dumps(obj.get("subjects"), sort_keys=True),
    )


@pytest.mark.parametrize("watch", [None, ["orbitmq"], ["a", "b"]], ids=["all", "own", "two"])
def test_rbac_is_rbac_py(watch: list[str] | None) -> None:
    """The chart's ServiceAccount, roles and bindings are ``rbac_manifests()``'s, rule for rule."""
    args = ["--set-json", f"operator.watchNamespaces={json.dumps(watch)}"] if watch else []
    docs = _rbac_objects(render(*args))
    expected = rbac.rbac_manifests("orbitmq", watch, name="mq-operator")
    assert sorted(map(_essence, docs)) == sorted(map(_essence, expected))


# -- kubeconform --------------------------------------------------------------------------------


def _strict(node: Any) -> Any:
    """openAPIV3Schema as a JSON schema that also refuses unknown fields (as openapi2jsonschema's
    ``--strict``), where the API server would prune them."""
    if isinstance(node, list):
        return [_strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strict(v) for k, v in node.items()}
    if (
        node.get("type") == "object"
        and "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def crd_schemas(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """kubeconform schemas ``<group>/<kind>_<version>.json`` from every CRD the chart's objects use."""
    out = tmp_path_factory.mktemp("schemas")
    files = sorted((CHART / "crds").glob("*.y*ml")) + sorted(PROMETHEUS_CRDS.glob("*.yaml"))
    assert len(files) > 5, f"CRDs missing: {files} (run scripts/k8s-testbed build)"
    for file in files:
        for crd in yaml.load_all(file.read_text(), Loader=_CrdLoader):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            spec = crd["spec"]
            for version in spec["versions"]:
                schema = _strict(version["schema"]["openAPIV3Schema"])
                # metadata is ObjectMeta whatever the CRD declares of it (only name, so that a
                # CEL rule's fieldPath may name it): not closed to namespace, labels, ...
                schema.get("properties", {}).get("metadata", {}).pop("additionalProperties", None)
                # what the API server adds to every object's root schema
                for field, kind in (("apiVersion", "string"), ("kind", "string"), ("metadata", "object")):
                    schema.setdefault("properties", {}).setdefault(field, {"type": kind})
                path = out / spec["group"] / f"{spec['names']['kind'].lower()}_{version['name']}.json"
                path.parent.mkdir(exist_ok=True)
                path.write_text(json.dumps(schema))
    return out


@pytest.mark.parametrize("values", VALUES)
def test_rendered_objects_match_their_schemas(values: str, crd_schemas: Path, tmp_path: Path) -> None:
    rendered = tmp_path / "rendered.yaml"
    docs = render("--set", "monitoring.enabled=true", *VALUES[values])
    custom = [d for d in docs if d["kind"] not in BUILTIN_KINDS]
    kinds = {d["kind"] for d in custom}
    assert {"PodMonitor", "PrometheusRule", "CustomResourceDefinition"} <= kinds
    if values == "prod":
        assert {"OrbitMQCluster", "OrbitMQTopic", "OrbitMQConsumerGroup"} <= kinds
    rendered.write_text(yaml.safe_dump_all(docs))
    location = str(crd_schemas) + "/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"
    result = run(
        tool("kubeconform"),
        "-strict",
        "-summary",
        "-output",
        "text",
        "-schema-location",
        location,
        "-skip",
        ",".join((*BUILTIN_KINDS, "CustomResourceDefinition")),
        rendered,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (
        f"Valid: {len(custom) - sum(d['kind'] == 'CustomResourceDefinition' for d in custom)}"
        in result.stdout
    )


def test_kubeconform_refuses_a_bad_custom_resource(crd_schemas: Path, tmp_path: Path) -> None:
    """The schemas bite: a PodMonitor with an unknown field and a cluster with a bad flush mode."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump_all(
            [
                {
                    "apiVersion": "monitoring.coreos.com/v1",
                    "kind": "PodMonitor",
                    "metadata": {"name": "x"},
                    "spec": {"selector": {}, "podMetricsEndpoints": [{"portt": "metrics"}]},
                },
                {
                    "apiVersion": "orbitmq.io/v1alpha1",
                    "kind": "OrbitMQCluster",
                    "metadata": {"name": "x"},
                    "spec": {"image": "i", "brokers": {"flushMode": "SOMETIMES"}},
                },
            ]
        )
    )
    location = str(crd_schemas) + "/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json"
    result = run(tool("kubeconform"), "-strict", "-summary", "-schema-location", location, bad, check=False)
    assert result.returncode != 0
    assert "Invalid: 2" in result.stdout, result.stdout


# -- helm unittest -------------------------------------------------------------------------------


def test_helm_unittest() -> None:
    """``charts/orbitmq/tests/*_test.yaml`` (NOTES.txt too: ``helm template`` does not render it)."""
    if not (HELM_PLUGINS / "unittest" / "plugin.yaml").is_file():
        pytest.fail(
            f"no helm-unittest plugin in {HELM_PLUGINS}: run scripts/k8s-testbed build", pytrace=False
        )
    result = helm("unittest", "--color=false", CHART, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Charts:      1 passed" in result.stdout, result.stdout


# -- bad values ---------------------------------------------------------------------------------

BAD_VALUES = {
    "zero name servers": (
        {"cluster": {"enabled": True, "spec": {"nameServers": {"replicas": 0}}}},
        "/cluster/spec/nameServers/replicas",
    ),
    "unknown flush mode": (
        {"cluster": {"spec": {"brokers": {"flushMode": "SOMETIMES"}}}},
        "/cluster/spec/brokers/flushMode",
    ),
    "negative storage size": (
        {"cluster": {"spec": {"brokers": {"storage": {"size": "-10Gi"}}}}},
        "/cluster/spec/brokers/storage/size",
    ),
    "storage size not a quantity": (
        {"cluster": {"spec": {"brokers": {"storage": {"size": "ten gigs"}}}}},
        "/cluster/spec/brokers/storage/size",
    ),
    "unknown cluster field": (
        {"cluster": {"spec": {"brokers": {"grups": 2}}}},
        "/cluster/spec/brokers",
    ),
    "bad image pull policy": ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    "bad cluster image pull policy": (
        {"cluster": {"spec": {"imagePullPolicy": "Sometimes"}}},
        "/cluster/spec/imagePullPolicy",
    ),
    "too many broker groups": (
        {"cluster": {"spec": {"brokers": {"groups": 65}}}},
        "/cluster/spec/brokers/groups",
    ),
    "cluster name with capitals": ({"cluster": {"name": "Prod"}}, "/cluster/name"),
    "negative operator replicas": ({"operator": {"replicas": -1}}, "/operator/replicas"),
    "bad watch namespace": ({"operator": {"watchNamespaces": ["Not_A_Name"]}}, "/operator/watchNamespaces/0"),
    "unknown monitoring mode": ({"monitoring": {"enabled": "sometimes"}}, "/monitoring/enabled"),
    "bad resource quantity": (
        {"operator": {"resources": {"limits": {"memory": "lots"}}}},
        "/operator/resources/limits/memory",
    ),
    "topic without a name": ({"topics": [{"readQueues": 4}]}, "/topics/0"),
    "topic with zero queues": ({"topics": [{"topicName": "T", "readQueues": 0}]}, "/topics/0/readQueues"),
    "bad topic name": ({"topics": [{"topicName": "a topic"}]}, "/topics/0/topicName"),
    "group with negative retries": (
        {"consumerGroups": [{"groupName": "g", "retryMaxTimes": -1}]},
        "/consumerGroups/0/retryMaxTimes",
    ),
    "unknown top-level value": ({"operater": {}}, "operater"),
}


@pytest.mark.parametrize("values,field", BAD_VALUES.values(), ids=BAD_VALUES)
def test_bad_values_are_refused_with_the_field_named(
    values: dict[str, Any], field: str, tmp_path: Path
) -> None:
    file = tmp_path / "values.yaml"
    file.write_text(yaml.safe_dump(values))
    result = helm("template", "mq", CHART, "-f", file, check=False)
    assert result.returncode != 0, f"accepted: {values}"
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    assert field in result.stderr, result.stderr


def test_good_cluster_values_are_accepted(tmp_path: Path) -> None:
    """Every field of a realistic spec passes the schema (the prod values use most of them)."""
    docs = render("-f", str(PROD_VALUES))
    cluster = next(d for d in docs if d["kind"] == "OrbitMQCluster")
    assert cluster["spec"]["brokers"]["storage"]["size"] == "100Gi"
    assert cluster["spec"]["image"] == "registry.example.com/orbitmq/orbitmq:0.1.0"
