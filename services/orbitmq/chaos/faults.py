"""Faults: one per round, chosen at random from a seeded generator.

A fault names a role (the group's current master, its slave, the name server) and an action:
``kill`` (SIGKILL; local up restarts the process, a master after the group fails over) or
``pause`` (SIGSTOP, then SIGCONT after a seeded pause between half and one and a half failover
windows, so some pauses are blips and some make the group fail over while the old master sleeps,
and it wakes as a stale master). :data:`FAULTS` is the registry; network faults, disk full and a
clock step slot in as more entries with their own ``inject``.
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from orbitmq.chaos.clockfault import CLOCK_FAULTS
from orbitmq.chaos.cluster import NAMESRV, LocalUpCluster, signal_quietly
from orbitmq.chaos.diskfault import DISK_FAULTS
from orbitmq.chaos.gateways import PROXY, SIDECAR
from orbitmq.chaos.history import FaultRecord
from orbitmq.chaos.network import NETWORK_FAULTS
from orbitmq.local.restarts import MAX_RESTARTS, RESTART_WINDOW_S

HEAL_WAIT_S = 30.0
"""How long a kill waits for local up to put a new process in its place."""


class Fault(Protocol):
    """What a round injects: a name for the schedule and the result, and ``inject``, which
    returns once the fault is over (or gave up healing) with what it did."""

    @property
    def name(self) -> str: ...

    async def inject(
        self,
        cluster: LocalUpCluster,
        round_no: int,
        pair: tuple[str, str],
        rng: random.Random,
        clock: Callable[[], float],
    ) -> FaultRecord: ...


class Role(Enum):
    MASTER = "master"
    SLAVE = "slave"
    NAMESRV = "namesrv"
    PROXY = PROXY
    SIDECAR = SIDECAR


NEEDS = {Role.PROXY: "pop", Role.SIDECAR: "sidecar"}
"""The workload that runs (and uses) a role's process: the harness starts the proxy for the POP
consumers and the sidecar for its application (:mod:`.gateways`), and restarts them itself."""


class Action(Enum):
    KILL = "kill"
    PAUSE = "pause"


@dataclass(frozen=True)
class ProcessFault:
    role: Role
    action: Action

    @property
    def name(self) -> str:
        return f"{self.action.value}-{self.role.value}"

    @property
    def needs(self) -> str | None:
        """The workload without which this fault has no process to break (None: any)."""
        return NEEDS.get(self.role)

    async def inject(
        self,
        cluster: LocalUpCluster,
        round_no: int,
        pair: tuple[str, str],
        rng: random.Random,
        clock: Callable[[], float],
    ) -> FaultRecord:
        """Break ``pair``'s (master, slave) member or the name server; returns when it healed
        (paused process continued, killed process replaced) or :data:`HEAL_WAIT_S` passed."""
        target = {Role.MASTER: pair[0], Role.SLAVE: pair[1], Role.NAMESRV: NAMESRV}.get(
            self.role, self.role.value
        )
        pid = cluster.pids().get(target, 0)
        record = FaultRecord(round_no, self.name, target, pid, clock())
        if not pid:
            record.note = "no PID in local up's run file"
            return record
        if self.action is Action.KILL:
            signal_quietly(pid, signal.SIGKILL)
            deadline = time.monotonic() + HEAL_WAIT_S
            while time.monotonic() < deadline:
                if cluster.pids().get(target, pid) != pid:
                    record.healed_at = clock()
                    break
                await asyncio.sleep(0.1)
        else:
            pause_s = rng.uniform(0.5, 1.5) * cluster.failover_after_ms / 1000
            signal_quietly(pid, signal.SIGSTOP)
            await asyncio.sleep(pause_s)
            signal_quietly(pid, signal.SIGCONT)
            record.healed_at = clock()
            record.note = f"paused {pause_s:.2f} s"
        return record


def choose(rng: random.Random, names: list[str], namesrv_kills: list[float], now: float) -> Fault | None:
    """The next fault among ``names``; a name-server kill only while local up would restart it.

    Local up restarts a component at most :data:`~orbitmq.local.restarts.MAX_RESTARTS` times in
    :data:`~orbitmq.local.restarts.RESTART_WINDOW_S` and then stops the cluster (brokers with
    slaves are restarted by the failover loop, without that budget), so a fourth kill within the
    window would test the budget, not the guarantees. ``namesrv_kills``: when earlier ones were.
    None when nothing may be drawn now (only that kill was asked for): wait and ask again.
    """
    recent = [at for at in namesrv_kills if now - at < RESTART_WINDOW_S]
    allowed = [n for n in sorted(names) if not (n == "kill-namesrv" and len(recent) >= MAX_RESTARTS)]
    return FAULTS[rng.choice(allowed)] if allowed else None


FAULTS: dict[str, Fault] = {
    **{f.name: f for f in (ProcessFault(role, action) for action in Action for role in Role)},
    **DISK_FAULTS,
    **CLOCK_FAULTS,
    **{f.name: f for f in NETWORK_FAULTS},
}


def faults_for(workloads: list[str] | tuple[str, ...]) -> list[str]:
    """The faults a run of ``workloads`` can inject: a fault of the proxy or the sidecar only
    when a workload runs it (other faults name no ``needs``: always)."""
    return sorted(n for n, f in FAULTS.items() if getattr(f, "needs", None) in (None, *workloads))
