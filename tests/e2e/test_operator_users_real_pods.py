"""Users on real pods: an ``OrbitMQCluster`` with authentication on (and TLS with
:data:`TLS`), two ``OrbitMQUser`` resources, and client pods that use them the way an
application would.

* The operator runs in a pod under its own RBAC (it reads and creates Secrets), creates its
  super user (``<cluster>-operator-user``), and the servers take it as their
  bootstrap super user, so the cluster becomes Ready and the operator's topic reaches
  the brokers through signed calls.
* ``orders-app`` (generated credentials; ``Pub``/``Sub`` on the topic, ``Sub`` on its group):
  a pod with its Secret (``secretKeyRef``), and with TLS the ``<cluster>-ca-cert`` Secret
  mounted, runs ``orbitmq produce`` and ``orbitmq consume`` and gets its message back.
* ``audit-app`` (its own Secret, ``type: secret``; ``Pub`` on another topic only): the same
  produce exits non-zero, its error naming the denial.
* Bad input: two entries for one resource are refused by the API server (CEL), a source IP
  with host bits by the operator (``Ready=False``/``InvalidSpec`` naming the field).
* Deleting ``orders-app`` revokes it: a pod signing with a copy of its old credentials is
  refused at once (the user is unknown to the brokers and name servers).

TLS rotation is the TLS tests' (test_operator_tls_real_pods.py); not repeated here.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_testbed_support import K8sCluster
from operatorkit import get, install_crds, wait_condition
from realpods import (
    RUN_AS,
    cluster_cr,
    create_namespace,
    delete_host_volumes,
    host_volumes,
    pod_settings,
    wait_ready,
)

from orbitmq_operator.rbac import rbac_manifests

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900, func_only=True)]

CLUSTER = "sec"
TOPIC = "SecureOrders"
OTHER_TOPIC = "AuditLog"
GROUP = "SecureBilling"
CA_MOUNT = "/var/run/orbitmq/ca"
TLS = True
"""Whether the cluster and the client pods use TLS too."""
OPERATOR = {"app.kubernetes.io/name": "orbitmq-operator-e2e"}


def operator_deployment(k8s: K8sCluster, namespace: str, account: str) -> dict[str, Any]:
    """``orbitmq-operator --namespace <ns> --standalone`` in a pod on the real node, as a user
    runs it: in the pod network (under TLS brokers advertise their pods' DNS names, which only
    cluster DNS resolves), under its ServiceAccount and least-privilege RBAC."""
    host = pod_settings(k8s)
    container = {
        "name": "operator",
        "image": k8s.info["real_node"]["image"],
        "imagePullPolicy": "Never",
        "command": ["/usr/bin/env", "orbitmq-operator"],  # the image's PATH starts with the venv's bin
        "args": ["--namespace", namespace, "--standalone", "--liveness", ""],
        "env": [
            # kopf's identity: the pod's name (the image has no passwd entry for the pods' uid)
            {"name": "POD_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "ORBITMQ_OPERATOR_CLUSTER_RESYNC_S", "value": "2"},
            {"name": "ORBITMQ_OPERATOR_RESOURCE_RESYNC_S", "value": "2"},
        ],
        "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS, "readOnlyRootFilesystem": True},
        "volumeMounts": [*host["volumeMounts"], {"name": "tmp", "mountPath": "/tmp"}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "orbitmq-operator", "labels": OPERATOR},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": OPERATOR},
            "template": {
                "metadata": {"labels": OPERATOR},
                "spec": {
                    "serviceAccountName": account,
                    "nodeSelector": host["nodeSelector"],
                    "terminationGracePeriodSeconds": 10,
                    "volumes": [*host["volumes"], {"name": "tmp", "emptyDir": {}}],
                    "containers": [container],
                },
            },
        },
    }


@contextlib.contextmanager
def operator_in_cluster(k8s: K8sCluster, prefix: str) -> Iterator[str]:
    """A new namespace watched by an operator pod; on the way out its users, topics and clusters are
    deleted while the operator runs (their finalizers), then the namespace, volumes and the
    operator's cluster-wide RBAC; the operator's log is printed when the block failed."""
    install_crds(k8s)
    namespace = create_namespace(k8s, prefix)
    grants = rbac_manifests(namespace, [namespace], name=f"orbitmq-operator-{namespace}")
    k8s.apply(*grants)
    k8s.apply(operator_deployment(k8s, namespace, grants[0]["metadata"]["name"]), namespace=namespace)
    try:
        yield namespace
    except BaseException:
        selector = ",".join(f"{k}={v}" for k, v in OPERATOR.items())
        print(k8s.kubectl("logs", "-l", selector, "-n", namespace, "--tail=300", check=False).stdout)
        raise
    finally:
        for plural in ("orbitmqusers", "orbitmqtopics", "orbitmqclusters"):
            k8s.kubectl(
                "delete", f"{plural}.orbitmq.io", "--all", "-n", namespace, "--timeout=60s", check=False
            )
        k8s.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        delete_host_volumes(k8s, namespace)
        for obj in grants:
            if "namespace" not in obj["metadata"]:
                k8s.kubectl("delete", obj["kind"].lower(), obj["metadata"]["name"], check=False)


SECURITY = {"tls": {"enabled": TLS}, "authentication": {"enabled": True}}


def topic_cr(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "orbitmq.io/v1alpha1",
        "kind": "OrbitMQTopic",
        "metadata": {"name": name.lower()},
        "spec": {"cluster": CLUSTER, "topicName": name},
    }


def user_cr(name: str, policies: list[dict[str, Any]], secret: str | None = None) -> dict[str, Any]:
    authentication = {"type": "secret", "secretName": secret} if secret else {"type": "generated"}
    return {
        "apiVersion": "orbitmq.io/v1alpha1",
        "kind": "OrbitMQUser",
        "metadata": {"name": name},
        "spec": {
            "cluster": CLUSTER,
            "authentication": authentication,
            "authorization": {"policies": policies},
        },
    }


def credentials_secret(name: str, access_key: str, secret_key: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "stringData": {"accessKey": access_key, "secretKey": secret_key},
    }


def client_pod(k8s: K8sCluster, name: str, user_secret: str, script: str) -> dict[str, Any]:
    """A pod of the test bed's image on the real node: the user's Secret as the CLI's
    ``ORBITMQ_ACCESS_KEY``/``_SECRET_KEY``, the cluster's CA Secret mounted for ``--tls-ca``."""
    host = pod_settings(k8s)
    namesrv = f"{CLUSTER}-namesrv:9876"
    env = [
        {"name": "ORBITMQ_NAMESRV", "value": namesrv},
        *([{"name": "ORBITMQ_TLS_CA", "value": f"{CA_MOUNT}/ca.crt"}] if TLS else []),
        *(
            {"name": variable, "valueFrom": {"secretKeyRef": {"name": user_secret, "key": key}}}
            for variable, key in (("ORBITMQ_ACCESS_KEY", "accessKey"), ("ORBITMQ_SECRET_KEY", "secretKey"))
        ),
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": 180,
            "nodeSelector": host["nodeSelector"],
            "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS},
            "containers": [
                {
                    "name": "client",
                    "image": k8s.info["real_node"]["image"],
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-ec", script],
                    "env": env,
                    "volumeMounts": [
                        *host["volumeMounts"],
                        *([{"name": "ca", "mountPath": CA_MOUNT, "readOnly": True}] if TLS else []),
                        {"name": "tmp", "mountPath": "/tmp"},
                    ],
                }
            ],
            "volumes": [
                *host["volumes"],
                *([{"name": "ca", "secret": {"secretName": f"{CLUSTER}-ca-cert"}}] if TLS else []),
                {"name": "tmp", "emptyDir": {}},
            ],
        },
    }


