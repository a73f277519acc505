"""``orbitmq-operator-uninstall`` (the chart's pre-delete hook) against the test bed's API server,
logged in as a ServiceAccount holding only :func:`orbitmq_operator.rbac.uninstall_rules`: what
the hook calls is what its Role grants (a missing verb is a 403 here).

No operator runs, so the release's topic and group keep the operator's finalizer: the hook must
delete them, wait ``--timeout``, then remove the finalizer itself and see them go. Objects of
another release in the same namespace are left alone.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_testbed_support import E2E_TIMEOUT, K8sCluster
from lightkube import Client, KubeConfig
from operatorkit import install_crds

from orbitmq_operator.rbac import uninstall_rules
from orbitmq_operator.spec import FINALIZER
from orbitmq_operator.uninstall import release_labels, remaining, uninstall

pytestmark = [pytest.mark.e2e, E2E_TIMEOUT]

ACCOUNT = "hook"


def resource(kind: str, name: str, release: str, spec: dict[str, Any], finalizer: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": release_labels(release)}
    if finalizer:
        meta["finalizers"] = [FINALIZER]
    return {"apiVersion": "orbitmq.io/v1alpha1", "kind": kind, "metadata": meta, "spec": spec}


def hook_client(k8s: K8sCluster, namespace: str, tmp_path: Path) -> Client:
    """A client logged in with the hook ServiceAccount's token, as the Job's pod would be."""
    k8s.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": ACCOUNT}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": ACCOUNT},
            "rules": uninstall_rules(),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": ACCOUNT},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT},
            "subjects": [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}],
        },
        namespace=namespace,
    )
    token = k8s.kubectl("create", "token", ACCOUNT, "-n", namespace).stdout.strip()
    admin = yaml.safe_load(k8s.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": ACCOUNT, "user": {"token": token}}],
        "contexts": [
            {
                "name": ACCOUNT,
                "context": {"cluster": cluster["name"], "user": ACCOUNT, "namespace": namespace},
            }
        ],
        "current-context": ACCOUNT,
    }
    path = tmp_path / "hook.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return Client(config=KubeConfig.from_file(path), namespace=namespace)


def test_the_hook_deletes_the_release_s_resources_and_releases_stuck_finalizers(
    k8s_cluster: K8sCluster, namespace: str, tmp_path: Path
) -> None:
    k8s = k8s_cluster
    install_crds(k8s)
    brokers = {"groups": 1}
    k8s.apply(
        resource("OrbitMQCluster", "prod", "mq", {"image": "orbitmq:dev", "brokers": brokers}, False),
        resource("OrbitMQTopic", "prod-orders", "mq", {"cluster": "prod", "topicName": "Orders"}, True),
        resource(
            "OrbitMQConsumerGroup", "prod-billing", "mq", {"cluster": "prod", "groupName": "billing"}, True
        ),
        resource("OrbitMQTopic", "other-orders", "other", {"cluster": "other", "topicName": "Orders"}, True),
        namespace=namespace,
    )
    lines: list[str] = []
    with hook_client(k8s, namespace, tmp_path) as client:
        assert len(remaining(client, namespace, "mq")) == 3
        started = time.monotonic()
        left = uninstall(client, namespace, "mq", timeout=2, echo=lines.append)
        took = time.monotonic() - started
        assert left == [], lines
        assert remaining(client, namespace, "mq") == []
        # the other release's topic: untouched, finalizer and all
        (other,) = remaining(client, namespace, "other")
        assert other == ("orbitmqtopics", "other-orders", [FINALIZER])
    print("\n" + "\n".join(lines) + f"\n({took:.1f}s)")
    assert lines[0].startswith("deleting ")
    assert any("prod-orders: the operator did not release it within 2s" in line for line in lines)
    assert any("prod-billing: the operator did not release it within 2s" in line for line in lines)
    assert lines[-1] == "every orbitmq resource of release mq is gone"
    assert 2 <= took < 30
    # nothing to do the second time
    again: list[str] = []
    with hook_client(k8s, namespace, tmp_path) as client:
        assert uninstall(client, namespace, "mq", timeout=2, echo=again.append) == []
    assert again == [f"no orbitmq resources of release mq in {namespace}"]
    # the stuck one of the other release, for the namespace's deletion
    k8s.kubectl(
        "patch",
        "orbitmqtopic",
        "other-orders",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":[]}}',
    )
