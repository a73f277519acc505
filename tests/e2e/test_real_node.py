"""orbitmq pods as real containers on the test bed's real node (runs as root on Linux by default).

A name server behind a ClusterIP Service and a broker StatefulSet (with its headless Service)
whose commit log lives on a hostPath PersistentVolume bound through a volumeClaimTemplate.
The broker is given the name server by the Service's DNS name, `namesrv.<ns>.svc:9876`, as
the operator's pods are, so the node's CoreDNS and kube-proxy's rules are on its path; a pod
also resolves the broker's per-pod name `broker-0.broker.<ns>.svc` through the headless
Service.  Both pods become Ready through the kubelet's gRPC probe on the standard health
service; the test's own client reaches them over the bridge (pod IPs are routable from the
host), produces and consumes, then SIGKILLs the broker's process and checks that kubelet
restarts the container and the restarted broker still has the messages.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from k8s_testbed_support import K8sCluster
from realpods import hostpath_volume, pod_settings

from orbitmq.client import ConsumeFromWhere, ConsumeStatus, Message, Producer, PushConsumer

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300, func_only=True)]

NAMESRV_PORT = 9876
BROKER_PORT = 10911
TOPIC = "RealNodeTopic"


def _on_real_node(
    cluster: K8sCluster, pod_spec: dict[str, Any], volumes: list[dict[str, Any]]
) -> dict[str, Any]:
    """Pin a pod spec to the real node and mount the host paths the orbitmq image runs from."""
    node = cluster.info["real_node"]
    settings = pod_settings(cluster)
    mounts, host_volumes = settings["volumeMounts"], settings["volumes"]
    for container in pod_spec["containers"]:
        container.setdefault("image", node["image"])
        container.setdefault("imagePullPolicy", "Never")  # imported locally; there is no registry
        container["volumeMounts"] = [*mounts, *container.get("volumeMounts", [])]
        container["env"] = [*container.get("env", []), *settings["env"]]
    return {
        **pod_spec,
        "nodeSelector": node["labels"],
        "terminationGracePeriodSeconds": 5,
        "volumes": [*host_volumes, *volumes],
    }


def _server(
    name: str, port: int, args: list[str], mounts: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A container running `orbitmq <args>`, Ready when its gRPC health service says SERVING."""
    probe = {"grpc": {"port": port}, "periodSeconds": 1, "timeoutSeconds": 2, "failureThreshold": 3}
    return {
        "name": name,
        "command": ["/usr/bin/env", "orbitmq", *args],  # PATH starts with the venv's bin
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "grpc", "containerPort": port}],
        "readinessProbe": probe,
        "livenessProbe": {**probe, "periodSeconds": 5},
        "volumeMounts": mounts or [],
    }


def _wait_ready(
    cluster: K8sCluster, ns: str, pod: str, restarts: int = 0, timeout: float = 120
) -> dict[str, Any]:
    """Wait until the pod is Ready with at least `restarts` restarts; return it."""
    found: dict[str, Any] = {}

    def ready() -> bool:
        result = cluster.kubectl("get", "pod", pod, "-n", ns, "-o", "json", check=False)
        if result.returncode != 0:
            return False
        found.update(json.loads(result.stdout))
        statuses = found.get("status", {}).get("containerStatuses") or []
        conditions = found.get("status", {}).get("conditions") or []
        return (
            bool(statuses)
            and all(s.get("ready") and s.get("restartCount", 0) >= restarts for s in statuses)
            and any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        )

    try:
        cluster.wait_for(f"pod {ns}/{pod} Ready (restarts >= {restarts})", ready, timeout=timeout)
    except BaseException:
        print(cluster.kubectl("describe", "pod", pod, "-n", ns, check=False).stdout[-3000:])
        for previous in ("--previous=false", "--previous=true"):
            logs = cluster.kubectl("logs", pod, "-n", ns, "--all-containers", previous, check=False)
            print(f"--- logs {previous}:\n{logs.stdout[-3000:]}{logs.stderr[-500:]}")
        raise
    return found


async def _produce(namesrv: str, bodies: list[str]) -> None:
    async with Producer("real-node-producer", namesrv) as producer:
        for body in bodies:
            await producer.send(Message(TOPIC, body.encode()))


async def _consume(namesrv: str, group: str, expected: int) -> list[str]:
    seen: list[str] = []
    done = asyncio.Event()

    def on_messages(messages: list[Any]) -> ConsumeStatus:
        seen.extend(m.body.decode() for m in messages)
        if len(seen) >= expected:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(group, namesrv, listener=on_messages, consume_from=ConsumeFromWhere.FIRST_OFFSET)
    consumer.subscribe(TOPIC, "*")
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), 60)
    finally:
        await consumer.close()
    return seen


def _container_pid(cluster: K8sCluster, pod: dict[str, Any]) -> int:
    """Host PID of the pod's (first) container, from containerd's task list."""
    container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    ctr = cluster.info["real_node"]["ctr"].split()
    out = subprocess.run([*ctr, "tasks", "ls"], capture_output=True, text=True, check=True, timeout=30).stdout
    for line in out.splitlines()[1:]:
        task, pid, _status = line.split()
        if task == container_id:
            return int(pid)
    raise AssertionError(f"no containerd task for {container_id}:\n{out}")


