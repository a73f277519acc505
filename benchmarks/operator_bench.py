"""The operator's figures on the Kubernetes test bed (``scripts/k8s-testbed``), each printed with
a baseline measured in the same run:

``apply_to_ready_s``
    ``kubectl apply`` of an ``OrbitMQCluster`` (3 broker groups of a master and a slave, one
    name server: 7 real pods on the test bed's real node) to its ``Ready=True`` condition with
    ``observedGeneration == generation``. Baseline: a bare StatefulSet of as many pods of the same
    image, running the name server with the operator's own probes and pod settings, to all of
    its replicas Ready.
``failover_writes_resume_s`` (median, min, max of ``--failovers`` rounds)
    A SYNC_MASTER group with producers sending to its queues: the master's processes SIGKILLed
    and kept down as a crash loop keeps them; from the kill to the first acknowledged send issued
    after it. After each round the old master must be back as a SLAVE of the new epoch
    (``GetHaState``), the group Ready and sends ``SEND_OK`` again. Baseline: the configured
    detection window (the floor of the figure); target 10 s (RocketMQ 5's controller mode).
``idle_object_writes``, ``idle_status_patches``, ``idle_children_written``
    A Ready, unchanged cluster (with a topic and a consumer group) left for ``--resyncs`` resync
    periods: the operator's ``orbitmq_operator_object_writes_total``, changes of the resource
    versions of the cluster, topic and group resources, and changes of the children's
    generation or resource version or of their ``orbitmq-operator`` managedFields entries
    (polled every second). Baseline: reconciles run meanwhile (the operator's reconcile-duration
    histogram count); target 0.
``operator_rss_mb``
    The operator's VmRSS with ``--clusters`` clusters of fake pods on the kwok node, each with
    5 topics and 5 consumer groups. Baseline: the same process's RSS idle before them.

Runs as root on Linux (the real node). The test bed gets its own state directory and is always
torn down. Progress and details go to stderr, figures to stdout (one JSON object a line with
``--json``, as ``orbitmq bench``).

    .venv/bin/python benchmarks/operator_bench.py [--json] [--failovers 5] [--clusters 20]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import itertools
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "e2e"), str(REPO / "tests" / "integration" / "client")]

import grpc  # noqa: E402
from clusterkit import eventually  # noqa: E402
from k8s_testbed_support import TESTBED, K8sCluster  # noqa: E402
from operatorkit import get, spec_versions, wait_condition  # noqa: E402
from realpods import (  # noqa: E402
    RESYNC_S,
    cluster_cr,
    create_namespace,
    group_status,
    host_volumes,
    is_ready,
    keep_down,
    namesrv_address,
    operator_process,
    pod_pids,
    pod_settings,
    wait_ready,
)

from orbitmq.bench.figures import Figure, emit  # noqa: E402
from orbitmq.client import Message, Producer, SendStatus  # noqa: E402
from orbitmq.v1 import broker_pb2, broker_pb2_grpc  # noqa: E402
from orbitmq_operator.builders import common  # noqa: E402
from orbitmq_operator.builders.nameservers import namesrv_command  # noqa: E402

CLUSTER = "bench"
GROUPS = 3
SLAVES = 1
PODS = 1 + GROUPS * (1 + SLAVES)  # one name server, a master and a slave per group
GROUP = f"{CLUSTER}-broker-0"
TOPIC = "BenchOrders"
CONSUMER_GROUP = "BenchConsumers"
DETECTION_WINDOW_MS = 2000
SENDERS = 8
NAMESRV_PORT = 9876
BROKER_PORT = 10911
KWOK_POD = {
    "nodeSelector": {"type": "kwok"},
    "tolerations": [
        {"key": "kwok.x-k8s.io/node", "operator": "Equal", "value": "fake", "effect": "NoSchedule"}
    ],
}
KWOK_STORAGE_CLASS = "orbitmq-kwok"
CRD_PLURALS = "orbitmqclusters.orbitmq.io,orbitmqtopics.orbitmq.io,orbitmqconsumergroups.orbitmq.io"


def note(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the test bed -------------------------------------------------------------------------------


def run_testbed(command: str, env: dict[str, str], timeout: float) -> None:
    result = subprocess.run(
        [str(TESTBED), command], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"scripts/k8s-testbed {command} failed ({result.returncode}):\n"
            f"{result.stderr[-4000:]}\n{result.stdout[-4000:]}"
        )


@contextlib.contextmanager
def testbed(real_node: bool) -> Iterator[K8sCluster]:
    """A test bed of its own (with the real node when asked), always torn down."""
    # short: the containerd socket lives under it and a unix socket path has 107 bytes
    state = Path(tempfile.mkdtemp(prefix="omq-bench-", dir="/tmp"))
    home = Path(tempfile.mkdtemp(prefix="omq-bench-home-", dir="/tmp"))
    env = {k: v for k, v in os.environ.items() if k != "ORBITMQ_K8S_REAL_NODE"}
    env["ORBITMQ_K8S_STATE"] = str(state)
    try:
        run_testbed("build", env, 3600)
        started = time.monotonic()
        run_testbed("up", {**env, "ORBITMQ_K8S_REAL_NODE": "1"} if real_node else env, 900)
        note(
            f"test bed up in {time.monotonic() - started:.0f} s ({'real node' if real_node else 'kwok only'})"
        )
        yield K8sCluster.from_state(state, home)
    finally:
        note("test bed down")
        down = subprocess.run(
            [str(TESTBED), "down"], env=env, capture_output=True, text=True, timeout=300, check=False
        )
        if down.returncode != 0:
            note(f"scripts/k8s-testbed down failed:\n{down.stderr[-3000:]}\n{down.stdout[-3000:]}")
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)


def wait_until(what: str, predicate: Callable[[], bool], timeout: float, every: float = 0.25) -> None:
    """Poll ``predicate`` (K8sCluster.wait_for polls every 0.5 s, too coarse for a timing)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


