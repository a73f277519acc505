"""One chaos run: start the cluster, start the workload, a fault per round, drain, judge.

The result (:func:`run`) is a JSON-ready dict: the settings (seed included, so a run can be
repeated), per round its fault and times, the recovery table and every checker's verdict.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from orbitmq.chaos.checkers import CHECKERS, Check, missing_per_group
from orbitmq.chaos.clockfault import CLOCK_FAULTS, write_launcher
from orbitmq.chaos.cluster import LocalUpCluster
from orbitmq.chaos.diskfault import DISK_FAULTS, STORE_MIB
from orbitmq.chaos.faults import FAULTS, choose, faults_for
from orbitmq.chaos.history import FaultRecord, History
from orbitmq.chaos.network import Network, uses_network
from orbitmq.chaos.report import write_report
from orbitmq.chaos.workloads import WORKLOADS, Workload, drain

HEALTHY_WAIT_S = 60.0
"""Longest wait for a caught-up master/slave pair before a round (a round that finds none is
recorded and the run stops: the cluster did not heal)."""
RECOVERY_WAIT_S = 30.0
"""Longest wait, after a fault healed, for a write acknowledged again."""
DRAIN_WAIT_S = 600.0
"""Longest final read (it stops early once complete, or idle: see :func:`.workloads.drain`)."""


@dataclass
class RunSettings:
    rounds: int = 3
    duration_s: float | None = None
    """Stop starting rounds after this many seconds (with ``rounds``, whichever comes first)."""
    seed: int = 0
    faults: list[str] = field(default_factory=lambda: sorted(FAULTS))
    workloads: list[str] = field(default_factory=lambda: list(WORKLOADS))
    """What the clients do (:data:`.workloads.WORKLOADS`); a fault needing one (the proxy's
    ``pop``, the sidecar's ``sidecar``) is refused without it (:func:`.faults.faults_for`)."""
    checkers: list[str] = field(default_factory=lambda: list(CHECKERS))
    data_dir: Path | None = None
    """Where local up keeps its data and log (default: a temporary directory, removed after)."""
    failover_after_ms: int = 3_000
    history_file: Path | None = None
    """Where the whole history is saved (every send and delivery), to be judged again."""
    report_file: Path | None = None
    """Where the HTML report is written (:mod:`.report`; needs matplotlib, the ``report`` extra)."""
    settle_s: tuple[float, float] = (0.5, 1.5)
    """Seeded pause between a healthy cluster and the next fault: traffic in full flow."""


async def run(settings: RunSettings, progress: Callable[[str], None] = lambda _: None) -> dict[str, object]:
    if settings.data_dir is not None:
        return await _run(settings, settings.data_dir, progress)
    with tempfile.TemporaryDirectory(prefix="orbitmq-chaos-") as tmp:
        return await _run(settings, Path(tmp), progress)


async def _run(settings: RunSettings, data_dir: Path, progress: Callable[[str], None]) -> dict[str, object]:
    unknown = sorted(set(settings.faults) - set(FAULTS)) + sorted(set(settings.checkers) - set(CHECKERS))
    if unknown:
        raise ValueError(
            f"unknown faults or checkers {unknown}; faults: {sorted(FAULTS)}, checkers: {list(CHECKERS)}"
        )
    idle = sorted(set(settings.faults) - set(faults_for(settings.workloads)))
    if idle:
        raise ValueError(f"faults {idle} need a workload not chosen (workloads: {settings.workloads})")
    origin = time.monotonic()

    def clock() -> float:
        return round(time.monotonic() - origin, 4)

    history = History()
    store_mib = STORE_MIB if set(settings.faults) & set(DISK_FAULTS) else None  # a disk it can fill
    network = Network(data_dir) if uses_network(settings.faults) else None  # toxiproxy, iptables
    cluster = LocalUpCluster(data_dir, settings.failover_after_ms, store_mib=store_mib, network=network)
    if set(settings.faults) & set(CLOCK_FAULTS):  # each process's clock its own (libfaketime)
        cluster.launcher = write_launcher(data_dir)
    await cluster.start()
    progress(f"cluster up (name server {cluster.namesrv}, data in {data_dir})")
    workload = Workload(cluster.namesrv, history, clock, tuple(settings.workloads), settings.seed, data_dir)
    cluster.gateway_pids = workload.gateway_pids
    rounds = _Rounds(settings, cluster, workload, random.Random(settings.seed), clock)
    try:
        await rounds.workload.start()
        stopped_early = await rounds.run(progress)
        await rounds.finish()
    finally:
        mounted = list(cluster.mounted)
        await rounds.workload.close()
        await cluster.stop()
    if settings.history_file is not None:
        history.save(settings.history_file)
    checks = [CHECKERS[name](history) for name in settings.checkers]
    disk = {
        "disk_used_ratio_max": round(max(rounds.disk_ratios, default=0.0), 4),
        "retention": cluster.retention_deletions(),
        "store_mounts": [str(p.relative_to(data_dir)) for p in mounted] or cluster.mount_error,
        "store_check": cluster.store_problems,
    }
    outcome = result(settings, history, checks, stopped_early, clock(), disk, workload.stats())
    if settings.report_file is not None:
        write_report(settings.report_file, outcome, history)
    return outcome


@dataclass
class _Rounds:
    settings: RunSettings
    cluster: LocalUpCluster
    workload: Workload
    rng: random.Random
    clock: Callable[[], float]
    disk_ratios: list[float] = field(default_factory=list)
    """The data directory's disk, used ratio, at every round (see ``disk`` in the result)."""

    @property
    def history(self) -> History:
        return self.workload.history

    async def run(self, progress: Callable[[str], None]) -> str:
        """Every round; returns why the run stopped early ("" when it did not)."""
        settings, round_no = self.settings, 0
        while round_no < settings.rounds and (
            settings.duration_s is None or self.clock() < settings.duration_s
        ):
            round_no += 1
            record = await self.round(round_no)
            if record is None:
                return f"round {round_no}: {self._unhealthy()}"
            progress(f"round {round_no}: {record.fault} of {record.target} (PID {record.pid}) {record.note}")
        if await self.cluster.wait_healthy(HEALTHY_WAIT_S) is None:
            return f"after the last round: {self._unhealthy()}"
        return ""

    async def round(self, round_no: int) -> FaultRecord | None:
        """Wait for a healthy group, inject one fault, wait for writes again; None: never healthy."""
        pair = await self.cluster.wait_healthy(HEALTHY_WAIT_S)
        if pair is None:
            return None
        await asyncio.sleep(self.rng.uniform(*self.settings.settle_s))
        kills = [f.injected_at for f in self.history.faults if f.fault == "kill-namesrv"]
        while (fault := choose(self.rng, self.settings.faults, kills, self.clock())) is None:  # noqa: ASYNC110 - the clock
            await asyncio.sleep(1.0)  # only a name-server kill asked for, its budget spent
        record = await fault.inject(self.cluster, round_no, pair, self.rng, self.clock)
        self.history.faults.append(record)
        deadline = time.monotonic() + RECOVERY_WAIT_S
        recovered = self.workload.acknowledged_after
        while not recovered(record.injected_at, record.target) and time.monotonic() < deadline:  # noqa: ASYNC110 - bounded
            await asyncio.sleep(0.1)
        record.round_ended_at = self.clock()
        self.disk_ratios.append(self.cluster.disk_used_ratio())
        return record

    def _unhealthy(self) -> str:
        return self.cluster.exit_reason() or f"no caught-up master/slave pair within {HEALTHY_WAIT_S:.0f} s"

    async def finish(self) -> None:
        """Stop sending, then read everything back (unless the cluster is gone)."""
        await asyncio.sleep(1.0)  # sends in flight at the last fault settle
        await self.workload.stop_sending()
        if self.cluster.exit_reason() is None:
            await drain(self.cluster.namesrv, self.history, self.clock, DRAIN_WAIT_S, self.workload.topics)
            await wait_live_caught_up(self.history, RECOVERY_WAIT_S)
        else:  # nothing to read from: the loss checker must not pass on an empty drain
            self.history.drain_complete = False


async def wait_live_caught_up(history: History, timeout_s: float) -> None:
    """The live groups consume what was acknowledged before the run is judged (each group
    what it reads: :func:`.checkers.missing_per_group`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(missing_per_group(history).values()):  # noqa: ASYNC110 - listener threads
        await asyncio.sleep(0.5)


def result(
    settings: RunSettings,
    history: History,
    checks: list[Check],
    stopped_early: str,
    elapsed_s: float,
    disk: dict[str, object],
    clients: dict[str, object] | None = None,
) -> dict[str, object]:
    return {
        "ok": all(c.ok for c in checks) and not stopped_early and not disk.get("store_check"),
        "settings": {
            "rounds": settings.rounds,
            "duration_s": settings.duration_s,
            "seed": settings.seed,
            "faults": settings.faults,
            "workloads": settings.workloads,
            "cluster": "local up --slaves 1 (SYNC_MASTER, SYNC_FLUSH)",
            "failover_after_ms": settings.failover_after_ms,
        },
        "elapsed_s": round(elapsed_s, 2),
        "stopped_early": stopped_early,
        "disk": disk,
        "history": history.as_dict(),
        "clients": clients or {},
        "checks": {c.name: c.as_dict() for c in checks},
    }
