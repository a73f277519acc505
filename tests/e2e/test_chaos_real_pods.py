"""Issue 27's Kubernetes run: the chaos harness's workload and checkers against an
``OrbitMQCluster`` of real pods on the test bed's real node, through the faults a Kubernetes
user meets, one per round, each waited out before the next:

* ``kill-master-process``: the master's broker SIGKILLed in its container (the kubelet restarts
  it; the operator fails over to the slave after its detection window);
* ``force-delete-master-pod``: ``kubectl delete pod --grace-period=0 --force`` of a master (the
  StatefulSet makes a new pod on the same volume);
* ``kill-operator-during-failover``: a master killed, then the operator SIGKILLed a second later,
  mid-failover, and started again 5 s after (its failover state lives in memory: the new process
  must rebuild it from the brokers);
* ``stop-kubelet``: the node's kubelet SIGSTOPped for 30 s and a master killed while it is
  stopped (nothing restarts the container: the operator's failover alone must bring writes back);
* ``rolling-update``: a change of the pod template rolls every broker pod (slaves first, masters
  after a switchover);
* ``scale-down-drain``: the second broker group drained (write permission wiped, consumers catch
  up) and removed. Its messages are then nowhere to read: the final drain expects only the kept
  group's (``History.retired_brokers``), the live groups must have consumed all of them.

The same producers (sync, batched, ordered by sharding key) and consumers (concurrent, orderly)
as ``orbitmq chaos`` run throughout; the ordered topic lives on the kept group only, as a key
moved to another group's queue is not ordered after its backlog in RocketMQ either. Every checker
must pass: no acknowledged message lost, no reordering, duplicates within their bound, recovery
after every fault. The result (and the HTML report) is written to $ORBITMQ_CHAOS_K8S_OUT or the
test's temporary directory; the recovery table is printed (figures in docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from k8s_testbed_support import K8sCluster
from operatorkit import get
from realpods import (
    cluster_cr,
    create_namespace,
    delete_host_volumes,
    group_status,
    host_volumes,
    is_ready,
    kill_pod_process,
    namesrv_address,
    operator_process,
    rolled,
    update_revisions,
    wait,
)

from orbitmq.chaos.checkers import CHECKERS, recovery
from orbitmq.chaos.history import FaultRecord, History
from orbitmq.chaos.report import write_report
from orbitmq.chaos.run import wait_live_caught_up
from orbitmq.chaos.workloads import ORDERED_TOPIC, QUEUES, TOPIC, Workload, drain
from orbitmq.client import Admin

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(1500, func_only=True)]

CLUSTER = "chaos"
KEPT, RETIRED = f"{CLUSTER}-broker-0", f"{CLUSTER}-broker-1"
HEAL_WAIT_S = 240.0
"""Longest wait for the cluster to be Ready and writable again after a fault."""
KUBELET_STOP_S = 30.0
FAILOVER_WINDOW_S = 2.0
OPERATOR_DOWN_S = 5.0


@dataclass
class Bed:
    """The operated namespace of the run and the operator process, which a fault may kill."""

    k8s: K8sCluster
    ns: str
    workdir: Path
    clock: Callable[[], float]
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    operator: subprocess.Popen[bytes] | None = None
    operator_starts: int = 0

    def start_operator(self) -> None:
        self.operator_starts += 1
        log = self.workdir / f"operator-{self.operator_starts}.log"
        self.operator = self.stack.enter_context(operator_process(self.k8s, self.ns, log))

    def master(self, group: str) -> str:
        master = group_status(self.k8s, self.ns, CLUSTER, group).get("master")
        assert master, f"{group} has no master: {group_status(self.k8s, self.ns, CLUSTER, group)}"
        return str(master)

    def healthy(self, groups: int) -> bool:
        """The cluster Ready at its generation, every group with a writable master."""
        if not is_ready(get(self.k8s, self.ns, "orbitmqclusters", CLUSTER)):
            return False
        statuses = [group_status(self.k8s, self.ns, CLUSTER, f"{CLUSTER}-broker-{n}") for n in range(groups)]
        return all(s.get("master") and s.get("writable") for s in statuses)


Fault = Callable[[Bed, FaultRecord], Awaitable[int]]
"""Breaks the cluster, fills in the record's target and note; returns the groups left."""


async def kill_master_process(bed: Bed, record: FaultRecord) -> int:
    record.target = bed.master(KEPT)
    record.group = KEPT
    assert kill_pod_process(bed.k8s, bed.ns, record.target, "broker") >= 1
    return 2


async def force_delete_master_pod(bed: Bed, record: FaultRecord) -> int:
    record.target = bed.master(RETIRED)
    record.group = RETIRED
    bed.k8s.kubectl(
        "delete", "pod", record.target, "-n", bed.ns, "--grace-period=0", "--force", "--wait=false"
    )
    return 2