def run_pod(k8s: K8sCluster, ns: str, manifest: dict[str, Any], timeout: float = 200) -> tuple[str, str]:
    """Run a client pod to its end: (phase Succeeded/Failed, its log)."""
    name = manifest["metadata"]["name"]
    k8s.apply(manifest, namespace=ns)
    phase = ""

    def finished() -> bool:
        nonlocal phase
        pod = k8s.get_json("pod", name, "-n", ns)
        phase = pod.get("status", {}).get("phase", "")
        return phase in ("Succeeded", "Failed")

    k8s.wait_for(f"pod {ns}/{name} to finish", finished, timeout)
    log = k8s.kubectl("logs", name, "-n", ns, check=False)
    return phase, log.stdout + log.stderr


PRODUCE_CONSUME = f"""
key="secure-$(date +%s)-$$"
orbitmq produce --topic {TOPIC} --count 1 --key "$key" --body "over tls $key" --json
orbitmq consume --group {GROUP} --topic {TOPIC} --from first --count 1 --idle-timeout 60 --json > /tmp/got
cat /tmp/got
grep -F "$key" /tmp/got
"""
PRODUCE_ONLY = f"orbitmq produce --topic {TOPIC} --count 1 --body denied --json"


def check_bad_input(k8s: K8sCluster, ns: str) -> None:
    """The API server refuses what the CRD says (two entries for one resource); the operator
    refuses what the brokers' model says (host bits in a CIDR block), naming the field."""
    overlap = [{"resource": "Topic:x", "actions": ["Pub"]}, {"resource": "Topic:x", "actions": ["Sub"]}]
    refused = k8s.kubectl(
        "apply", "-n", ns, "-f", "-", input=json.dumps(user_cr("twice", overlap)), check=False
    )
    assert refused.returncode != 0 and "overlapping rules" in refused.stderr, refused.stderr
    k8s.apply(
        user_cr("bad-ips", [{"resource": "Topic:x", "actions": ["Pub"], "sourceIps": ["10.0.0.1/8"]}]),
        namespace=ns,
    )
    bad = wait_condition(k8s, ns, "orbitmqusers", "bad-ips", "Ready", "False", "InvalidSpec", 60)
    message = next(c["message"] for c in bad["status"]["conditions"] if c["type"] == "Ready")
    assert "spec.authorization.policies[0].sourceIps" in message and "host bits" in message, message
    k8s.kubectl("delete", "orbitmqusers.orbitmq.io", "bad-ips", "-n", ns, "--timeout=60s")


