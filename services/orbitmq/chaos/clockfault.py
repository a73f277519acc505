"""Clock step: one broker's (or the name server's) wall clock stepped away, forward or back
(seeded), and then back.

Mechanism: libfaketime (Debian's ``libfaketime``), preloaded into every process local up starts,
each reading its own offset file, so one broker's clock moves and no other process's (nor the
machine's) does. Local up hands all its children one environment and starts each as
``sys.executable -m orbitmq.cli.main …``; so the harness starts local up with ``sys.executable``
set to a launcher script (:func:`write_launcher`), and the launcher, run for every child, names
the child's own offset file after its ``--data-dir`` (``<data dir>/broker-a.faketime``; the name
server's is ``namesrv.faketime``) before it execs Python with libfaketime preloaded. libfaketime
re-reads that file at every wall-clock call (``FAKETIME_NO_CACHE``: ~14 µs a call against
0.2 µs; its once-a-second cache times itself on the faked clock, so after a forward step it would
not read the step back for as long as the step), and the file is replaced whole, never rewritten
in place (a reader meeting it empty would step the clock back for a moment).
``FAKETIME_DONT_FAKE_MONOTONIC`` leaves the monotonic clock alone, as a real step (NTP, an
operator's ``date -s``) does. (libfaketime 0.9.10 then fails Python's ``time.sleep``, an absolute
sleep on the monotonic clock, with EINVAL while an offset is set; orbitmq's servers never call it,
and asyncio's and threading's waits are unaffected.) The alternatives
were worse: an offset inside orbitmq's own ``Clock`` would move only the time orbitmq reads
through it, not ``time.time()`` in logs, gRPC or libraries; a time namespace steps only the
monotonic and boot clocks; changing local up for a per-child environment changes the product
for a test.

What a step may move in a broker, by the clock each mechanism reads: wall-clock timestamps that
are data (a record's store time, a delayed message's due time, a POP message's invisible-until, a
half message's age for check-backs) follow the step, as RocketMQ's do: a forward step delivers a
delayed message or re-delivers a POP message early (at least once still holds), a backward one
late. Leases and liveness kept in memory (orderly queue locks, client heartbeats, the name
server's broker expiry) are measured on the monotonic clock, so a step neither lapses a held lock
nor expires a live client or broker, nor keeps a dead one. (They were on the wall clock until
this fault found it: a forward step expired every client and lapsed every lock, and a name
server's dropped every broker from the routes.) The fault reads the process's clock back (its
metrics server's ``Date`` header) to say in the record that the step took effect.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import shlex
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orbitmq.chaos.cluster import NAMESRV, LocalUpCluster
from orbitmq.chaos.history import FaultRecord

LIBRARY_GLOBS = ("/usr/lib/*/faketime/libfaketimeMT.so.1", "/usr/lib/faketime/libfaketimeMT.so.1")
"""Where Debian's (and a plain ``make install``'s) thread-safe libfaketime lives."""
LAUNCHER = "chaos-python"
STEP_S = (90.0, 150.0)
"""Seeded size of a step: around 2 minutes, past the broker's 60 s lock and the 120 s client
expiries a wall-clock lease would lapse by."""
HOLD_S = (2.0, 4.0)
"""Seeded time the clock stays stepped, before it is stepped back."""
APPLY_S = 0.5
"""A step is read at the process's next clock call; this leaves it time to act on it."""


def library() -> Path | None:
    """The installed libfaketime (thread-safe build), None without it."""
    return next((p for pattern in LIBRARY_GLOBS for p in sorted(Path("/").glob(pattern[1:]))), None)


def unavailable() -> str | None:
    """Why the clock faults cannot run on this machine, or None."""
    return None if library() is not None else "libfaketime is not installed (apt-get install libfaketime)"