# -- the operator process -----------------------------------------------------------------------


def scrape(port: int) -> dict[str, float]:
    """The operator's /metrics as {"name{labels}": value}."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


def metric_total(metrics: dict[str, float], name: str) -> float:
    return sum(v for k, v in metrics.items() if k == name or k.startswith(name + "{"))


def wait_metrics(port: int) -> None:
    def up() -> bool:
        try:
            scrape(port)
        except OSError:
            return False
        return True

    wait_until("the operator's /metrics", up, 60)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def steady_rss_mb(pid: int, samples: int = 5) -> float:
    values = []
    for _ in range(samples):
        values.append(rss_mb(pid))
        time.sleep(1)
    return statistics.median(values)


# -- figure 1: apply -> Ready --------------------------------------------------------------------


def baseline_statefulset(k8s: K8sCluster, name: str) -> dict[str, Any]:
    """``PODS`` name servers: the cluster's image, probes, security and pod settings."""
    settings = pod_settings(k8s)
    tmp = common.tmp_volume()
    container = {
        "name": "namesrv",
        "image": k8s.info["real_node"]["image"],
        "imagePullPolicy": "Never",
        "command": namesrv_command(9100),
        **common.grpc_probes(NAMESRV_PORT, 60),
        "securityContext": common.container_security_context(),
        "volumeMounts": [{"name": tmp["name"], "mountPath": "/tmp"}, *settings["volumeMounts"]],
    }
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "serviceName": name,
            "replicas": PODS,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "automountServiceAccountToken": False,
                    "enableServiceLinks": False,
                    "terminationGracePeriodSeconds": 5,
                    "securityContext": common.pod_security_context(),
                    "nodeSelector": settings["nodeSelector"],
                    "containers": [container],
                    "volumes": [tmp, *settings["volumes"]],
                },
            },
        },
    }


def bare_statefulset_ready_s(k8s: K8sCluster, ns: str) -> float:
    name = "bench-baseline"
    started, applied = time.monotonic(), time.time()
    k8s.apply(baseline_statefulset(k8s, name), namespace=ns)
    wait_until(
        f"StatefulSet {name} Ready",
        lambda: (
            (k8s.get_json("statefulset", name, "-n", ns).get("status") or {}).get("readyReplicas") == PODS
        ),
        300,
    )
    ready_s = time.monotonic() - started
    timeline(k8s, ns, f"app={name}", applied, "bare StatefulSet")
    k8s.kubectl("delete", "statefulset", name, "-n", ns, "--wait=true", "--timeout=120s")
    k8s.wait_for(
        f"pods of {name} gone",
        lambda: not k8s.get_json("pods", "-n", ns, "-l", f"app={name}")["items"],
        timeout=120,
    )
    return ready_s


