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

from orbitmq.chaos.checkers import CHECKERS, Check
from orbitmq.chaos.cluster import LocalUpCluster
from orbitmq.chaos.faults import FAULTS, choose
from orbitmq.chaos.history import History
from orbitmq.chaos.workloads import Workload, drain

HEALTHY_WAIT_S = 60.0
"""Longest wait for a caught-up master/slave pair before a round (a round that finds none is
recorded and the run stops: the cluster did not heal)."""
RECOVERY_WAIT_S = 30.0
"""Longest wait, after a fault healed, for a write acknowledged again."""
DRAIN_WAIT_S = 60.0


@dataclass
class RunSettings:
    rounds: int = 3
    duration_s: float | None = None
    """Stop starting rounds after this many seconds (with ``rounds``, whichever comes first)."""
    seed: int = 0
    faults: list[str] = field(default_factory=lambda: sorted(FAULTS))
    checkers: list[str] = field(default_factory=lambda: list(CHECKERS))
    data_dir: Path | None = None
    """Where local up keeps its data and log (default: a temporary directory, removed after)."""
    failover_after_ms: int = 3_000
    history_file: Path | None = None
    """Where the whole history is saved (every send and delivery), to be judged again."""
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
    rng = random.Random(settings.seed)
    origin = time.monotonic()

    def clock() -> float:
        return round(time.monotonic() - origin, 4)

    history = History()
    cluster = LocalUpCluster(data_dir, settings.failover_after_ms)
    await cluster.start()
    progress(f"cluster up (name server {cluster.namesrv}, data in {data_dir})")
    workload = Workload(cluster.namesrv, history, clock)
    stopped_early = ""
    try:
        await workload.start()
        round_no = 0
        while round_no < settings.rounds and (settings.duration_s is None or clock() < settings.duration_s):
            round_no += 1
            pair = await cluster.wait_healthy(HEALTHY_WAIT_S)
            if pair is None:
                stopped_early = (
                    f"round {round_no}: no caught-up master/slave pair within {HEALTHY_WAIT_S:.0f} s"
                )
                break
            await asyncio.sleep(rng.uniform(*settings.settle_s))
            kills = [f.injected_at for f in history.faults if f.fault == "kill-namesrv"]
            while (fault := choose(rng, settings.faults, kills, clock())) is None:  # noqa: ASYNC110 - the clock
                await asyncio.sleep(1.0)  # only a name-server kill asked for, its budget spent
            record = await fault.inject(cluster, round_no, pair, rng, clock)
            history.faults.append(record)
            deadline = time.monotonic() + RECOVERY_WAIT_S
            while not workload.acknowledged_after(record.injected_at) and time.monotonic() < deadline:  # noqa: ASYNC110 - bounded
                await asyncio.sleep(0.1)
            record.round_ended_at = clock()
            progress(f"round {round_no}: {record.fault} of {record.target} (PID {record.pid}) {record.note}")
        if await cluster.wait_healthy(HEALTHY_WAIT_S) is None and not stopped_early:
            stopped_early = (
                f"after the last round: no caught-up master/slave pair within {HEALTHY_WAIT_S:.0f} s"
            )
        await asyncio.sleep(1.0)  # sends in flight at the last fault settle
        await workload.stop_sending()
        await drain(cluster.namesrv, history, clock, DRAIN_WAIT_S)
        await _wait_live_caught_up(history, DRAIN_WAIT_S)
    finally:
        await workload.close()
        await cluster.stop()
    if settings.history_file is not None:
        history.save(settings.history_file)
    checks = [CHECKERS[name](history) for name in settings.checkers]
    return result(settings, history, checks, stopped_early, clock())


async def _wait_live_caught_up(history: History, timeout_s: float) -> None:
    """The live groups consume what was acknowledged before the run is judged."""
    acked = {s.message_id for s in history.sends if s.outcome.value == "acknowledged"}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not acked <= {d.message_id for d in history.deliveries}:  # noqa: ASYNC110 - listener threads
        await asyncio.sleep(0.5)


def result(
    settings: RunSettings, history: History, checks: list[Check], stopped_early: str, elapsed_s: float
) -> dict[str, object]:
    return {
        "ok": all(c.ok for c in checks) and not stopped_early,
        "settings": {
            "rounds": settings.rounds,
            "duration_s": settings.duration_s,
            "seed": settings.seed,
            "faults": settings.faults,
            "cluster": "local up --slaves 1 (SYNC_MASTER, SYNC_FLUSH)",
            "failover_after_ms": settings.failover_after_ms,
        },
        "elapsed_s": round(elapsed_s, 2),
        "stopped_early": stopped_early,
        "history": history.as_dict(),
        "checks": {c.name: c.as_dict() for c in checks},
    }