def write_launcher(data_dir: Path) -> Path | None:
    """Write the launcher local up runs its children with (see the module docstring); None when
    libfaketime is not installed (``apt-get install libfaketime``)."""
    lib = library()
    if lib is None:
        return None
    data_dir.mkdir(parents=True, exist_ok=True)
    launcher = data_dir / LAUNCHER
    launcher.write_text(
        "#!/bin/sh\n"
        "# orbitmq chaos (orbitmq.chaos.clockfault): each process of the cluster with its own\n"
        "# libfaketime offset file, named after its --data-dir (the name server has none).\n"
        f"clock={shlex.quote(str(data_dir / 'namesrv.faketime'))}\n"
        "previous=\n"
        'for arg in "$@"; do\n'
        '    [ "$previous" = --data-dir ] && clock="$arg.faketime"\n'
        '    previous="$arg"\n'
        "done\n"
        f"LD_PRELOAD={shlex.quote(str(lib))} \\\n"
        '    FAKETIME_TIMESTAMP_FILE="$clock" FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1 \\\n'
        f'    exec {shlex.quote(sys.executable)} "$@"\n'
    )
    launcher.chmod(0o755)
    return launcher


def clock_file(cluster: LocalUpCluster, component: str) -> Path:
    """The offset file of local up's ``broker <dir>`` or ``namesrv`` component (as the launcher
    names it)."""
    if component == NAMESRV:
        return cluster.data_dir / "namesrv.faketime"
    return Path(f"{cluster.store_dir(component)}.faketime")


@dataclass(frozen=True)
class ClockStepFault:
    role: str
    """``master``, ``slave`` (of the current pair) or ``namesrv``: whose clock is stepped."""

    @property
    def name(self) -> str:
        return f"clock-step-{self.role}"

    async def inject(
        self,
        cluster: LocalUpCluster,
        round_no: int,
        pair: tuple[str, str],
        rng: random.Random,
        clock: Callable[[], float],
    ) -> FaultRecord:
        target = {"master": pair[0], "slave": pair[1]}.get(self.role, NAMESRV)
        record = FaultRecord(round_no, self.name, target, cluster.pids().get(target, 0), clock())
        if cluster.launcher is None:
            record.note = "skipped: libfaketime is not installed (apt-get install libfaketime)"
            return record
        step_s = rng.choice((1, -1)) * rng.uniform(*STEP_S)
        hold_s = rng.uniform(*HOLD_S)
        offsets = clock_file(cluster, target)
        metrics = cluster.metrics.get(target, "")
        set_offset(offsets, step_s)
        try:
            await asyncio.sleep(APPLY_S)
            seen = await broker_offset_s(metrics)
            await asyncio.sleep(hold_s)
        finally:
            set_offset(offsets, 0)
        await asyncio.sleep(APPLY_S)
        back = await broker_offset_s(metrics)
        record.healed_at = clock()
        record.note = (
            f"wall clock stepped {step_s:+.0f} s for {hold_s:.2f} s, then back; the process read "
            f"{_offset(seen)} while stepped, {_offset(back)} after"
        )
        return record


def set_offset(offsets: Path, seconds: float) -> None:
    """Step the clock of the process reading ``offsets`` to ``seconds`` from the real one; the
    file is replaced whole (see the module docstring)."""
    temporary = offsets.with_name(f".{offsets.name}.new")
    temporary.write_text(f"{seconds:+.0f}\n")
    temporary.replace(offsets)


async def broker_offset_s(metrics_url: str) -> float | None:
    """The server's wall clock minus ours, in seconds (±1: its metrics server's ``Date``
    header has whole seconds), or None when it does not answer."""
    try:
        date = await asyncio.to_thread(_date_header, metrics_url)
    except OSError:
        return None
    if date is None:
        return None
    return email.utils.parsedate_to_datetime(date).timestamp() - time.time()


def _date_header(url: str) -> str | None:
    with urllib.request.urlopen(url, timeout=2) as reply:
        return reply.headers.get("Date")


def _offset(seconds: float | None) -> str:
    return "nothing (no answer)" if seconds is None else f"{seconds:+.0f} s"


CLOCK_FAULTS = {f.name: f for f in (ClockStepFault(role) for role in ("master", "slave", "namesrv"))}