def cluster_ready_s(k8s: K8sCluster, ns: str, volumes: Path) -> float:
    host_volumes(k8s, ns, CLUSTER, groups=GROUPS, replicas=1 + SLAVES, root=volumes)
    brokers = {"groups": GROUPS, "slavesPerGroup": SLAVES, "replicationMode": "SYNC_MASTER"}
    failover = {"enabled": True, "detectionWindowMs": DETECTION_WINDOW_MS}
    manifest = cluster_cr(k8s, CLUSTER, brokers, failover=failover)
    started, applied = time.monotonic(), time.time()
    k8s.apply(manifest, namespace=ns)
    wait_until(f"OrbitMQCluster {CLUSTER} Ready", lambda: cluster_is_ready(k8s, ns, CLUSTER), 300)
    ready_s = time.monotonic() - started
    timeline(k8s, ns, f"app.kubernetes.io/instance={CLUSTER}", applied, "cluster")
    return ready_s


def timeline(k8s: K8sCluster, ns: str, selector: str, applied: float, what: str) -> None:
    """Where the time to Ready went, from the API's timestamps (whole seconds): StatefulSets
    and pods created, containers started, pods Ready (ranges over the pods), in seconds after
    the apply; the cluster's own Ready transition when there is one."""
    try:

        def at(stamp: str | None) -> float | None:
            if not stamp:
                return None
            parsed = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")
            return parsed.replace(tzinfo=datetime.UTC).timestamp() - applied

        def span(values: list[float | None]) -> str:
            known = [v for v in values if v is not None]
            if not known:
                return "-"
            return f"{min(known):+.0f}..{max(known):+.0f}" if len(known) > 1 else f"{known[0]:+.0f}"

        def condition(pod: dict[str, Any], kind: str) -> str | None:
            found = [c for c in pod["status"].get("conditions") or [] if c["type"] == kind]
            return found[0].get("lastTransitionTime") if found else None

        def started(pod: dict[str, Any]) -> str | None:
            statuses = pod["status"].get("containerStatuses") or [{}]
            return ((statuses[0].get("state") or {}).get("running") or {}).get("startedAt")

        sets = k8s.get_json("statefulsets", "-n", ns, "-l", selector)["items"]
        pods = k8s.get_json("pods", "-n", ns, "-l", selector)["items"]
        parts = [
            f"StatefulSets created {span([at(s['metadata']['creationTimestamp']) for s in sets])}",
            f"pods created {span([at(p['metadata']['creationTimestamp']) for p in pods])}",
            f"scheduled {span([at(condition(p, 'PodScheduled')) for p in pods])}",
            f"containers started {span([at(started(p)) for p in pods])}",
            f"pods Ready {span([at(condition(p, 'Ready')) for p in pods])}",
        ]
        if what == "cluster":
            cluster = get(k8s, ns, "orbitmqclusters", CLUSTER)
            ready = [c for c in (cluster.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"]
            parts.append(f"cluster Ready {span([at(ready[0].get('lastTransitionTime') if ready else None)])}")
        note(f"{what} timeline (s after the apply): {', '.join(parts)}")
    except Exception as error:  # details only: never fail a run for them
        note(f"{what} timeline unavailable: {type(error).__name__}: {error}")


def cluster_is_ready(k8s: K8sCluster, ns: str, name: str) -> bool:
    return is_ready(get(k8s, ns, "orbitmqclusters", name))


# -- figure 3: an unchanged cluster ---------------------------------------------------------------


def topic_cr(cluster: str, topic: str) -> dict[str, Any]:
    return {
        "apiVersion": "orbitmq.io/v1alpha1",
        "kind": "OrbitMQTopic",
        "metadata": {"name": f"{cluster}-{topic}".lower()},
        "spec": {"cluster": cluster, "topicName": topic, "readQueues": 4, "writeQueues": 4},
    }


def consumer_group_cr(cluster: str, group: str) -> dict[str, Any]:
    return {
        "apiVersion": "orbitmq.io/v1alpha1",
        "kind": "OrbitMQConsumerGroup",
        "metadata": {"name": f"{cluster}-{group}".lower()},
        "spec": {"cluster": cluster, "groupName": group},
    }


def resource_versions(k8s: K8sCluster, ns: str) -> dict[str, str]:
    items = k8s.get_json(CRD_PLURALS, "-n", ns)["items"]
    return {f"{i['kind']}/{i['metadata']['name']}": i["metadata"]["resourceVersion"] for i in items}


def idle_figures(k8s: K8sCluster, ns: str, port: int, resyncs: int) -> list[Figure]:
    resync_s = float(RESYNC_S)
    time.sleep(3 * resync_s)  # whatever the last changes started has settled
    before = scrape(port)
    versions = [resource_versions(k8s, ns)]
    children = [spec_versions(k8s, ns, CLUSTER)]
    deadline = time.monotonic() + resyncs * resync_s
    while time.monotonic() < deadline:
        time.sleep(1)
        versions.append(resource_versions(k8s, ns))
        children.append(spec_versions(k8s, ns, CLUSTER))
    after = scrape(port)

    def changes(snapshots: list[dict[Any, Any]]) -> tuple[int, list[str]]:
        count, what = 0, []
        for old, new in itertools.pairwise(snapshots):
            for key in old.keys() | new.keys():
                if old.get(key) != new.get(key):
                    count += 1
                    what.append(str(key))
        return count, sorted(set(what))

    writes = metric_total(after, "orbitmq_operator_object_writes_total") - metric_total(
        before, "orbitmq_operator_object_writes_total"
    )
    count = "orbitmq_operator_reconcile_duration_seconds_count"
    reconciles = metric_total(after, count) - metric_total(before, count)
    patches, patched = changes(versions)
    written, written_what = changes(children)
    note(
        f"idle for {resyncs} resync periods of {resync_s:.0f} s: {reconciles:.0f} reconciles, "
        f"{writes:.0f} object writes, {patches} resource changes {patched}, "
        f"{written} children changes {written_what} (over {len(children[0])} children)"
    )
    baseline_name = f"reconciles in {resyncs} resync periods of {resync_s:.0f} s"
    return [
        Figure("idle_object_writes", writes, "writes", reconciles, baseline_name, "0"),
        Figure("idle_status_patches", patches, "patches", reconciles, baseline_name, "0"),
        Figure("idle_children_written", written, "writes", reconciles, baseline_name, "0"),
    ]


# -- figure 2: failover ----------------------------------------------------------------------


async def ha_state(address: str) -> broker_pb2.HaState:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = broker_pb2_grpc.BrokerStub(channel)
        return await stub.GetHaState(broker_pb2.GetHaStateRequest(), timeout=2)


class Senders:
    """Producers sending to ``GROUP``'s queues only (the other groups would acknowledge
    through the failover), each send recorded as (issued, answered, status)."""

    def __init__(self, producer: Producer) -> None:
        self.producer = producer
        self.sent: list[tuple[float, float, SendStatus]] = []
        self.failures: list[tuple[float, str]] = []
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run(n)) for n in range(SENDERS)]

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.gather(*self._tasks)

    async def _run(self, n: int) -> None:
        for i in itertools.count():
            if self._stop.is_set():
                return
            try:
                queues = [q for q in await self.producer.write_queues(TOPIC) if q.broker_name == GROUP]
            except Exception as error:  # the name server unreachable: try again
                self.failures.append((time.monotonic(), f"route: {type(error).__name__}: {error}"))
                await asyncio.sleep(0.05)
                continue
            if not queues:  # the group has no master registered right now
                await asyncio.sleep(0.02)
                with contextlib.suppress(Exception):
                    await self.producer.write_queues(TOPIC, refresh=True)
                continue
            issued = time.monotonic()
            try:
                result = await self.producer.send(
                    Message(TOPIC, f"s{n}-{i}".encode()), queue=queues[(n + i) % len(queues)]
                )
            except Exception as error:  # a send that failed after its retries
                self.failures.append((issued, f"{type(error).__name__}: {error}"))
                continue
            if result.broker_name == GROUP:
                self.sent.append((issued, time.monotonic(), result.status))
            await asyncio.sleep(0.002)

    def acked(self, since: float, status: SendStatus | None = None) -> list[tuple[float, float]]:
        return [
            (issued, answered)
            for issued, answered, st in self.sent
            if issued > since and (status is None or st is status)
        ]


