"""``orbitmq-operator`` in pods: in-cluster config, its own RBAC, kopf peering between two replicas.

On the test bed's real node (runs as root on Linux by default, see conftest.py). Pods reach the
API server as in any cluster: ``KUBERNETES_SERVICE_HOST`` is the ``kubernetes`` Service's
ClusterIP, which kube-proxy sends to the API server at the node IP, and the service account's
projected token and ``kube-root-ca.crt`` authenticate it (``scripts/k8s-testbed``,
``apiserver_address_flags``).

The operator runs as a Deployment of two replicas under the ServiceAccount and rules of
:func:`orbitmq_operator.rbac.rbac_manifests`, logging in with its service account (kopf and
lightkube both do when ``KUBERNETES_SERVICE_HOST`` is set) and reaching name servers by their
Service's DNS name (``--namesrv-mode service``, the default). Exactly one replica acts: the
peering object lists both, the other logs that it pauses and never touches the cluster. When
the acting pod is deleted the other resumes and reconciles the next spec change.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from k8s_testbed_support import K8sCluster
from operatorkit import get, install_crds, wait_condition
from realpods import (
    VENV_BIN,
    cluster_cr,
    create_namespace,
    delete_host_volumes,
    host_volumes,
    pod_settings,
    wait_ready,
)

from orbitmq_operator.rbac import rbac_manifests

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(480, func_only=True)]

CLUSTER = "ic"
BROKERS = {"groups": 1, "slavesPerGroup": 0, "replicationMode": "ASYNC_MASTER"}  # SYNC needs a slave
PEERING = "orbitmq-operator"
APP = {"app.kubernetes.io/name": "orbitmq-operator-e2e"}
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
CALL_API = f"""
import json, os, ssl, urllib.request
ctx = ssl.create_default_context(cafile="{SERVICE_ACCOUNT_DIR}/ca.crt")
token = open("{SERVICE_ACCOUNT_DIR}/token").read()
url = "https://kubernetes.default.svc/api"
req = urllib.request.Request(url, headers={{"Authorization": "Bearer " + token}})
with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
    print(json.dumps({{"status": resp.status, "body": json.loads(resp.read()),
                      "host": os.environ["KUBERNETES_SERVICE_HOST"]}}))
"""


def host_python(k8s: K8sCluster) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts) of the host paths the real node's image runs Python from."""
    settings = pod_settings(k8s)
    return settings["volumes"], settings["volumeMounts"]


