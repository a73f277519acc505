"""Topic and consumer-group CRs the operator cannot apply: a missing cluster is a condition
(``ClusterNotFound``), retried until the cluster exists, and never stops the operator; a CR
whose cluster is gone is deleted without waiting for brokers that no longer exist."""

from __future__ import annotations

from typing import Any

import pytest
from k8s_testbed_support import K8sCluster
from operatorkit import cluster_cr, condition, events, install_crds, running_operator, wait_condition

pytestmark = pytest.mark.e2e


def topic_cr(name: str, cluster: str) -> dict[str, Any]:
    return {
        "apiVersion": "orbitmq.io/v1alpha1",
        "kind": "OrbitMQTopic",
        "metadata": {"name": name},
        "spec": {"cluster": cluster, "topicName": "Orders"},
    }


def group_cr(name: str, cluster: str) -> dict[str, Any]:
    return {
        "apiVersion": "orbitmq.io/v1alpha1",
        "kind": "OrbitMQConsumerGroup",
        "metadata": {"name": name},
        "spec": {"cluster": cluster, "groupName": "billing"},
    }


def exists(k8s: K8sCluster, namespace: str, kind: str, name: str) -> bool:
    return k8s.kubectl("get", kind, name, "-n", namespace, check=False).returncode == 0


@pytest.mark.timeout(240, func_only=True)
def test_missing_cluster_is_a_condition_and_never_blocks_deletion(
    k8s_cluster: K8sCluster, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(k8s_cluster.kubeconfig))
    install_crds(k8s_cluster)
    with running_operator(namespace) as runner:
        k8s_cluster.apply(topic_cr("orders", "ghost"), group_cr("billing", "ghost"), namespace=namespace)
        body = wait_condition(
            k8s_cluster, namespace, "orbitmqtopics", "orders", "Ready", "False", "ClusterNotFound"
        )
        assert "OrbitMQCluster 'ghost' does not exist" in condition(body, "Ready")["message"]
        assert body["status"]["observedGeneration"] == 1
        wait_condition(
            k8s_cluster, namespace, "orbitmqconsumergroups", "billing", "Ready", "False", "ClusterNotFound"
        )
        assert any(e["reason"] == "ClusterNotFound" for e in events(k8s_cluster, namespace, "orders"))

        # the finalizer does not wait for a cluster that does not exist
        k8s_cluster.kubectl(
            "delete", "orbitmqconsumergroup", "billing", "-n", namespace, "--wait=true", timeout=60
        )
        assert not exists(k8s_cluster, namespace, "orbitmqconsumergroup", "billing")

        # retried: once the cluster exists the topic gets past ClusterNotFound (its name servers
        # do not run on the kwok node, so the brokers are unreachable)
        k8s_cluster.apply(cluster_cr("ghost", brokers={"storage": {"size": "1Gi"}}), namespace=namespace)
        wait_condition(
            k8s_cluster,
            namespace,
            "orbitmqtopics",
            "orders",
            "Ready",
            "False",
            "BrokersUnreachable",
            timeout=90,
        )
        # the operator kept serving clusters all along
        wait_condition(
            k8s_cluster, namespace, "orbitmqclusters", "ghost", "Ready", "False", "BrokersNotReady"
        )

        k8s_cluster.kubectl("delete", "orbitmqcluster", "ghost", "-n", namespace, "--wait=true", timeout=60)
        k8s_cluster.kubectl("delete", "orbitmqtopic", "orders", "-n", namespace, "--wait=true", timeout=60)
        assert not exists(k8s_cluster, namespace, "orbitmqtopic", "orders")
    assert "Traceback" not in runner.output, runner.output