async def failover_round(k8s: K8sCluster, ns: str, senders: Senders, n: int) -> dict[str, Any]:
    senders.sent.clear()
    start = time.monotonic()
    await eventually(
        lambda: len(senders.acked(start, SendStatus.SEND_OK)) >= 200,
        60,
        lambda: f"{len(senders.acked(start, SendStatus.SEND_OK))} SEND_OK before the kill",
    )
    latencies = [answered - issued for issued, answered in senders.acked(start)]
    before = await asyncio.to_thread(group_status, k8s, ns, CLUSTER, GROUP)
    old_master = before["master"]
    assert old_master and before["writable"], before
    uid = (await asyncio.to_thread(k8s.get_json, "pod", old_master, "-n", ns))["metadata"]["uid"]
    pids = pod_pids(uid, "orbitmq")
    assert pids, f"no orbitmq process in {old_master}"
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    promoted_at = 0.0

    def promoted() -> bool:
        nonlocal promoted_at
        now = group_status(k8s, ns, CLUSTER, GROUP)
        if now.get("master") and now["master"] != old_master:
            promoted_at = time.monotonic()
            return True
        return False

    kills = 1 + await asyncio.to_thread(keep_down, k8s, ns, old_master, promoted, 120)
    await eventually(lambda: bool(senders.acked(killed)), 60, lambda: "no send acknowledged since the kill")
    resumed = min(answered for _, answered in senders.acked(killed)) - killed
    after = await asyncio.to_thread(group_status, k8s, ns, CLUSTER, GROUP)

    async def rejoined() -> bool:
        pod = await asyncio.to_thread(k8s.get_json, "pod", old_master, "-n", ns)
        ip = pod["status"].get("podIP")
        if not ip:
            return False
        try:
            state = await ha_state(f"{ip}:{BROKER_PORT}")
        except grpc.aio.AioRpcError:
            return False
        return state.role == "SLAVE" and state.epoch == after["epoch"]

    deadline = time.monotonic() + 420
    while not await rejoined():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{old_master} did not rejoin as a slave of epoch {after['epoch']}")
        await asyncio.sleep(0.5)
    rejoined_s = time.monotonic() - killed
    settled = time.monotonic()
    await eventually(
        lambda: bool(senders.acked(settled, SendStatus.SEND_OK)), 120, lambda: "no SEND_OK after the rejoin"
    )
    await asyncio.to_thread(wait_ready, k8s, ns, CLUSTER, 120)
    statuses: dict[str, int] = {}
    for issued, _, status in senders.sent:
        if issued > killed:
            statuses[status.value] = statuses.get(status.value, 0) + 1
    result = {
        "round": n,
        "killed": old_master,
        "kills": kills,
        "promoted_s": promoted_at - killed,
        "resumed_s": resumed,
        "rejoined_s": rejoined_s,
        "epoch": after["epoch"],
        "send_p50_ms": statistics.median(latencies) * 1000,
        "statuses_after_kill": statuses,
    }
    note(
        f"failover {n}: {old_master} SIGKILLed ({kills} kills while kept down), new master "
        f"{after['master']} (epoch {after['epoch']}) in status after {result['promoted_s']:.2f} s, "
        f"writes acknowledged again after {resumed:.2f} s, old master back as SLAVE after "
        f"{rejoined_s:.1f} s (kubelet back-off); send p50 before the kill "
        f"{result['send_p50_ms']:.1f} ms; after the kill {statuses}"
    )
    return result