async def kill_operator_during_failover(bed: Bed, record: FaultRecord) -> int:
    record.target = bed.master(KEPT)
    record.group = KEPT
    assert kill_pod_process(bed.k8s, bed.ns, record.target, "broker") >= 1
    await asyncio.sleep(1.0)
    assert bed.operator is not None
    bed.operator.kill()
    await asyncio.sleep(OPERATOR_DOWN_S)
    bed.start_operator()
    record.note = f"operator SIGKILLed 1 s after the master, started again {OPERATOR_DOWN_S:.0f} s later"
    return 2


async def stop_kubelet(bed: Bed, record: FaultRecord) -> int:
    kubelet = int((bed.k8s.state_dir / "pids" / "kubelet.pid").read_text())
    record.target = bed.master(KEPT)
    record.group = KEPT
    os.kill(kubelet, signal.SIGSTOP)
    try:
        await asyncio.sleep(2.0)
        record.injected_at = bed.clock()  # recovery is from the kill: writes went on until then
        assert kill_pod_process(bed.k8s, bed.ns, record.target, "broker") >= 1
        await asyncio.sleep(KUBELET_STOP_S - 2.0)
    finally:
        os.kill(kubelet, signal.SIGCONT)
    record.note = (
        f"kubelet (PID {kubelet}) stopped {KUBELET_STOP_S:.0f} s, from 2 s before the master's SIGKILL"
    )
    return 2


async def rolling_update(bed: Bed, record: FaultRecord) -> int:
    """New broker resources roll every broker pod (a change of ``spec.pod`` would roll the name
    server too, and the clients on the host know it by its pod IP, which a new pod changes)."""
    record.target = "every broker pod"
    before = await asyncio.to_thread(update_revisions, bed.k8s, bed.ns, CLUSTER, 2)
    patch = json.dumps({"spec": {"brokers": {"resources": {"requests": {"memory": "65Mi"}}}}})
    bed.k8s.kubectl("patch", "orbitmqclusters.orbitmq.io", CLUSTER, "-n", bed.ns, "--type=merge", "-p", patch)
    await wait(
        "new broker pod templates",
        lambda: all(
            new != old for new, old in zip(update_revisions(bed.k8s, bed.ns, CLUSTER, 2), before, strict=True)
        ),
        120,
    )
    await wait("the rolling update", lambda: rolled(bed.k8s, bed.ns, CLUSTER, 2), HEAL_WAIT_S)
    return 2


async def scale_down_drain(bed: Bed, record: FaultRecord) -> int:
    record.target = RETIRED
    bed.k8s.kubectl("scale", "orbitmqclusters.orbitmq.io", CLUSTER, "--replicas=1", "-n", bed.ns)

    def removed() -> bool:
        gone = bed.k8s.kubectl("get", "statefulset", RETIRED, "-n", bed.ns, check=False).returncode != 0
        status = get(bed.k8s, bed.ns, "orbitmqclusters", CLUSTER).get("status") or {}
        return gone and not status.get("drains")

    await wait(f"{RETIRED} drained and removed", removed, HEAL_WAIT_S)
    return 1


FAULTS: list[tuple[str, Fault]] = [
    ("kill-master-process", kill_master_process),
    ("force-delete-master-pod", force_delete_master_pod),
    ("kill-operator-during-failover", kill_operator_during_failover),
    ("stop-kubelet", stop_kubelet),
    ("rolling-update", rolling_update),
    ("scale-down-drain", scale_down_drain),
]


async def create_topics(namesrv: str, kept_master: str) -> None:
    """The concurrent topic on both groups, the ordered one on the kept group only."""
    async with Admin(namesrv) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        await admin.create_topic(
            ORDERED_TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES, broker_addr=kept_master
        )


WORKLOADS = ("sync", "batch", "ordered")
"""The client's producers and push consumers (the proxy and the sidecar are local up's; a
Kubernetes cluster runs neither yet)."""


async def test_guarantees_hold_through_kubernetes_faults(k8s_real_node: K8sCluster, tmp_path: Path) -> None:
    k8s = k8s_real_node
    origin = time.monotonic()

    def clock() -> float:
        return round(time.monotonic() - origin, 4)

    history = History()
    bed = Bed(k8s, create_namespace(k8s, "e2e-chaos"), tmp_path, clock)
    try:
        with bed.stack:
            bed.start_operator()
            await run_rounds(bed, history)
            k8s.kubectl(
                "delete", "orbitmqclusters.orbitmq.io", "--all", "-n", bed.ns, "--timeout=60s", check=False
            )
    except BaseException:
        for n in range(1, bed.operator_starts + 1):
            log = tmp_path / f"operator-{n}.log"
            print(f"--- {log.name}\n{log.read_text(errors='replace')[-8000:]}")
        raise
    finally:
        k8s.kubectl("delete", "namespace", bed.ns, "--wait=false", check=False)
        delete_host_volumes(k8s, bed.ns)
    judge(history, Path(os.environ.get("ORBITMQ_CHAOS_K8S_OUT", tmp_path)), clock())


