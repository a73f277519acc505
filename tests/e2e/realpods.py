"""The operator against real pods on the test bed's real node: what its e2e tests and
``benchmarks/operator_bench.py`` share.

The operator runs as its own process (``orbitmq-operator``, out of the cluster with the test
bed's kubeconfig, reaching name servers by pod IP as an operator outside the pod network
would); the orbitmq image of the real node runs from the host's Python, so every cluster
resource mounts it through ``spec.pod`` and is pinned to the real node; broker data lives on
hostPath PersistentVolumes made here for each PVC of the StatefulSets' claim templates.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from k8s_testbed_support import K8sCluster
from operatorkit import get, install_crds

from orbitmq.client import Message, Producer, SendStatus
from orbitmq.v1 import broker_pb2, broker_pb2_grpc

VENV_BIN = Path(sys.executable).parent
STORAGE_CLASS = "orbitmq-host"
RUN_AS = 10001  # the builders' non-root uid (builders.common.RUN_AS_USER)
RESYNC_S = "2"


def create_namespace(k8s: K8sCluster, prefix: str) -> str:
    name = f"{prefix}-{os.urandom(2).hex()}"
    k8s.kubectl("create", "namespace", name)
    k8s.wait_for(
        f"ServiceAccount {name}/default",
        lambda: k8s.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
    )
    return name


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def operator_process(k8s: K8sCluster, namespace: str, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``orbitmq-operator`` watching ``namespace``; its log goes to ``log`` (shown on failure)."""
    install_crds(k8s)
    metrics_port = free_port()
    env = {
        **k8s.env,
        "ORBITMQ_OPERATOR_CLUSTER_RESYNC_S": RESYNC_S,
        "ORBITMQ_OPERATOR_RESOURCE_RESYNC_S": RESYNC_S,
    }
    args = [
        str(VENV_BIN / "orbitmq-operator"),
        "--namespace",
        namespace,
        "--standalone",
        "--namesrv-mode",
        "pod-ip",
        "--metrics-port",
        str(metrics_port),
        "--liveness",
        "",
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT)
    proc.metrics_port = metrics_port  # type: ignore[attr-defined]
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def cluster_deleted_at_exit(k8s: K8sCluster, namespace: str) -> Iterator[None]:
    """Delete the namespace's clusters while the operator still runs (its finalizers)."""
    try:
        yield
    finally:
        k8s.kubectl(
            "delete", "orbitmqclusters.orbitmq.io", "--all", "-n", namespace, "--timeout=60s", check=False
        )


@contextlib.contextmanager
def operated_namespace(k8s: K8sCluster, prefix: str, workdir: Path) -> Iterator[str]:
    """A new namespace watched by an operator process; on the way out its clusters are deleted
    (while the operator runs), then the namespace and its volumes; the operator's log is
    printed when the block failed."""
    namespace = create_namespace(k8s, prefix)
    log = workdir / "operator.log"
    try:
        with operator_process(k8s, namespace, log), cluster_deleted_at_exit(k8s, namespace):
            yield namespace
    except BaseException:
        print(log.read_text(errors="replace")[-20000:])
        raise
    finally:
        k8s.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        delete_host_volumes(k8s, namespace)


def pod_settings(k8s: K8sCluster) -> dict[str, Any]:
    """``spec.pod`` that runs orbitmq pods on the real node from the host's Python."""
    node = k8s.info["real_node"]
    paths = node["host_mounts"]
    return {
        "nodeSelector": node["labels"],
        "volumes": [
            {"name": f"host-{i}", "hostPath": {"path": path, "type": "Directory"}}
            for i, path in enumerate(paths)
        ],
        "volumeMounts": [
            {"name": f"host-{i}", "mountPath": path, "readOnly": True} for i, path in enumerate(paths)
        ],
        "env": suite_disk_env(),
    }


def suite_disk_env() -> list[dict[str, str]]:
    """The suite's disk ratios (``ORBITMQ_BROKER_DISK_*``, set by tests/conftest.py) for brokers
    in pods too: their host-path stores share the test machine's disk with other work."""
    return [
        {"name": name, "value": value}
        for name, value in sorted(os.environ.items())
        if name.startswith("ORBITMQ_BROKER_DISK_")
    ]