# Run inside a pod: resolve each name with the pod's resolver (its resolv.conf from kubelet:
# the node's CoreDNS and the cluster search list) and report the address and how long it took.
RESOLVE = """
import json, socket, sys, time
result = {}
for name in sys.argv[1:]:
    started = time.monotonic()
    try:
        address = socket.gethostbyname(name)
    except OSError as exc:
        address = f"error: {exc}"
    result[name] = [address, round(time.monotonic() - started, 3)]
print(json.dumps(result))
"""


def _resolve_in_pod(cluster: K8sCluster, ns: str, pod: str, *names: str) -> dict[str, list[Any]]:
    """{name: [address or "error: ...", seconds]} as resolved inside the pod's first container."""
    result = cluster.kubectl(
        "exec", pod, "-n", ns, "--", "/usr/bin/env", "python", "-c", RESOLVE, *names, timeout=60
    )
    return json.loads(result.stdout)


def test_orbitmq_pods_run_produce_consume_and_restart(k8s_real_node: K8sCluster, tmp_path: Path) -> None:
    cluster = k8s_real_node
    ns = f"e2e-real-node-{os.urandom(2).hex()}"
    cluster.kubectl("create", "namespace", ns)
    cluster.wait_for(
        f"ServiceAccount {ns}/default",
        lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", ns, check=False).returncode == 0,
    )
    data = tmp_path / "broker-data"
    try:
        namesrv_args = ["namesrv", f"--listen=0.0.0.0:{NAMESRV_PORT}", "--metrics-listen="]
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "namesrv"},
                "spec": {"selector": {"app": "namesrv"}, "ports": [{"name": "grpc", "port": NAMESRV_PORT}]},
            },
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "namesrv", "labels": {"app": "namesrv"}},
                "spec": _on_real_node(
                    cluster, {"containers": [_server("namesrv", NAMESRV_PORT, namesrv_args)]}, []
                ),
            },
            namespace=ns,
        )
        started = time.monotonic()
        namesrv_pod = _wait_ready(cluster, ns, "namesrv")
        namesrv_ready_s = time.monotonic() - started
        cluster_ip = cluster.get_json("service", "namesrv", "-n", ns)["spec"]["clusterIP"]
        namesrv_dns = f"namesrv.{ns}.svc"  # the form the operator gives its pods (search list)

        storage_class = f"{ns}-hostpath"
        broker_args = [
            "broker",
            f"--listen=0.0.0.0:{BROKER_PORT}",
            "--metrics-listen=",
            f"--namesrv={namesrv_dns}:{NAMESRV_PORT}",  # CoreDNS, then kube-proxy's DNAT
            "--broker-name=broker-a",
            "--broker-id=0",
            "--data-dir=/var/lib/orbitmq/data",
            "--segment-bytes=16777216",  # 16 MiB: small, still holds a max-size message
            f"--advertise-addr=$(POD_IP):{BROKER_PORT}",
        ]
        broker = _server(
            "broker", BROKER_PORT, broker_args, [{"name": "data", "mountPath": "/var/lib/orbitmq"}]
        )
        node = cluster.info["real_node"]["name"]
        cluster.apply(hostpath_volume(f"{ns}-broker-data", data, storage_class, node))
        cluster.apply(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": "broker"},
                "spec": {
                    "clusterIP": "None",  # headless: a DNS name per pod, broker-0.broker.<ns>.svc
                    "selector": {"app": "broker"},
                    "ports": [{"name": "grpc", "port": BROKER_PORT}],
                },
            },
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": "broker"},
                "spec": {
                    "serviceName": "broker",
                    "replicas": 1,
                    "selector": {"matchLabels": {"app": "broker"}},
                    "template": {
                        "metadata": {"labels": {"app": "broker"}},
                        "spec": _on_real_node(cluster, {"containers": [broker]}, []),
                    },
                    "volumeClaimTemplates": [
                        {
                            "metadata": {"name": "data"},
                            "spec": {
                                "accessModes": ["ReadWriteOnce"],
                                "storageClassName": storage_class,
                                "resources": {"requests": {"storage": "1Gi"}},
                            },
                        }
                    ],
                },
            },
            namespace=ns,
        )
        started = time.monotonic()
        broker_pod = _wait_ready(cluster, ns, "broker-0")
        broker_ready_s = time.monotonic() - started
        pvc = cluster.get_json("pvc", "data-broker-0", "-n", ns)
        assert pvc["status"]["phase"] == "Bound" and pvc["spec"]["volumeName"] == f"{ns}-broker-data"

        # Cluster DNS from inside a pod: the Service name, the headless per-pod name (both with
        # the `.svc` suffix the search list completes) and, quickly, no answer for other names.
        broker_dns = f"broker-0.broker.{ns}.svc"
        outside = "no-such-host.invalid"
        resolved: dict[str, list[Any]] = {}

        def broker_resolves() -> bool:  # its EndpointSlice may reach CoreDNS just after Ready
            resolved.update(_resolve_in_pod(cluster, ns, "namesrv", namesrv_dns, broker_dns, outside))
            return bool(resolved[broker_dns][0] == broker_pod["status"]["podIP"])

        cluster.wait_for(f"{broker_dns} resolving to the broker pod IP in a pod", broker_resolves, timeout=30)
        assert resolved[namesrv_dns][0] == cluster_ip, resolved
        assert resolved[broker_dns][0] == broker_pod["status"]["podIP"], resolved
        assert resolved[outside][0].startswith("error"), resolved
        assert resolved[outside][1] < 3, f"a name outside the cluster took too long to fail: {resolved}"

        # The client runs here on the host: the name server's pod IP is reachable over the bridge,
        # and the route it returns names the broker by its pod IP.
        namesrv = f"{namesrv_pod['status']['podIP']}:{NAMESRV_PORT}"
        before = [f"before-{i}" for i in range(20)]
        asyncio.run(_produce(namesrv, before))
        assert sorted(asyncio.run(_consume(namesrv, "real-node-group-1", len(before)))) == sorted(before)
        assert list((data / "data").iterdir()), "the broker wrote nothing to its PersistentVolume"

        pid = _container_pid(cluster, broker_pod)
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        restarted = _wait_ready(cluster, ns, "broker-0", restarts=1)
        restart_ready_s = time.monotonic() - killed
        assert restarted["status"]["containerStatuses"][0]["restartCount"] >= 1
        assert restarted["status"]["podIP"] == broker_pod["status"]["podIP"]  # same sandbox

        after = ["after-0", "after-1"]
        asyncio.run(_produce(namesrv, after))
        seen = asyncio.run(_consume(namesrv, "real-node-group-2", len(before) + len(after)))
        assert sorted(seen) == sorted(before + after)  # the commit log survived on the PV
        print(
            f"\nreal node: name server Ready {namesrv_ready_s:.1f}s, broker Ready {broker_ready_s:.1f}s "
            f"after apply; broker SIGKILLed -> restarted and Ready in {restart_ready_s:.1f}s; "
            f"DNS in a pod (seconds): {json.dumps({k: v[1] for k, v in resolved.items()})}"
        )
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        cluster.kubectl("delete", "pv", f"{ns}-broker-data", "--wait=false", check=False)


