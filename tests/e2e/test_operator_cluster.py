"""The operator against a real API server: an OrbitMQCluster becomes owned StatefulSets,
Services, a ConfigMap and PDBs; a changed spec rewrites only what changed, a resync of an
unchanged cluster writes nothing, an invalid setting is a condition naming the key, and the
garbage collector removes the children of a deleted cluster while its volumes stay.

No broker runs on the kwok node, so the cluster stays ``Ready=False``/``BrokersNotReady``."""

from __future__ import annotations

import time

import pytest
from k8s_testbed_support import K8sCluster
from operatorkit import (
    RESYNC_S,
    children,
    cluster_cr,
    condition,
    events,
    get,
    install_crds,
    running_operator,
    spec_versions,
    versions,
    wait_condition,
)

from orbitmq_operator import metrics

pytestmark = pytest.mark.e2e

CLUSTER = "demo"
EXPECTED = {
    ("StatefulSet", "demo-namesrv"),
    ("StatefulSet", "demo-broker-0"),
    ("Service", "demo-namesrv"),
    ("Service", "demo-namesrv-headless"),
    ("Service", "demo-broker-0"),
    ("ConfigMap", "demo-broker-config"),
    ("PodDisruptionBudget", "demo-namesrv"),
    ("PodDisruptionBudget", "demo-broker-0"),
}


def settled_versions(k8s: K8sCluster, namespace: str) -> dict[tuple[str, str], str]:
    """Resource versions once the controllers stopped writing the StatefulSets' status (they
    create PVCs and pods after each change): what the operator alone could still change."""
    last = versions(k8s, namespace, CLUSTER)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(1.5)
        now = versions(k8s, namespace, CLUSTER)
        if now == last:
            return now
        last = now
    raise AssertionError(f"the children kept changing: {last}")


def object_writes() -> float:
    """Applies the operator (running in this process) sent so far."""
    return sum(
        sample.value
        for family in metrics.REGISTRY.collect()
        if family.name == "orbitmq_operator_object_writes"
        for sample in family.samples
        if sample.name.endswith("_total")
    )


def changed_since(before: dict, after: dict) -> set:
    return {key for key in after if before.get(key) != after[key]}


def patch_spec(k8s: K8sCluster, namespace: str, patch: str) -> None:
    """A merge patch of the cluster resource, as a user's ``kubectl patch`` would send it."""
    k8s.kubectl("patch", "orbitmqcluster", CLUSTER, "-n", namespace, "--type=merge", "-p", patch)


