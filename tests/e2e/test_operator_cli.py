"""``orbitmq-operator`` as a user runs it: a process logging in with ``$KUBECONFIG``, waiting for
its kopf peering object (which it never creates: the chart, or ``--print-peering``, does),
serving Prometheus metrics; a second replica of lower priority stays paused while the first one
acts, and takes over when it stops (leader election by kopf peering)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from k8s_testbed_support import K8sCluster
from operatorkit import cluster_cr, install_crds, wait_condition

pytestmark = pytest.mark.e2e
OPERATOR = Path(sys.executable).parent / "orbitmq-operator"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(k8s: K8sCluster, namespace: str, priority: int, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = {**os.environ, "KUBECONFIG": str(k8s.kubeconfig), "ORBITMQ_OPERATOR_CLUSTER_RESYNC_S": "2"}
    args = [str(OPERATOR), "-n", namespace, "--peering", "orbitmq-operator", "--priority", str(priority)]
    args += ["--metrics-port", str(port), "--liveness", f"http://127.0.0.1:{free_port()}/healthz"]
    with log.open("wb") as out:
        return subprocess.Popen(args, env=env, stdout=out, stderr=subprocess.STDOUT), port


def peering_status(k8s: K8sCluster, namespace: str) -> dict:
    peering = k8s.get_json("kopfpeerings.kopf.dev", "orbitmq-operator", "-n", namespace)
    return peering.get("status") or {}


def stop(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


@pytest.mark.timeout(240, func_only=True)
def reconciles(metrics_port: int) -> float:
    """How many cluster reconciles a replica has run, from its own /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    name = 'orbitmq_operator_reconcile_duration_seconds_count{kind="OrbitMQCluster"}'
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name))


def test_operator_command_with_peering_and_metrics(
    k8s_cluster: K8sCluster, namespace: str, tmp_path: Path
) -> None:
    install_crds(k8s_cluster)
    crds = subprocess.run([str(OPERATOR), "--print-peering-crds"], capture_output=True, text=True, check=True)
    k8s_cluster.kubectl("apply", "-f", "-", input=crds.stdout)
    k8s_cluster.kubectl("wait", "--for=condition=Established", "crd/kopfpeerings.kopf.dev", "--timeout=60s")
    k8s_cluster.kubectl("get", "kopfpeerings.kopf.dev", "-A")

    leader, port = start(k8s_cluster, namespace, 100, tmp_path / "leader.log")
    follower = None
    try:
        k8s_cluster.wait_for(
            "the operator waiting for its peering object",
            lambda: "waiting for peering object(s) KopfPeering" in (tmp_path / "leader.log").read_text(),
            timeout=60,
        )
        time.sleep(2)
        assert leader.poll() is None, (tmp_path / "leader.log").read_text()[-3000:]
        absent = k8s_cluster.kubectl("get", "kopfpeerings.kopf.dev", "-n", namespace, "-o", "name").stdout
        assert absent.strip() == "", "the operator must not create its peering object (the chart owns it)"
        objects = subprocess.run(
            [str(OPERATOR), "-n", namespace, "--peering", "orbitmq-operator", "--print-peering"],
            capture_output=True,
            text=True,
            check=True,
        )
        k8s_cluster.kubectl("apply", "-f", "-", input=objects.stdout)
        k8s_cluster.apply(cluster_cr("demo", brokers={"storage": {"size": "1Gi"}}), namespace=namespace)
        wait_condition(k8s_cluster, namespace, "orbitmqclusters", "demo", "Ready", "False", "BrokersNotReady")
        assert [p["priority"] for p in peering_status(k8s_cluster, namespace).values()] == [100]

        assert reconciles(port) > 0

        follower, follower_port = start(k8s_cluster, namespace, 1, tmp_path / "follower.log")
        k8s_cluster.wait_for(
            "the second replica in the peering",
            lambda: (
                sorted(p["priority"] for p in peering_status(k8s_cluster, namespace).values()) == [1, 100]
            ),
        )
        time.sleep(3 * 2 + 1)  # several resyncs of the leader
        follower_log = (tmp_path / "follower.log").read_text()
        assert "Resuming operations" not in follower_log, "a lower-priority replica starts paused"
        assert "Handler 'cluster_changed" not in follower_log
        assert reconciles(follower_port) == 0, "a paused replica reconciles nothing"

        assert stop(leader) == 0, (tmp_path / "leader.log").read_text()[-3000:]
        k8s_cluster.wait_for(
            "the second replica to take over", lambda: reconciles(follower_port) > 0, timeout=60
        )
    finally:
        codes = [stop(p) for p in (follower, leader) if p is not None and p.poll() is None]
    assert codes == [0] * len(codes), (tmp_path / "follower.log").read_text()[-3000:]