def test_a_claim_without_a_class_binds_on_the_real_node(k8s_real_node: K8sCluster) -> None:
    """The install of docs/operations/kubernetes.md names no storage class: the test bed's default
    class and its hostPath provisioner bind such a claim (it stayed Pending before), the pod's uid 10001 may
    write there, and deleting the claim deletes the volume and its directory."""
    cluster = k8s_real_node
    ns = f"e2e-storage-{os.urandom(2).hex()}"
    cluster.kubectl("create", "namespace", ns)
    cluster.wait_for(
        f"ServiceAccount {ns}/default",
        lambda: cluster.kubectl("get", "serviceaccount", "default", "-n", ns, check=False).returncode == 0,
    )
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    writer = {
        "name": "writer",
        "command": ["/usr/bin/env", "python", "-c", "open('/data/probe', 'w').write('ok')"],
        "securityContext": {"runAsUser": 10001, "runAsNonRoot": True},
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "writer"},
        "spec": _on_real_node(
            cluster,
            {"containers": [writer], "restartPolicy": "Never"},
            [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        ),
    }
    try:
        started = time.monotonic()
        cluster.apply(claim, pod, namespace=ns)

        def phase() -> str:
            found = cluster.kubectl("get", "pod", "writer", "-n", ns, "-o", "json", check=False)
            return json.loads(found.stdout)["status"].get("phase", "") if found.returncode == 0 else ""

        cluster.wait_for("the writer pod to succeed", lambda: phase() in ("Succeeded", "Failed"), timeout=90)
        took = time.monotonic() - started
        bound = cluster.get_json("pvc", "data", "-n", ns)
        assert phase() == "Succeeded", cluster.kubectl("describe", "pod", "writer", "-n", ns).stdout
        assert bound["status"]["phase"] == "Bound"
        assert bound["spec"]["storageClassName"] == cluster.info["real_node"]["storage_class"]
        volume = cluster.get_json("pv", bound["spec"]["volumeName"])
        directory = Path(volume["spec"]["hostPath"]["path"])
        assert (directory / "probe").read_text() == "ok"
        print(f"\nclaim without a class: bound and written by uid 10001 in {took:.1f}s at {directory}")

        cluster.kubectl("delete", "pod", "writer", "-n", ns, "--wait=true", "--timeout=60s")
        cluster.kubectl("delete", "pvc", "data", "-n", ns, "--wait=true", "--timeout=60s")
        cluster.wait_for(
            f"PersistentVolume {volume['metadata']['name']} deleted",
            lambda: cluster.kubectl("get", "pv", volume["metadata"]["name"], check=False).returncode != 0,
            timeout=60,
        )
        assert not directory.exists()
    finally:
        cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)
