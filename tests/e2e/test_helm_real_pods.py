"""The chart's whole life on real pods: ``helm install`` → a Ready cluster → ``helm test`` →
``helm upgrade`` → ``helm test`` → ``helm uninstall`` leaving no orphans.

On the test bed's real node (root on Linux by default, see conftest.py), with the repository's
own image: the Dockerfile built by ``scripts/build-image`` (the session's ``orbitmq_image_on_node``) is
imported into the node's containerd, and every pod of the release runs it: the operator (in
cluster, under the chart's ServiceAccount and least-privilege Role), the name server, the
master and slave brokers the operator makes from ``cluster.spec``, and the ``helm test`` pod,
which produces and consumes one message through the name server's Service (CoreDNS).

What each step shows:

* install: the operator's Deployment rolls out (``--wait``), the cluster reaches Ready, the
  chart's topic and group are applied to the brokers.
* ``helm test``: the hook pod succeeds, i.e. a message went in and came out end to end, and
  its consumer group is gone from the brokers afterwards (a group left with offsets would hold
  a later scale-down drain).
* authentication is on (the chart's default): the operator makes its super user
  ``<cluster>-operator-user``, the ``helm test`` pod signs with it, and so does the admin
  reading the brokers' groups from the host (as an administrator would, from that Secret).
* upgrade with changed values (a second topic; ``tests.topic`` pointing at it; the operator's
  resources; ``cluster.spec.proxy``): the Deployment rolls, the new topic is applied, and ``helm
  test`` now produces to and consumes from the new topic. The proxy's pod becomes ready and the
  official Apache RocketMQ 5 Python client, given only the proxy Service's address as its
  endpoint and the session credentials of an ``OrbitMQUser`` made for it (from the user's
  Secret), sends a message and receives and acks it (kube-proxy routes the ClusterIP from the
  host; the client's QueryRoute answer names that same address).
* uninstall: every namespaced object of the release is gone: no pod, workload, Service,
  ConfigMap, Secret, ServiceAccount, Role, binding, custom resource or peering object is left
  (a topic or group stuck on its finalizer after the operator went away would be such an
  orphan). The brokers' PVCs follow the documented policy, ``cluster.spec.brokers.storage.
  retention``: this release says ``Delete``, so they are gone too (``Retain``, the default,
  keeps them; operator/README.md).
"""

from __future__ import annotations

import asyncio
import base64
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_testbed_support import K8sCluster

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "rocketmq_v2"))
import v2kit
from operatorkit import install_crds, wait_condition
from realpods import (
    STORAGE_CLASS,
    create_namespace,
    delete_host_volumes,
    host_volumes,
    suite_disk_env,
    wait_ready,
)

from orbitmq.client import Admin
from orbitmq.common.credentials import Credentials

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600, func_only=True)]

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "orbitmq"
RELEASE = "mq"
CLUSTER = "mq"
# Namespaced kinds a release may leave behind; Events and the API server's own objects aside.
IGNORED_KINDS = {"events", "events.events.k8s.io", "leases.coordination.k8s.io"}
ALWAYS_THERE = {("configmaps", "kube-root-ca.crt"), ("serviceaccounts", "default")}


def values(k8s: K8sCluster, namespace: str, reference: str, **changes: Any) -> dict[str, Any]:
    repository, _, tag = reference.rpartition(":")
    node_selector = k8s.info["real_node"]["labels"]
    base: dict[str, Any] = {
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "operator": {
            "watchNamespaces": [namespace],
            "nodeSelector": node_selector,
            "extraEnv": [
                {"name": "ORBITMQ_OPERATOR_CLUSTER_RESYNC_S", "value": "2"},
                {"name": "ORBITMQ_OPERATOR_RESOURCE_RESYNC_S", "value": "2"},
            ],
        },
        "cluster": {
            "enabled": True,
            "name": CLUSTER,
            "spec": {
                "nameServers": {"replicas": 1},
                "brokers": {
                    "groups": 1,
                    "slavesPerGroup": 1,
                    "replicationMode": "SYNC_MASTER",
                    "segmentMib": 16,
                    "storage": {"size": "1Gi", "storageClassName": STORAGE_CLASS, "retention": "Delete"},
                },
                "pod": {"nodeSelector": node_selector, "env": suite_disk_env()},
            },
        },
        "topics": [{"topicName": "Orders", "readQueues": 4, "writeQueues": 4}],
        "consumerGroups": [{"groupName": "billing"}],
        "tests": {"nodeSelector": node_selector, "timeoutSeconds": 90},
    }
    return merge(base, changes)


def merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        out[key] = (
            merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def helm_with_values(k8s: K8sCluster, tmp: Path, *args: str, chart_values: dict[str, Any]) -> str:
    path = tmp / f"values-{time.monotonic_ns()}.yaml"
    path.write_text(yaml.safe_dump(chart_values))
    return k8s.helm(*args, "-f", str(path), timeout=420).stdout


def helm_test(k8s: K8sCluster, namespace: str) -> str:
    started = time.monotonic()
    result = k8s.helm("test", RELEASE, "-n", namespace, "--logs", "--timeout", "3m", check=False, timeout=240)
    print(f"helm test: exit {result.returncode} in {time.monotonic() - started:.1f}s")
    assert result.returncode == 0, f"helm test failed:\n{result.stdout}\n{result.stderr}"
    assert "Phase:          Succeeded" in result.stdout, result.stdout
    return result.stdout


def consumer_groups(k8s: K8sCluster, namespace: str) -> set[str]:
    """The subscription groups the brokers know, asked from the host through the name-server
    Service's IP (cluster DNS does not resolve on the host)."""
    ip = k8s.get_json("service", f"{CLUSTER}-namesrv", "-n", namespace)["spec"]["clusterIP"]
    operator_user = Credentials(*secret_credentials(k8s, namespace, f"{CLUSTER}-operator-user"))

    async def ask() -> set[str]:
        async with Admin(f"{ip}:9876", credentials=operator_user) as admin:
            return set(await admin.groups())

    return asyncio.run(ask())


def secret_credentials(k8s: K8sCluster, namespace: str, name: str) -> tuple[str, str]:
    """``accessKey`` and ``secretKey`` of a credentials Secret (the operator's or a user's)."""
    data = k8s.get_json("secret", name, "-n", namespace)["data"]
    return base64.b64decode(data["accessKey"]).decode(), base64.b64decode(data["secretKey"]).decode()


def app_user(topic: str, group: str) -> dict[str, Any]:
    """The OrbitMQUser an application of ``topic`` through the proxy is given."""
    return {
        "apiVersion": "orbitmq.io/v1alpha1",
        "kind": "OrbitMQUser",
        "metadata": {"name": "rocketmq5-app"},
        "spec": {
            "cluster": CLUSTER,
            "authorization": {
                "policies": [
                    {"resource": f"Topic:{topic}", "actions": ["Pub", "Sub"]},
                    {"resource": f"Group:{group}", "actions": ["Sub"]},
                ]
            },
        },
    }


def through_the_proxy(endpoint: str, topic: str, group: str, credentials: tuple[str, str]) -> float:
    """One message sent and received (then acked) by the official RocketMQ 5 client through
    ``endpoint`` with the session ``credentials`` (access key, secret); returns the seconds it
    took. A new POP group may start at the queues' end, so the consumer polls once before the send."""
    started = time.monotonic()
    config = v2kit.ClientConfiguration(endpoint, v2kit.Credentials(*credentials))
    consumer = v2kit.SimpleConsumer(config, group, {topic: v2kit.FilterExpression("*")}, await_duration=2)
    consumer.startup()
    try:
        consumer.receive(16, 30)
        producer = v2kit.Producer(config, [topic])
        producer.startup()
        try:
            body = f"rocketmq5-{time.time_ns()}".encode()
            producer.send(v2kit.message(topic, body, tag="proxy"))
        finally:
            producer.shutdown()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for received in consumer.receive(16, 30) or []:
                consumer.ack(received)
                if received.body == body:
                    return time.monotonic() - started
        raise AssertionError(f"{body!r} sent through {endpoint} never came back")
    finally:
        consumer.shutdown()


def once_the_proxy_knows_the_user(
    endpoint: str, topic: str, group: str, credentials: tuple[str, str]
) -> float:
    """:func:`through_the_proxy`, retried while the proxy does not know the user yet: the
    brokers' users reach the proxy through the name servers within its sync interval (1 s) of
    the user's Ready, so the client's first route query may still find it unknown."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return through_the_proxy(endpoint, topic, group, credentials)
        except Exception as error:  # the client's own: "failed to fetch topic:... route."
            if "route" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(2)


def leftovers(k8s: K8sCluster, namespace: str) -> list[str]:
    """Every namespaced object in ``namespace`` but Events and what every namespace has."""
    kinds = k8s.kubectl("api-resources", "--verbs=list", "--namespaced", "-o", "name").stdout.split()
    wanted = [k for k in kinds if k not in IGNORED_KINDS]
    found = k8s.get_json(",".join(wanted), "-n", namespace, "--ignore-not-found")["items"]
    out = []
    for obj in found:
        kind = obj["kind"]
        name = obj["metadata"]["name"]
        plural = {"ConfigMap": "configmaps", "ServiceAccount": "serviceaccounts"}.get(kind, kind)
        if (plural, name) not in ALWAYS_THERE:
            out.append(f"{kind}/{name}")
    return sorted(out)


def test_install_test_upgrade_uninstall_on_real_pods(
    k8s_real_node: K8sCluster, orbitmq_image_on_node: str, tmp_path: Path
) -> None:
    k8s = k8s_real_node
    install_crds(k8s)  # what Helm does with crds/ on a first install; the same files (checked)
    ns = create_namespace(k8s, "e2e-helm")
    host_volumes(k8s, ns, CLUSTER, groups=1, replicas=2, root=tmp_path / "volumes")
    reference = orbitmq_image_on_node
    try:
        started = time.monotonic()
        helm_with_values(
            k8s,
            tmp_path,
            "install",
            RELEASE,
            str(CHART),
            "-n",
            ns,
            "--wait",
            "--timeout",
            "5m",
            chart_values=values(k8s, ns, reference),
        )
        deployed = time.monotonic() - started
        wait_ready(k8s, ns, CLUSTER, timeout=240)
        ready = time.monotonic() - started
        wait_condition(k8s, ns, "orbitmqtopics", f"{CLUSTER}-orders", "Ready", "True", "Applied", timeout=90)
        wait_condition(
            k8s, ns, "orbitmqconsumergroups", f"{CLUSTER}-billing", "Ready", "True", "Applied", timeout=90
        )
        print(f"\nhelm install: operator rolled out in {deployed:.1f}s, cluster Ready in {ready:.1f}s")
        images = {
            c["image"] for pod in k8s.get_json("pods", "-n", ns)["items"] for c in pod["spec"]["containers"]
        }
        assert images == {reference}, images  # the operator and the brokers it made: one image
        helm_test(k8s, ns)
        groups = consumer_groups(k8s, ns)
        assert "billing" in groups and f"{RELEASE}-helm-test" not in groups, groups

        # upgrade: a second topic, the test pointed at it, other operator resources
        before = k8s.get_json("deployment", "-n", ns, "-l", "app.kubernetes.io/instance=" + RELEASE)
        generation = before["items"][0]["metadata"]["generation"]
        upgraded = values(
            k8s,
            ns,
            reference,
            topics=[
                {"topicName": "Orders", "readQueues": 4, "writeQueues": 4},
                {"topicName": "Payments", "readQueues": 2, "writeQueues": 2},
            ],
            tests={"topic": "Payments"},
            operator={
                "resources": {"requests": {"cpu": "60m", "memory": "160Mi"}, "limits": {"memory": "600Mi"}}
            },
            cluster={"spec": {"proxy": {"replicas": 1}}},
        )
        started = time.monotonic()
        helm_with_values(
            k8s,
            tmp_path,
            "upgrade",
            RELEASE,
            str(CHART),
            "-n",
            ns,
            "--wait",
            "--timeout",
            "5m",
            chart_values=upgraded,
        )
        wait_condition(
            k8s, ns, "orbitmqtopics", f"{CLUSTER}-payments", "Ready", "True", "Applied", timeout=90
        )
        print(f"helm upgrade: rolled out and the new topic applied in {time.monotonic() - started:.1f}s")
        after = k8s.get_json("deployment", "-n", ns, "-l", "app.kubernetes.io/instance=" + RELEASE)["items"][
            0
        ]
        assert after["metadata"]["generation"] > generation
        assert (
            after["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["memory"] == "160Mi"
        )
        helm_test(k8s, ns)
        k8s.wait_for(
            "the proxy ready",
            lambda: k8s.get_json("orbitmqcluster", CLUSTER, "-n", ns)["status"].get("proxiesReady") == 1,
            timeout=120,
        )
        status = k8s.get_json("orbitmqcluster", CLUSTER, "-n", ns)["status"]
        assert status["proxyAddress"] == f"{CLUSTER}-proxy.{ns}.svc:8081"
        service_ip = k8s.get_json("service", f"{CLUSTER}-proxy", "-n", ns)["spec"]["clusterIP"]
        k8s.apply(app_user("Payments", "rocketmq5-app"), namespace=ns)
        wait_condition(k8s, ns, "orbitmqusers", "rocketmq5-app", "Ready", "True", "Applied", timeout=90)
        app = secret_credentials(k8s, ns, "rocketmq5-app")
        took = once_the_proxy_knows_the_user(f"{service_ip}:8081", "Payments", "rocketmq5-app", app)
        print(f"RocketMQ 5 client through the proxy Service: sent, received and acked in {took:.1f}s")
        test_pod = k8s.get_json("pods", "-n", ns, "-l", "app.kubernetes.io/name=orbitmq-test")["items"][0]
        env = {e["name"]: e.get("value") for e in test_pod["spec"]["containers"][0]["env"]}
        assert env["TOPIC"] == "Payments" and test_pod["status"]["phase"] == "Succeeded"

        # not the release's: deleted by hand (its finalizer revokes the user on the brokers)
        k8s.kubectl("delete", "orbitmqusers.orbitmq.io", "rocketmq5-app", "-n", ns, "--timeout=60s")

        pvcs = [p["metadata"]["name"] for p in k8s.get_json("pvc", "-n", ns)["items"]]
        assert sorted(pvcs) == [f"data-{CLUSTER}-broker-0-0", f"data-{CLUSTER}-broker-0-1"]
        started = time.monotonic()
        k8s.helm("uninstall", RELEASE, "-n", ns, "--wait", "--timeout", "3m", timeout=240)
        deadline = time.monotonic() + 120
        while (found := leftovers(k8s, ns)) and time.monotonic() < deadline:
            time.sleep(1)
        assert not found, f"left in {ns} after helm uninstall"
        print(f"helm uninstall: nothing left after {time.monotonic() - started:.1f}s")
        assert not [
            pv["metadata"]["name"]
            for pv in k8s.get_json("persistentvolumes")["items"]
            if (pv["spec"].get("claimRef") or {}).get("namespace") == ns and pv["status"]["phase"] == "Bound"
        ]
    finally:
        k8s.helm("uninstall", RELEASE, "-n", ns, "--ignore-not-found", check=False)
        k8s.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        delete_host_volumes(k8s, ns)