def secret_values(k8s: K8sCluster, ns: str, name: str) -> tuple[str, str]:
    data = k8s.get_json("secret", name, "-n", ns)["data"]
    return base64.b64decode(data["accessKey"]).decode(), base64.b64decode(data["secretKey"]).decode()


def test_users_produce_consume_are_denied_and_revoked_on_real_pods(
    k8s_real_node: K8sCluster, tmp_path: Path
) -> None:
    k8s = k8s_real_node
    with operator_in_cluster(k8s, "e2e-users") as ns:
        host_volumes(k8s, ns, CLUSTER, groups=1, replicas=1, root=tmp_path / "volumes")
        started = time.monotonic()
        k8s.apply(
            cluster_cr(
                k8s,
                CLUSTER,
                {"groups": 1, "slavesPerGroup": 0, "replicationMode": "ASYNC_MASTER"},
                security=SECURITY,
            ),
            namespace=ns,
        )
        wait_ready(k8s, ns, CLUSTER, timeout=240)
        ready_s = time.monotonic() - started

        operator_user = k8s.get_json("secret", f"{CLUSTER}-operator-user", "-n", ns)
        assert operator_user["metadata"]["ownerReferences"][0]["kind"] == "OrbitMQCluster"
        broker = k8s.get_json("statefulset", f"{CLUSTER}-broker-0", "-n", ns)
        env = broker["spec"]["template"]["spec"]["containers"][0]["env"]
        refs = {
            e["name"]: e["valueFrom"]["secretKeyRef"]["name"]
            for e in env
            if "secretKeyRef" in e.get("valueFrom", {})
        }
        assert refs["ORBITMQ_BROKER_AUTH_SUPER_SECRET"] == f"{CLUSTER}-operator-user"
        config = k8s.get_json("configmap", f"{CLUSTER}-broker-config", "-n", ns)
        assert secret_values(k8s, ns, f"{CLUSTER}-operator-user")[1] not in str(config["data"])

        for topic in (TOPIC, OTHER_TOPIC):
            k8s.apply(topic_cr(topic), namespace=ns)
            wait_condition(k8s, ns, "orbitmqtopics", topic.lower(), "Ready", "True", "Applied", 120)

        k8s.apply(credentials_secret("audit-credentials", "audit-app", "audit-secret-123"), namespace=ns)
        k8s.apply(
            user_cr(
                "orders-app",
                [
                    {"resource": f"Topic:{TOPIC}", "actions": ["Pub", "Sub"]},
                    {"resource": f"Group:{GROUP}", "actions": ["Sub"]},
                ],
            ),
            user_cr(
                "audit-app", [{"resource": f"Topic:{OTHER_TOPIC}", "actions": ["Pub"]}], "audit-credentials"
            ),
            namespace=ns,
        )
        for user in ("orders-app", "audit-app"):
            wait_condition(k8s, ns, "orbitmqusers", user, "Ready", "True", "Applied", 120)
        orders = get(k8s, ns, "orbitmqusers", "orders-app")
        assert orders["status"]["secretName"] == "orders-app" and orders["status"]["username"] == "orders-app"
        assert orders["status"]["observedGeneration"] == orders["metadata"]["generation"]
        assert (
            k8s.get_json("secret", "orders-app", "-n", ns)["metadata"]["ownerReferences"][0]["kind"]
            == "OrbitMQUser"
        )

        check_bad_input(k8s, ns)

        phase, log = run_pod(k8s, ns, client_pod(k8s, "orders-client", "orders-app", PRODUCE_CONSUME))
        assert phase == "Succeeded", log

        phase, log = run_pod(k8s, ns, client_pod(k8s, "audit-client", "audit-credentials", PRODUCE_ONLY))
        assert phase == "Failed", log
        assert "NO_PERMISSION" in log and "audit-app" in log, log

        # keep a copy of orders-app's credentials: its own Secret goes with it
        k8s.apply(credentials_secret("orders-copy", *secret_values(k8s, ns, "orders-app")), namespace=ns)
        deleted = time.monotonic()
        k8s.kubectl("delete", "orbitmqusers.orbitmq.io", "orders-app", "-n", ns, "--timeout=60s")
        revoked_s = time.monotonic() - deleted
        phase, log = run_pod(k8s, ns, client_pod(k8s, "revoked-client", "orders-copy", PRODUCE_ONLY))
        assert phase == "Failed", log
        assert "orders-app" in log and ("UNAUTHENTICATED" in log or "unknown" in log.lower()), log
        over = "over TLS" if TLS else "in plaintext"
        print(
            f"\nreal pods, users: apply -> Ready {ready_s:.1f} s with authentication; orders-app produced "
            f"and consumed {over}, audit-app denied, orders-app revoked {revoked_s:.1f} s after the delete"
        )