def cluster_cr(k8s: K8sCluster, name: str, brokers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """An ``OrbitMQCluster`` of real pods: the real node's image, host-path storage."""
    storage = {"size": "1Gi", "storageClassName": STORAGE_CLASS}
    return {
        "apiVersion": "orbitmq.io/v1alpha1",
        "kind": "OrbitMQCluster",
        "metadata": {"name": name},
        "spec": {
            "image": k8s.info["real_node"]["image"],
            "imagePullPolicy": "Never",  # imported into containerd; there is no registry
            "nameServers": {"replicas": 1},
            "brokers": {"segmentMib": 16, "storage": storage, **brokers},
            "pod": pod_settings(k8s),
            **spec,
        },
    }


def hostpath_volume(
    name: str, path: Path, storage_class: str, node: str, claim: tuple[str, str] | None = None
) -> dict[str, Any]:
    """A PersistentVolume on ``node``'s ``path`` (no provisioner on the test bed); ``claim``
    (namespace, PVC name) binds it in advance to the PVC a StatefulSet will make."""
    selector = {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}
    spec: dict[str, Any] = {
        "capacity": {"storage": "1Gi"},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": storage_class,
        "persistentVolumeReclaimPolicy": "Retain",
        "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
        "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [selector]}]}},
    }
    if claim is not None:
        spec["claimRef"] = {"namespace": claim[0], "name": claim[1]}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name}, "spec": spec}


def host_volumes(
    k8s: K8sCluster, namespace: str, cluster: str, groups: int, replicas: int, root: Path
) -> None:
    """A hostPath PersistentVolume bound in advance to each PVC the brokers' StatefulSets will
    claim (``data-<cluster>-broker-<group>-<ordinal>``); owned by the pods' non-root uid, as
    fsGroup does not apply to hostPath volumes."""
    volumes = []
    for group in range(groups):
        for ordinal in range(replicas):
            claim = f"data-{cluster}-broker-{group}-{ordinal}"
            path = root / claim
            path.mkdir(parents=True, exist_ok=True)
            os.chown(path, RUN_AS, RUN_AS)
            node = k8s.info["real_node"]["name"]
            volumes.append(
                hostpath_volume(f"{namespace}-{claim}", path, STORAGE_CLASS, node, (namespace, claim))
            )
    k8s.apply(*volumes)
    os.chmod(root, 0o755)


def delete_host_volumes(k8s: K8sCluster, namespace: str) -> None:
    names = [
        pv["metadata"]["name"]
        for pv in k8s.get_json("persistentvolumes")["items"]
        if pv["metadata"]["name"].startswith(f"{namespace}-")
    ]
    if names:
        k8s.kubectl("delete", "persistentvolume", "--wait=false", *names, check=False)


def is_ready(cluster: dict[str, Any]) -> bool:
    """Ready=True for the cluster resource's current generation."""
    status = cluster.get("status") or {}
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    return (
        conditions.get("Ready", {}).get("status") == "True"
        and status.get("observedGeneration") == cluster["metadata"]["generation"]
    )


def wait_ready(k8s: K8sCluster, namespace: str, name: str, timeout: float = 180) -> dict[str, Any]:
    """The cluster resource once it :func:`is_ready`."""
    found: dict[str, Any] = {}

    def ready() -> bool:
        nonlocal found
        found = get(k8s, namespace, "orbitmqclusters", name)
        return is_ready(found)

    k8s.wait_for(f"OrbitMQCluster {namespace}/{name} Ready", ready, timeout=timeout)
    return found


def group_status(k8s: K8sCluster, namespace: str, cluster: str, group: str) -> dict[str, Any]:
    status = get(k8s, namespace, "orbitmqclusters", cluster).get("status") or {}
    return next((g for g in status.get("brokerGroups") or [] if g["name"] == group), {})


def namesrv_address(k8s: K8sCluster, namespace: str, cluster: str) -> str:
    """The name servers as the test (on the host, outside the cluster's DNS) reaches them."""
    pods = k8s.get_json(
        "pods",
        "-n",
        namespace,
        "-l",
        f"app.kubernetes.io/instance={cluster},app.kubernetes.io/component=namesrv",
    )["items"]
    return ";".join(f"{p['status']['podIP']}:9876" for p in pods if p["status"].get("podIP"))


def pod_pids(pod_uid: str, needle: str) -> list[int]:
    """Host PIDs of a pod's processes whose command line holds ``needle`` (its cgroup path
    names the pod's UID under the kubelet's cgroupfs driver)."""
    marker = "pod" + pod_uid
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cgroups = (entry / "cgroup").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cgroups and needle in cmdline:
            found.append(int(entry.name))
    return found