async def failover_figures(k8s: K8sCluster, ns: str, rounds: int) -> list[Figure]:
    namesrv = namesrv_address(k8s, ns, CLUSTER)
    async with Producer("OperatorBench", namesrv, send_timeout_ms=60_000) as producer:
        senders = Senders(producer)
        senders.start()
        try:
            results = [await failover_round(k8s, ns, senders, n + 1) for n in range(rounds)]
        finally:
            await senders.stop()
    if senders.failures:
        note(f"{len(senders.failures)} failed sends, first: {senders.failures[:3]}")
    resumed = [r["resumed_s"] for r in results]
    promoted = [r["promoted_s"] for r in results]
    window_s = DETECTION_WINDOW_MS / 1000
    baseline_name = "configured detection window"
    note(
        f"failover over {rounds} rounds: resume median {statistics.median(resumed):.2f} s, "
        f"min {min(resumed):.2f}, max {max(resumed):.2f}; promoted (status) median "
        f"{statistics.median(promoted):.2f} s; send p50 before the kills "
        f"{statistics.median(r['send_p50_ms'] for r in results):.1f} ms; "
        f"{len(senders.failures)} failed sends"
    )
    return [
        Figure(
            "failover_writes_resume_s", statistics.median(resumed), "s", window_s, baseline_name, "≤ 10 s"
        ),
        Figure("failover_writes_resume_min_s", min(resumed), "s", window_s, baseline_name),
        Figure("failover_writes_resume_max_s", max(resumed), "s", window_s, baseline_name, "≤ 10 s"),
        Figure("failover_promoted_s", statistics.median(promoted), "s", window_s, baseline_name),
    ]