@pytest.mark.timeout(300, func_only=True)
def test_cluster_lifecycle(k8s_cluster: K8sCluster, namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(k8s_cluster.kubeconfig))
    install_crds(k8s_cluster)
    spec = {
        "nameServers": {"replicas": 1},
        "brokers": {"groups": 1, "slavesPerGroup": 1, "storage": {"size": "1Gi"}},
    }
    with running_operator(namespace) as runner:
        k8s_cluster.apply(cluster_cr(CLUSTER, **spec), namespace=namespace)
        k8s_cluster.wait_for(
            "the cluster's children", lambda: set(children(k8s_cluster, namespace, CLUSTER)) == EXPECTED
        )
        uid = get(k8s_cluster, namespace, "orbitmqclusters", CLUSTER)["metadata"]["uid"]
        for key, obj in children(k8s_cluster, namespace, CLUSTER).items():
            (owner,) = obj["metadata"]["ownerReferences"]
            assert (owner["kind"], owner["uid"], owner["controller"]) == ("OrbitMQCluster", uid, True), key

        body = wait_condition(
            k8s_cluster, namespace, "orbitmqclusters", CLUSTER, "Ready", "False", "BrokersNotReady"
        )
        assert body["status"]["observedGeneration"] == 1
        assert condition(body, "Progressing")["status"] == "True"
        assert body["status"]["brokerGroups"][0]["name"] == "demo-broker-0"
        assert body["status"]["namesrvAddress"] == f"demo-namesrv.{namespace}.svc:9876"

        # unchanged: several resyncs write nothing
        before = settled_versions(k8s_cluster, namespace)
        writes = object_writes()
        time.sleep(3 * RESYNC_S + 1)
        assert changed_since(before, versions(k8s_cluster, namespace, CLUSTER)) == set()
        assert object_writes() == writes, "a resync of an unchanged cluster sends no apply at all"
        # ...yet a resync does reconcile: a deleted child comes back
        k8s_cluster.kubectl("delete", "pdb", "demo-broker-0", "-n", namespace)
        k8s_cluster.wait_for(
            "the deleted PDB re-created",
            lambda: ("PodDisruptionBudget", "demo-broker-0") in children(k8s_cluster, namespace, CLUSTER),
        )
        before = spec_versions(k8s_cluster, namespace, CLUSTER)
        writes = object_writes()

        # more name servers: their StatefulSet, and the brokers' list of name servers
        patch_spec(k8s_cluster, namespace, '{"spec":{"nameServers":{"replicas":2}}}')
        k8s_cluster.wait_for(
            "the name servers' StatefulSet scaled",
            lambda: (
                children(k8s_cluster, namespace, CLUSTER)[("StatefulSet", "demo-namesrv")]["spec"]["replicas"]
                == 2
            ),
        )
        k8s_cluster.wait_for(
            "observedGeneration 2",
            lambda: (
                get(k8s_cluster, namespace, "orbitmqclusters", CLUSTER)["status"]["observedGeneration"] == 2
            ),
        )
        after = spec_versions(k8s_cluster, namespace, CLUSTER)
        assert object_writes() == writes + 3, "applied: the three changed objects, nothing else"
        assert changed_since(before, after) == {
            ("StatefulSet", "demo-namesrv"),
            ("ConfigMap", "demo-broker-config"),  # brokers register with every name server
            ("StatefulSet", "demo-broker-0"),  # its config hash: the brokers must restart to see it
        }
        broker_config = children(k8s_cluster, namespace, CLUSTER)[("ConfigMap", "demo-broker-config")]
        assert "demo-namesrv-1.demo-namesrv-headless" in broker_config["data"]["broker.yaml"]
        scaling = [e["message"] for e in events(k8s_cluster, namespace, CLUSTER) if e["reason"] == "Scaling"]
        assert any("demo-namesrv: 1 -> 2" in m for m in scaling), scaling

        # a bad broker setting: refused with the key named, nothing applied
        patch_spec(k8s_cluster, namespace, '{"spec":{"brokers":{"settings":{"flush_intervall_ms":5}}}}')
        body = wait_condition(
            k8s_cluster, namespace, "orbitmqclusters", CLUSTER, "Ready", "False", "InvalidSpec"
        )
        message = condition(body, "Ready")["message"]
        assert "spec.brokers.settings.flush_intervall_ms" in message, message
        assert body["status"]["observedGeneration"] == 3
        assert changed_since(after, spec_versions(k8s_cluster, namespace, CLUSTER)) == set()
        patch_spec(k8s_cluster, namespace, '{"spec":{"brokers":{"settings":null}}}')
        wait_condition(
            k8s_cluster, namespace, "orbitmqclusters", CLUSTER, "Ready", "False", "BrokersNotReady"
        )

        # a RocketMQ 5 endpoint: the proxy's Deployment and Service come, and go again at 0
        proxy = {
            ("Service", "demo-proxy"),
            ("Deployment", "demo-proxy"),
            ("PodDisruptionBudget", "demo-proxy"),
        }
        patch_spec(k8s_cluster, namespace, '{"spec":{"proxy":{"replicas":1}}}')
        k8s_cluster.wait_for(
            "the proxy's objects", lambda: set(children(k8s_cluster, namespace, CLUSTER)) >= proxy
        )
        deployment = children(k8s_cluster, namespace, CLUSTER)[("Deployment", "demo-proxy")]
        assert deployment["spec"]["replicas"] == 1
        k8s_cluster.wait_for(
            "status.proxyAddress",
            lambda: (
                get(k8s_cluster, namespace, "orbitmqclusters", CLUSTER)["status"].get("proxyAddress")
                == f"demo-proxy.{namespace}.svc:8081"
            ),
        )
        patch_spec(k8s_cluster, namespace, '{"spec":{"proxy":{"replicas":0}}}')
        k8s_cluster.wait_for(
            "the proxy's objects pruned",
            lambda: not set(children(k8s_cluster, namespace, CLUSTER)) & proxy,
        )
        assert set(children(k8s_cluster, namespace, CLUSTER)) == EXPECTED | {
            ("PodDisruptionBudget", "demo-namesrv")
        }
        deleted = [e["message"] for e in events(k8s_cluster, namespace, CLUSTER) if e["reason"] == "Deleted"]
        assert any("Deployment demo-proxy" in m for m in deleted), deleted

        # deletion: the garbage collector takes the children, the brokers' volumes stay (Retain)
        claims = k8s_cluster.get_json("pvc", "-n", namespace)["items"]
        assert sorted(c["metadata"]["name"] for c in claims) == [
            "data-demo-broker-0-0",
            "data-demo-broker-0-1",
        ]
        k8s_cluster.kubectl("delete", "orbitmqcluster", CLUSTER, "-n", namespace, "--wait=true", timeout=60)
        k8s_cluster.wait_for(
            "the children collected", lambda: not children(k8s_cluster, namespace, CLUSTER), timeout=90
        )
        claims = k8s_cluster.get_json("pvc", "-n", namespace)["items"]
        assert len(claims) == 2, "retention Retain: a deleted cluster never deletes messages"
    assert "Traceback" not in runner.output, runner.output