def test_a_pod_calls_the_api_server_in_cluster(k8s_real_node: K8sCluster) -> None:
    """A pod's service-account token and CA, ``kubernetes.default.svc`` (CoreDNS) and 10.96.0.1:443
    (kube-proxy to the API server at the node IP)."""
    k8s = k8s_real_node
    ns = create_namespace(k8s, "e2e-in-cluster-api")
    volumes, mounts = host_python(k8s)
    node = k8s.info["real_node"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "call-api"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": node["labels"],
            "volumes": volumes,
            "containers": [
                {
                    "name": "call",
                    "image": node["image"],
                    "imagePullPolicy": "Never",
                    "args": ["-c", CALL_API],  # the image's entrypoint is the host's Python
                    "volumeMounts": mounts,
                }
            ],
        },
    }
    try:
        started = time.monotonic()
        k8s.apply(pod, namespace=ns)
        k8s.wait_for(
            "pod call-api Succeeded",
            lambda: get_pod(k8s, ns, "call-api")["status"].get("phase") in ("Succeeded", "Failed"),
            timeout=90,
        )
        logs = k8s.kubectl("logs", "call-api", "-n", ns).stdout
        assert get_pod(k8s, ns, "call-api")["status"]["phase"] == "Succeeded", logs
        answer = json.loads(logs.strip().splitlines()[-1])
        print(f"\nin-cluster GET /api from a pod: {answer} in {time.monotonic() - started:.1f}s")
        assert answer["status"] == 200 and answer["body"]["kind"] == "APIVersions"
        assert answer["host"] == "10.96.0.1"
    finally:
        k8s.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def get_pod(k8s: K8sCluster, ns: str, name: str) -> dict[str, Any]:
    result = k8s.kubectl("get", "pod", name, "-n", ns, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else {"status": {}}


def operator_deployment(k8s: K8sCluster, ns: str, service_account: str) -> dict[str, Any]:
    """Two replicas of ``orbitmq-operator --namespace <ns>`` (peering on) on the real node."""
    node = k8s.info["real_node"]
    volumes, mounts = host_python(k8s)
    probe = {"httpGet": {"path": "/healthz", "port": "healthz"}, "periodSeconds": 5, "timeoutSeconds": 3}
    container = {
        "name": "operator",
        "image": node["image"],
        "imagePullPolicy": "Never",
        "command": ["/usr/bin/env", "orbitmq-operator"],  # the image's PATH starts with the venv's bin
        "args": ["--namespace", ns],
        "env": [
            # kopf's peering identity: the pod's name
            {"name": "POD_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "ORBITMQ_OPERATOR_CLUSTER_RESYNC_S", "value": "2"},
            {"name": "ORBITMQ_OPERATOR_RESOURCE_RESYNC_S", "value": "2"},
        ],
        "ports": [
            {"name": "healthz", "containerPort": 8081},
            {"name": "metrics", "containerPort": 8080},
        ],
        "livenessProbe": {**probe, "failureThreshold": 3},
        "readinessProbe": {**probe, "periodSeconds": 2},
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": 10001,
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [*mounts, {"name": "tmp", "mountPath": "/tmp"}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "orbitmq-operator", "labels": APP},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": APP},
            "template": {
                "metadata": {"labels": APP},
                "spec": {
                    "serviceAccountName": service_account,
                    "nodeSelector": node["labels"],
                    "terminationGracePeriodSeconds": 10,
                    "volumes": [*volumes, {"name": "tmp", "emptyDir": {}}],
                    "containers": [container],
                },
            },
        },
    }


def topic_cr(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "orbitmq.io/v1alpha1",
        "kind": "OrbitMQTopic",
        "metadata": {"name": name.lower()},
        "spec": {"cluster": CLUSTER, "topicName": name, "readQueues": 2, "writeQueues": 2},
    }


def operator_pods(k8s: K8sCluster, ns: str) -> dict[str, dict[str, Any]]:
    items = k8s.get_json("pods", "-n", ns, "-l", "app.kubernetes.io/name=orbitmq-operator-e2e")["items"]
    return {p["metadata"]["name"]: p for p in items if not p["metadata"].get("deletionTimestamp")}


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def peers(k8s: K8sCluster, ns: str) -> dict[str, dict[str, Any]]:
    """The live entries of the KopfPeering object: identity (the pod's name) -> priority, ..."""
    result = k8s.kubectl("get", "kopfpeerings.kopf.dev", PEERING, "-n", ns, "-o", "json", check=False)
    if result.returncode != 0:
        return {}
    return dict(json.loads(result.stdout).get("status") or {})


def logs(k8s: K8sCluster, ns: str, pod: str) -> list[tuple[datetime.datetime, str]]:
    """The pod's log lines with the kubelet's timestamps."""
    out = k8s.kubectl("logs", pod, "-n", ns, "--timestamps", check=False).stdout
    lines = []
    for line in out.splitlines():
        stamp, _, text = line.partition(" ")
        try:
            lines.append((datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")), text))
        except ValueError:
            continue
    return lines


def acted_on(lines: list[tuple[datetime.datetime, str]], ns: str) -> list[tuple[datetime.datetime, str]]:
    """Lines of handler activity on the namespace's orbitmq objects (kopf's per-object lines, the
    reconciler's "applied <kind> <ns>/<name>")."""
    return [(t, text) for t, text in lines if f"[{ns}/" in text or f" {ns}/{CLUSTER}" in text]


def first(lines: list[tuple[datetime.datetime, str]], needle: str) -> datetime.datetime | None:
    return next((t for t, text in lines if needle in text), None)


def acting(lines: list[tuple[datetime.datetime, str]]) -> bool:
    """Whether kopf's last word on peering was to act: with mandatory peering a replica starts
    paused and logs only "Resuming operations" when it finds no peer of higher priority, and
    "Pausing operations in favour of" when one shows up later."""
    state = False
    for _, text in lines:
        if "Resuming operations" in text:
            state = True
        elif "Pausing operations" in text:
            state = False
    return state


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def test_two_operator_replicas_in_pods_one_acts_the_other_takes_over(
    k8s_real_node: K8sCluster, tmp_path: Path
) -> None:
    k8s = k8s_real_node
    timings: dict[str, float] = {}
    install_crds(k8s)
    peering_crds = subprocess.run(
        [str(VENV_BIN / "orbitmq-operator"), "--print-peering-crds"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    k8s.kubectl("apply", "-f", "-", input=peering_crds)
    k8s.kubectl("wait", "--for=condition=Established", "crd/kopfpeerings.kopf.dev", "--timeout=60s")
    ns = create_namespace(k8s, "e2e-in-cluster")
    account = f"orbitmq-operator-{ns}"  # its ClusterRoles are cluster-wide: one name per test
    grants = rbac_manifests(ns, [ns], name=account)
    k8s.apply(*grants)
    # the peering object, as the chart makes it (the operator only waits for it)
    peering = subprocess.run(
        [str(VENV_BIN / "orbitmq-operator"), "-n", ns, "--peering", PEERING, "--print-peering"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    k8s.kubectl("apply", "-f", "-", input=peering)
    host_volumes(k8s, ns, CLUSTER, groups=2, replicas=1, root=tmp_path / "volumes")
    pods: dict[str, dict[str, Any]] = {}
    try:
        started = time.monotonic()
        k8s.apply(operator_deployment(k8s, ns, account), namespace=ns)

        def both_ready() -> bool:
            pods.update(operator_pods(k8s, ns))
            return len(pods) == 2 and all(ready(p) for p in pods.values())

        k8s.wait_for("2 operator replicas Ready (/healthz)", both_ready, timeout=90)
        timings["replicas ready"] = time.monotonic() - started
        names = set(pods)
        k8s.wait_for("both replicas in the KopfPeering", lambda: set(peers(k8s, ns)) == names, timeout=60)
        listed = peers(k8s, ns)
        active = max(listed, key=lambda p: listed[p]["priority"])
        (passive,) = names - {active}
        k8s.wait_for(
            f"{active} acting, {passive} paused",
            lambda: (acting(logs(k8s, ns, active)), acting(logs(k8s, ns, passive))) == (True, False),
            timeout=60,
        )
        timings["peering settled"] = time.monotonic() - started
        print(f"\npeering: {json.dumps(listed)}; acting: {active}")

        # the operator, in its pod, makes a cluster of real pods Ready
        applied = time.monotonic()
        k8s.apply(cluster_cr(k8s, CLUSTER, BROKERS), namespace=ns)
        wait_ready(k8s, ns, CLUSTER)
        timings["cluster Ready"] = time.monotonic() - applied
        k8s.apply(topic_cr("InClusterOrders"), namespace=ns)
        wait_condition(k8s, ns, "orbitmqtopics", "inclusterorders", "Ready", "True", "Applied", timeout=60)
        timings["topic Applied (name servers by DNS)"] = time.monotonic() - applied - timings["cluster Ready"]
        active_log, passive_log = logs(k8s, ns, active), logs(k8s, ns, passive)
        assert acted_on(active_log, ns), [t for _, t in active_log][-40:]
        assert not acted_on(passive_log, ns), acted_on(passive_log, ns)
        assert acting(active_log) and not acting(passive_log)
        for lines in (active_log, passive_log):
            texts = [text for _, text in lines]
            # in-cluster config, and the RBAC of orbitmq_operator.rbac is enough for kopf and us
            assert any("Activity 'login_with_service_account' succeeded" in t for t in texts), texts[:20]
            denied = [t for t in texts if "Forbidden" in t or " 403 " in t or "Not enough permissions" in t]
            assert not denied, denied

        # the acting pod goes: the ReplicaSet deletes the pod of lowest deletion cost first,
        # so scaling to 1 deletes exactly that pod (and starts no replacement to compete)
        k8s.kubectl(
            "annotate",
            "pod",
            active,
            "-n",
            ns,
            "controller.kubernetes.io/pod-deletion-cost=-1000",
            "--overwrite",
        )
        gone_at = now()
        k8s.kubectl("scale", "deployment", "orbitmq-operator", "-n", ns, "--replicas=1")
        k8s.wait_for(f"{passive} resuming", lambda: acting(logs(k8s, ns, passive)), timeout=90)
        resumed = [t for t, text in logs(k8s, ns, passive) if "Resuming operations" in text][-1]
        assert resumed > gone_at
        timings["takeover (delete -> other resumes)"] = (resumed - gone_at).total_seconds()
        k8s.wait_for(f"{active} deleted", lambda: active not in operator_pods(k8s, ns), timeout=60)
        assert set(peers(k8s, ns)) == {passive}  # the leaver removed itself from the peering
        print(
            f"{active} deleted; {passive} resumed {timings['takeover (delete -> other resumes)']:.2f}s later"
        )

        # the survivor reconciles the next spec change: a second broker group, then a topic
        changed = time.monotonic()
        k8s.kubectl("scale", f"orbitmqclusters.orbitmq.io/{CLUSTER}", "-n", ns, "--replicas=2")
        k8s.wait_for(
            "2 broker groups Ready",
            lambda: (
                (get(k8s, ns, "orbitmqclusters", CLUSTER).get("status") or {}).get("brokerGroupsReady") == 2
            ),
            timeout=150,
        )
        wait_ready(k8s, ns, CLUSTER)
        timings["scaled to 2 groups by the survivor"] = time.monotonic() - changed
        k8s.apply(topic_cr("AfterTakeover"), namespace=ns)
        wait_condition(k8s, ns, "orbitmqtopics", "aftertakeover", "Ready", "True", "Applied", timeout=60)
        status = get(k8s, ns, "orbitmqtopics", "aftertakeover")["status"]
        survivor_log = logs(k8s, ns, passive)
        assert [t for t, _ in acted_on(survivor_log, ns) if t < resumed] == []
        assert any(
            "applied StatefulSet" in text and f"{CLUSTER}-broker-1" in text for _, text in survivor_log
        )
        restarts = [s["restartCount"] for s in operator_pods(k8s, ns)[passive]["status"]["containerStatuses"]]
        assert restarts == [0]  # the liveness probe found it alive all along
        print(f"topic after takeover: {status.get('conditions')}")
        print("timings: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()))
    except BaseException:
        for pod in pods:
            text = k8s.kubectl("logs", pod, "-n", ns, check=False).stdout
            print(f"--- {pod} ---\n" + "\n".join(text.splitlines()[:60]) + "\n...\n" + text[-6000:])
        raise
    finally:
        # topics, then clusters, while an operator still runs (their finalizers), then the rest
        k8s.kubectl("delete", "orbitmqtopics.orbitmq.io", "--all", "-n", ns, "--timeout=30s", check=False)
        k8s.kubectl("delete", "orbitmqclusters.orbitmq.io", "--all", "-n", ns, "--timeout=60s", check=False)
        k8s.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        delete_host_volumes(k8s, ns)
        for obj in grants:
            if "namespace" not in obj["metadata"]:
                k8s.kubectl("delete", obj["kind"].lower(), obj["metadata"]["name"], check=False)