# -- figure 4: the operator's memory ----------------------------------------------------------


def kwok_cluster_cr(name: str) -> dict[str, Any]:
    """A cluster whose pods are kwok's fake ones (hostPath volumes pre-bound, never mounted)."""
    storage = {"size": "1Gi", "storageClassName": KWOK_STORAGE_CLASS}
    return {
        "apiVersion": "orbitmq.io/v1alpha1",
        "kind": "OrbitMQCluster",
        "metadata": {"name": name},
        "spec": {
            "image": "orbitmq:bench-kwok",
            "nameServers": {"replicas": 1},
            "brokers": {"groups": 1, "slavesPerGroup": 1, "segmentMib": 16, "storage": storage},
            "pod": KWOK_POD,
        },
    }


def kwok_volumes(ns: str, cluster: str) -> list[dict[str, Any]]:
    """PersistentVolumes bound in advance to the claims of a one-group cluster's two brokers, so
    its pods are scheduled on the kwok node (which mounts nothing)."""
    claims = [f"data-{cluster}-broker-0-{ordinal}" for ordinal in range(2)]
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"{ns}-{claim}"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": KWOK_STORAGE_CLASS,
                "persistentVolumeReclaimPolicy": "Retain",
                "claimRef": {"namespace": ns, "name": claim},
                "hostPath": {"path": f"/nonexistent/{claim}"},
            },
        }
        for claim in claims
    ]


def rss_figures(k8s: K8sCluster, workdir: Path, clusters: int, per_cluster: int) -> list[Figure]:
    ns = create_namespace(k8s, "bench-rss")
    log = workdir / "operator-rss.log"
    try:
        with operator_process(k8s, ns, log) as operator:
            wait_metrics(operator.metrics_port)  # type: ignore[attr-defined]
            time.sleep(5 * float(RESYNC_S))
            idle = steady_rss_mb(operator.pid)
            note(f"operator idle RSS {idle:.1f} MB")
            names = [f"c{i:02d}" for i in range(clusters)]
            k8s.apply(*(volume for name in names for volume in kwok_volumes(ns, name)))
            objects: list[dict[str, Any]] = []
            for name in names:
                objects.append(kwok_cluster_cr(name))
                objects += [topic_cr(name, f"Topic{j}") for j in range(per_cluster)]
                objects += [consumer_group_cr(name, f"Group{j}") for j in range(per_cluster)]
            started = time.monotonic()
            k8s.apply(*objects, namespace=ns)

            def all_reconciled() -> bool:
                for item in k8s.get_json(CRD_PLURALS, "-n", ns)["items"]:
                    status = item.get("status") or {}
                    if not status.get("conditions"):
                        return False
                    if item["kind"] == "OrbitMQCluster" and (
                        status.get("observedGeneration") != item["metadata"]["generation"]
                    ):
                        return False
                return True

            wait_until(f"{len(objects)} resources reconciled", all_reconciled, 600, every=2)
            note(f"{len(objects)} resources reconciled {time.monotonic() - started:.0f} s after the apply")
            time.sleep(10 * float(RESYNC_S))
            loaded = steady_rss_mb(operator.pid)
            pods = k8s.get_json("pods", "-n", ns)["items"]
            running = sum(1 for p in pods if p["status"].get("phase") == "Running")
            ready = sum(1 for i in k8s.get_json(CRD_PLURALS, "-n", ns)["items"] if _ready(i))
            note(
                f"operator RSS {loaded:.1f} MB with {clusters} clusters, {clusters * per_cluster} topics, "
                f"{clusters * per_cluster} consumer groups ({running}/{len(pods)} kwok pods Running, "
                f"{ready}/{len(objects)} resources Ready); "
                f"{(loaded - idle) / clusters * 1024:.0f} kB per cluster"
            )
    except BaseException:
        note(log.read_text(errors="replace")[-6000:])
        raise
    return [
        Figure(
            "operator_rss_mb",
            loaded,
            "MB",
            idle,
            f"the operator idle, no cluster ({clusters} clusters x {per_cluster} topics + "
            f"{per_cluster} groups)",
        )
    ]