async def run_rounds(bed: Bed, history: History) -> None:
    """Start the cluster and the workload, one fault per round, then the final read."""
    k8s, clock = bed.k8s, bed.clock
    host_volumes(k8s, bed.ns, CLUSTER, groups=2, replicas=2, root=bed.workdir / "volumes")
    brokers = {"groups": 2, "slavesPerGroup": 1, "replicationMode": "SYNC_MASTER", "flushMode": "SYNC_FLUSH"}
    failover = {"enabled": True, "detectionWindowMs": int(FAILOVER_WINDOW_S * 1000)}
    k8s.apply(cluster_cr(k8s, CLUSTER, brokers, failover=failover), namespace=bed.ns)
    await wait("the cluster Ready", lambda: bed.healthy(2), 300)
    namesrv = namesrv_address(k8s, bed.ns, CLUSTER)
    kept_master = k8s.get_json("pod", bed.master(KEPT), "-n", bed.ns)["status"]["podIP"] + ":10911"
    await create_topics(namesrv, kept_master)
    workload = Workload(namesrv, history, clock, WORKLOADS, create_topics=False)
    await workload.start()
    try:
        groups = 2
        for round_no, (name, inject) in enumerate(FAULTS, start=1):
            await wait("a healthy cluster", lambda n=groups: bed.healthy(n), HEAL_WAIT_S)
            await asyncio.sleep(3.0)  # traffic in full flow
            record = FaultRecord(round_no, name, "", 0, clock())
            history.faults.append(record)
            groups = await inject(bed, record)
            await asyncio.sleep(FAILOVER_WINDOW_S + 1.0)  # the status has seen the fault
            await wait(f"the cluster healed after {name}", lambda n=groups: bed.healthy(n), HEAL_WAIT_S)
            record.healed_at = mark = clock()
            print(
                f"round {round_no}: {name} of {record.target} healed after {mark - record.injected_at:.1f} s"
            )
            try:
                await wait("a write acknowledged again", lambda m=mark: workload.acknowledged_after(m), 60)
            except AssertionError:
                print(await describe(bed, namesrv, history))
                raise
            record.round_ended_at = clock()
        history.retired_brokers.add(RETIRED)
        await asyncio.sleep(1.0)
        await workload.stop_sending()
        await drain(namesrv, history, clock, 300, [TOPIC, ORDERED_TOPIC])
        await wait_live_caught_up(history, 120)
    finally:
        await workload.close()


async def describe(bed: Bed, namesrv: str, history: History) -> str:
    """What the clients see when writes do not come back: routes, pods, the last send errors."""
    lines = [f"name servers {namesrv}"]
    async with Admin(namesrv) as admin:
        for topic in (TOPIC, ORDERED_TOPIC):
            route = await admin.route(topic)
            lines.append(
                f"route {topic}: {[(b.broker_name, dict(b.broker_addrs)) for b in route.broker_datas]}"
            )
    for pod in bed.k8s.get_json("pods", "-n", bed.ns)["items"]:
        lines.append(
            f"pod {pod['metadata']['name']} {pod['status'].get('podIP')} {pod['status'].get('phase')}"
        )
    lines += [f"send {s.workload} {s.outcome.value} {s.error}" for s in history.sends[-5:]]
    return "\n".join(lines)


def judge(history: History, out: Path, elapsed_s: float) -> None:
    """Every checker over the history; the result and its report written to ``out``; the
    recovery table and the verdicts printed; fails on a failed checker."""
    checks = {name: check(history) for name, check in CHECKERS.items()}
    result: dict[str, object] = {
        "ok": all(c.ok for c in checks.values()),
        "settings": {
            "cluster": "OrbitMQCluster on the test bed's real node: 2 groups of master + slave, "
            "SYNC_MASTER, SYNC_FLUSH, failover after 2 s",
            "faults": [name for name, _ in FAULTS],
            "workloads": list(WORKLOADS),
        },
        "elapsed_s": elapsed_s,
        "stopped_early": "",
        "history": history.as_dict(),
        "checks": {name: c.as_dict() for name, c in checks.items()},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "chaos-k8s-result.json").write_text(json.dumps(result, indent=2) + "\n")
    history.save(out / "chaos-k8s-history.json")
    write_report(out / "chaos-k8s-report.html", result, history)
    unknown = collections.Counter(
        s.error.split(":")[0] for s in history.sends if s.outcome.value == "unknown"
    )
    print(f"\nsends not acknowledged, by cause: {dict(unknown)}")
    print("real pods, chaos: fault, target, writes acknowledged again after (s), consumers caught up (s)")
    for row in recovery(history):
        print(f"  {row['fault']:<30} {row['target']:<24} {row['writes_s']!s:>8} {row['caught_up_s']!s:>8}")
    for name, check in checks.items():
        print(f"  {name:<22} {'ok' if check.ok else 'FAILED':<7} {json.dumps(check.summary)[:300]}")
    print(f"  result and report in {out}")
    failed = {name: c.as_dict() for name, c in checks.items() if not c.ok}
    assert not failed, json.dumps(failed, indent=1)[:4000]