def kill_pod_process(k8s: K8sCluster, namespace: str, pod: str, needle: str = "orbitmq") -> int:
    """SIGKILL the pod's ``needle`` process(es) as a crash would; returns how many were killed."""
    uid = k8s.get_json("pod", pod, "-n", namespace)["metadata"]["uid"]
    pids = pod_pids(uid, needle)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def keep_down(k8s: K8sCluster, namespace: str, pod: str, until: Any, timeout: float) -> int:
    """SIGKILL the pod's broker whenever the kubelet restarts it, until ``until()`` holds (a
    crash loop: the kubelet's back-off then keeps it down for 10 s and more). Returns kills."""
    uid = k8s.get_json("pod", pod, "-n", namespace)["metadata"]["uid"]
    kills, deadline = 0, time.monotonic() + timeout
    while not until():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up keeping {pod} down after {timeout:.0f} s")
        for pid in pod_pids(uid, "broker"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
                kills += 1
        time.sleep(0.05)
    return kills


@dataclass
class Ack:
    at: float
    body: str
    status: SendStatus
    broker: str


@dataclass
class Senders:
    """``count`` tasks sending to ``topic`` back to back through one producer, recording every
    acknowledgement and every send that still failed after the client's retries."""

    producer: Producer
    topic: str
    count: int
    acked: list[Ack] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._tasks = [asyncio.create_task(self._send(n)) for n in range(self.count)]

    async def _send(self, n: int) -> None:
        for i in itertools.count():
            if self._stop.is_set():
                return
            body = f"s{n}-{i}"
            try:
                result = await self.producer.send(Message(self.topic, body.encode()))
            except Exception as error:  # a send that failed after retries: what tests count
                self.failures.append(f"{type(error).__name__}: {error}")
            else:
                self.acked.append(Ack(time.monotonic(), body, result.status, result.broker_name))

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    def since(self, moment: float) -> list[Ack]:
        return [a for a in self.acked if a.at > moment]

    def longest_pause(self, start: float, end: float = float("inf")) -> float:
        """The longest gap between acknowledgements that ends after ``start`` and starts before ``end``."""
        times = [a.at for a in self.acked]
        return max((b - a for a, b in itertools.pairwise(times) if b > start and a < end), default=0.0)

    def statuses(self) -> dict[str, int]:
        return dict(collections.Counter(a.status.value for a in self.acked))


async def ha_state(address: str) -> broker_pb2.GetHaStateReply:
    async with grpc.aio.insecure_channel(address) as channel:
        return await broker_pb2_grpc.BrokerStub(channel).GetHaState(broker_pb2.GetHaStateRequest(), timeout=2)


async def rejoined_as_slave(k8s: K8sCluster, namespace: str, pod: str, epoch: int, within: float) -> None:
    """Wait until ``pod``'s broker (an old master the kubelet restarts) serves as a slave of
    ``epoch``, the epoch of the failover that replaced it."""
    deadline = time.monotonic() + within
    while True:
        ip = (await asyncio.to_thread(k8s.get_json, "pod", pod, "-n", namespace))["status"].get("podIP")
        with contextlib.suppress(grpc.aio.AioRpcError):
            state = await ha_state(f"{ip}:10911")
            if state.role == "SLAVE" and state.epoch == epoch:
                return
        assert time.monotonic() < deadline, f"{pod} did not rejoin as a slave of epoch {epoch}"
        await asyncio.sleep(0.5)


async def wait(what: str, predicate: Any, within: float) -> None:
    """Poll a blocking (kubectl) predicate without stalling the senders' event loop."""
    deadline = time.monotonic() + within
    while not await asyncio.to_thread(predicate):
        assert time.monotonic() < deadline, f"timed out after {within:.0f} s waiting for {what}"
        await asyncio.sleep(0.5)


def broker_pods(k8s: K8sCluster, ns: str, cluster: str) -> list[dict[str, Any]]:
    selector = f"app.kubernetes.io/instance={cluster},app.kubernetes.io/component=broker"
    return k8s.get_json("pods", "-n", ns, "-l", selector)["items"]


def update_revisions(k8s: K8sCluster, ns: str, cluster: str, groups: int) -> list[str | None]:
    """Each broker StatefulSet's update revision (what its pods are rolled to)."""
    return [
        k8s.get_json("statefulset", f"{cluster}-broker-{n}", "-n", ns)["status"].get("updateRevision")
        for n in range(groups)
    ]


def rolled(k8s: K8sCluster, ns: str, cluster: str, groups: int) -> bool:
    """Every broker pod Ready at its StatefulSet's update revision, and no roll in the status."""
    status = get(k8s, ns, "orbitmqclusters", cluster).get("status") or {}
    if status.get("rollingUpdates"):
        return False
    revisions = {}
    for n in range(groups):
        sts = k8s.get_json("statefulset", f"{cluster}-broker-{n}", "-n", ns)
        revisions[sts["metadata"]["name"]] = sts["status"].get("updateRevision")
    for pod in broker_pods(k8s, ns, cluster):
        owner = pod["metadata"]["ownerReferences"][0]["name"]
        ready = any(
            c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or []
        )
        if pod["metadata"]["labels"].get("controller-revision-hash") != revisions.get(owner) or not ready:
            return False
    return True