def _ready(item: dict[str, Any]) -> bool:
    conditions = (item.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


# -- the run --------------------------------------------------------------------------------------


def real_pod_figures(
    k8s: K8sCluster, workdir: Path, args: argparse.Namespace, out: Callable[[Figure], None]
) -> None:
    ns = create_namespace(k8s, "bench")
    log = workdir / "operator.log"
    try:
        with operator_process(k8s, ns, log) as operator:
            port = operator.metrics_port  # type: ignore[attr-defined]
            wait_metrics(port)
            baseline_s = bare_statefulset_ready_s(k8s, ns)
            note(f"bare StatefulSet of {PODS} pods Ready after {baseline_s:.1f} s")
            ready_s = cluster_ready_s(k8s, ns, workdir / "volumes")
            note(f"cluster of {PODS} pods Ready after {ready_s:.1f} s")
            out(
                Figure(
                    "apply_to_ready_s",
                    ready_s,
                    "s",
                    baseline_s,
                    f"bare StatefulSet of {PODS} name-server pods, same image and probes",
                )
            )
            k8s.apply(topic_cr(CLUSTER, TOPIC), consumer_group_cr(CLUSTER, CONSUMER_GROUP), namespace=ns)
            for plural, name in (
                ("orbitmqtopics", f"{CLUSTER}-{TOPIC}".lower()),
                ("orbitmqconsumergroups", f"{CLUSTER}-{CONSUMER_GROUP}".lower()),
            ):
                wait_condition(k8s, ns, plural, name, "Ready", "True", "Applied", 120)
            if "idle" in args.figures:
                for figure in idle_figures(k8s, ns, port, args.resyncs):
                    out(figure)
            if "failover" in args.figures:
                for figure in asyncio.run(failover_figures(k8s, ns, args.failovers)):
                    out(figure)
    except BaseException:
        note(log.read_text(errors="replace")[-6000:])
        raise


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per figure")
    parser.add_argument("--failovers", type=int, default=5, help="failover rounds (>= 1)")
    parser.add_argument("--clusters", type=int, default=20, help="kwok clusters for the RSS figure")
    parser.add_argument("--per-cluster", type=int, default=5, help="topics and consumer groups per cluster")
    parser.add_argument("--resyncs", type=int, default=10, help="resync periods of the idle figure")
    parser.add_argument(
        "--figures",
        default="ready,idle,failover,rss",
        type=lambda s: set(s.split(",")),
        help="which figures (ready,idle,failover,rss; all but rss need the real node)",
    )
    args = parser.parse_args()
    real = bool(args.figures & {"ready", "idle", "failover"})
    if real and os.geteuid() != 0:
        parser.error("the real node needs root")
    figures: list[Figure] = []

    def out(figure: Figure) -> None:
        figures.append(figure)
        emit(figure, args.json, lambda line: print(line, flush=True))

    workdir = Path(tempfile.mkdtemp(prefix="omq-bench-work-", dir="/tmp"))
    try:
        with testbed(real) as k8s:
            if real:
                real_pod_figures(k8s, workdir, args, out)
            if "rss" in args.figures:
                for figure in rss_figures(k8s, workdir, args.clusters, args.per_cluster):
                    out(figure)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
