"""Disk full: the master's (or the slave's) store disk filled past the refusal ratio, then freed.

The brokers' stores are tmpfs mounts of their own (:attr:`LocalUpCluster.store_mib`, root only),
so a ballast file fills exactly one broker's disk and never the machine's, and the brokers act on
the chaos cluster's ratios (:data:`~orbitmq.chaos.cluster.STORE_DISK_RATIOS`). The ballast is
``fallocate``'d (instant, really allocated: tmpfs counts it at once) to a seeded used ratio between
the refusal ratio and the forced-deletion ratio, held for a seeded time, then deleted.

What a master's round should show: sends refused with DISK_FULL (recorded failed: nothing stored,
which the unacknowledged checker holds them to), consumption going on, writes acknowledged again
within a disk check (``disk_check_interval_ms``, 1 s) of the removal. A slave's full disk is below
the ENOSPC line, so it should change nothing a client sees. After the run,
:func:`check_stores` reads every store from its first byte: no torn or dropped record.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import shutil
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orbitmq.chaos.cluster import STORE_DISK_RATIOS, LocalUpCluster
from orbitmq.chaos.history import FaultRecord

STORE_MIB = 512
"""Size of each broker's tmpfs store: a short run with four workloads already holds ~100 MiB
(8 MiB segments, a 6 MB consume-queue file per queue, the index), so long runs stay well under
the refusal ratio; tmpfs takes RAM only for what is written, the ballast only while held."""
BALLAST = "chaos-ballast"
NOTICE_WAIT_S = 5.0
"""Longest wait for the broker to say its disk is full (or free again): a few disk checks."""
FULL_GAUGE = re.compile(r"^orbitmq_store_disk_full\{[^}]*\} (?P<value>\S+)$", re.MULTILINE)
HOLD_S = (2.0, 4.0)
"""Seeded hold of the full disk: past a disk check or two (1 s each), short of a round's wait."""


@dataclass(frozen=True)
class DiskFullFault:
    role: str
    """``master`` or ``slave``: whose store of the current pair is filled."""

    @property
    def name(self) -> str:
        return f"disk-full-{self.role}"

    async def inject(
        self,
        cluster: LocalUpCluster,
        round_no: int,
        pair: tuple[str, str],
        rng: random.Random,
        clock: Callable[[], float],
    ) -> FaultRecord:
        target = pair[0] if self.role == "master" else pair[1]
        record = FaultRecord(round_no, self.name, target, cluster.pids().get(target, 0), clock())
        store = cluster.store_dir(target)
        if store not in cluster.mounted:
            record.note = f"skipped: no store mount of its own ({cluster.mount_error or 'not asked for'})"
            return record
        low = STORE_DISK_RATIOS["disk_space_warning_level_ratio"]
        high = STORE_DISK_RATIOS["disk_space_clean_forcibly_ratio"]
        # Headroom below the forced deletion: the broker may still allocate a segment (8 MiB) or
        # consume-queue files (6 MB each) meanwhile (a 256 MiB store aimed at 95 % reached 96.1 %).
        wanted = rng.uniform(low + 0.02, high - 0.07)
        hold_s = rng.uniform(*HOLD_S)
        ballast = store / BALLAST
        metrics = cluster.metrics.get(target, "")
        reached = await asyncio.to_thread(fill, store, ballast, wanted)
        filled_at = clock()
        try:
            refusing = await wait_disk_full(metrics, True)
            if refusing:  # the fault, as clients meet it, starts when the broker acts on it
                record.injected_at = clock()
            await asyncio.sleep(hold_s)
        finally:
            ballast.unlink(missing_ok=True)
        record.healed_at = clock()
        accepting = await wait_disk_full(metrics, False)
        record.note = (
            f"store {reached:.1%} full for {hold_s:.2f} s; "
            + (
                f"broker refusing {record.injected_at - filled_at:.2f} s after the ballast"
                if refusing
                else f"broker NOT refusing within {NOTICE_WAIT_S:.0f} s"
            )
            + ("" if accepting else f"; still refusing {NOTICE_WAIT_S:.0f} s after its removal")
        )
        return record


async def wait_disk_full(metrics_url: str, full: bool) -> bool:
    """Wait until the broker's ``orbitmq_store_disk_full`` gauge reads ``full`` (at most
    :data:`NOTICE_WAIT_S`); whether it did."""
    deadline = time.monotonic() + NOTICE_WAIT_S
    while time.monotonic() < deadline:
        try:
            text = await asyncio.to_thread(_scrape, metrics_url)
        except OSError:
            text = ""
        match = FULL_GAUGE.search(text)
        if match and (float(match["value"]) == 1) is full:
            return True
        await asyncio.sleep(0.05)
    return False


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=1) as reply:
        return reply.read().decode(errors="replace")


def unavailable() -> str | None:
    """Why the disk faults cannot run on this machine (they mount a tmpfs per store), or None."""
    if os.geteuid() != 0:
        return "mounting a tmpfs store needs root"
    if shutil.which("mount") is None:
        return "no mount command"
    return None


def fill(store: Path, ballast: Path, ratio: float) -> float:
    """Allocate ``ballast`` so that ``store``'s file system is ``ratio`` used (as the broker
    reads it: :func:`orbitmq.store.disk.used_ratio`); returns the ratio reached."""
    from orbitmq.store.disk import used_ratio

    stats = os.statvfs(store)
    used = stats.f_blocks - stats.f_bfree
    usable = used + stats.f_bavail
    blocks = max(0, int(ratio * usable) - used)
    fd = os.open(ballast, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        if blocks:
            os.posix_fallocate(fd, 0, blocks * stats.f_frsize)
    finally:
        os.close(fd)
    return used_ratio(store)


def check_stores(cluster: LocalUpCluster) -> list[str]:
    """Each stopped broker's store read from its first byte (:func:`check_store`); one line a
    problem, naming the store."""
    from orbitmq.local.datadir import check_segment_bytes
    from orbitmq.store.config import MIB

    problems = []
    for directory in sorted(p for p in cluster.data_dir.glob("broker-a*") if p.is_dir()):
        if not (directory / "commitlog").is_dir():
            continue
        segment_bytes = check_segment_bytes(directory, 8 * MIB)
        problems += [f"{directory.name}: {p}" for p in check_store(directory, segment_bytes)]
    return problems


def check_store(data_dir: Path, segment_bytes: int) -> list[str]:
    """Open a stopped broker's store with its checkpoint removed, so recovery checks every
    record from the first byte (magic, size, position, body CRC) and every queue unit against
    the log: a consistent store has nothing to cut or drop."""
    from orbitmq.store.config import StoreConfig
    from orbitmq.store.message_store import MessageStore

    (data_dir / "checkpoint").unlink(missing_ok=True)
    never = {name: 1.0 for name in STORE_DISK_RATIOS}  # a check deletes nothing, whatever the disk
    store = MessageStore(StoreConfig(data_dir=data_dir, segment_bytes=segment_bytes, **never))
    report = store.open()
    store.close()
    problems = []
    if report.commitlog.truncated_bytes or report.commitlog.segments_removed or report.units_dropped:
        problems.append(f"store recovery cut or dropped data: {report}")
    if report.commitlog.valid_end == 0:
        problems.append("store recovery found no records")
    return problems


DISK_FAULTS = {f.name: f for f in (DiskFullFault("master"), DiskFullFault("slave"))}
