"""Shared by the operator's e2e tests: the orbitmq CRDs installed once, the operator run in
this process with kopf's KopfRunner, and kubectl helpers for children, conditions and events."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from k8s_testbed_support import REPO_ROOT, K8sCluster
from kopf.testing import KopfRunner

CRDS = REPO_ROOT / "charts" / "orbitmq" / "crds"
PLURALS = ("orbitmqclusters", "orbitmqtopics", "orbitmqconsumergroups")
CHILD_KINDS = "statefulsets,deployments,services,configmaps,poddisruptionbudgets"
RESYNC_S = 2
IMAGE = "orbitmq:e2e"

# kopf fixes a timer's interval when the handlers are imported (in KopfRunner's thread)
os.environ.setdefault("ORBITMQ_OPERATOR_CLUSTER_RESYNC_S", str(RESYNC_S))
os.environ.setdefault("ORBITMQ_OPERATOR_RESOURCE_RESYNC_S", str(RESYNC_S))


def install_crds(k8s: K8sCluster) -> None:
    """The chart's generated CRDs, served before the operator starts watching them."""
    k8s.kubectl("apply", "--server-side", "-f", str(CRDS))
    for plural in PLURALS:
        k8s.kubectl("wait", "--for=condition=Established", f"crd/{plural}.orbitmq.io", "--timeout=60s")
        k8s.kubectl("get", f"{plural}.orbitmq.io", "--all-namespaces")  # the watch cache is ready


@contextmanager
def running_operator(namespace: str) -> Iterator[KopfRunner]:
    """The operator's handlers in this process, watching ``namespace`` (no peering)."""
    args = ["run", "--standalone", "--namespace", namespace, "--verbose", "-m", "orbitmq_operator.handlers"]
    with KopfRunner(args, timeout=60) as runner:
        yield runner
    assert runner.exception is None, runner.output
    assert runner.exit_code == 0, runner.output


def cluster_cr(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "orbitmq.io/v1alpha1",
        "kind": "OrbitMQCluster",
        "metadata": {"name": name},
        "spec": {"image": IMAGE, **spec},
    }


def children(k8s: K8sCluster, namespace: str, cluster: str) -> dict[tuple[str, str], dict[str, Any]]:
    items = k8s.get_json(CHILD_KINDS, "-n", namespace, "-l", f"app.kubernetes.io/instance={cluster}")["items"]
    return {(i["kind"], i["metadata"]["name"]): i for i in items}


def versions(k8s: K8sCluster, namespace: str, cluster: str) -> dict[tuple[str, str], str]:
    return {key: o["metadata"]["resourceVersion"] for key, o in children(k8s, namespace, cluster).items()}


def spec_versions(k8s: K8sCluster, namespace: str, cluster: str) -> dict[tuple[str, str], tuple[Any, ...]]:
    """What changes only when the object itself is written: the generation of objects that have
    a status other controllers write (a StatefulSet's ready replicas, a PDB's expected pods),
    the resource version of the others, and when the operator's apply last changed it."""
    out = {}
    for key, obj in children(k8s, namespace, cluster).items():
        meta = obj["metadata"]
        ours = [
            f.get("time") for f in meta.get("managedFields", []) if f.get("manager") == "orbitmq-operator"
        ]
        version = (
            meta["generation"]
            if key[0] in ("StatefulSet", "PodDisruptionBudget")
            else meta["resourceVersion"]
        )
        out[key] = (version, *ours)
    return out


def get(k8s: K8sCluster, namespace: str, plural: str, name: str) -> dict[str, Any]:
    return k8s.get_json(f"{plural}.orbitmq.io", name, "-n", namespace)


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return c
    return {}


def wait_condition(
    k8s: K8sCluster,
    namespace: str,
    plural: str,
    name: str,
    kind: str,
    status: str,
    reason: str,
    timeout: float = 60,
) -> dict[str, Any]:
    found: dict[str, Any] = {}

    def check() -> bool:
        nonlocal found
        found = get(k8s, namespace, plural, name)
        c = condition(found, kind)
        return (c.get("status"), c.get("reason")) == (status, reason)

    k8s.wait_for(f"{plural}/{name} {kind}={status} ({reason})", check, timeout=timeout)
    return found


def events(k8s: K8sCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    return k8s.get_json("events", "-n", namespace, "--field-selector", f"involvedObject.name={name}")["items"]
