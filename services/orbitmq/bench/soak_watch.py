"""What ``orbitmq bench soak`` samples of each server process, and how it judges growth.

Resident memory, open files and OS threads come from ``/proc/<pid>`` (they need nothing of the
process); event-loop tasks, the per-client tables and the number of series on the metrics page
come from the process's own ``/metrics`` (``orbitmq_asyncio_tasks``,
``orbitmq_server_table_entries``: :mod:`orbitmq.common.runtime_metrics`), as a dashboard reads
them.

Growth of a series is the mean of its last window of samples over the mean of the window right
after the warm-up, minus one: one sample is too noisy (a garbage collection, a burst of
long polls) and the warm-up fills caches, pools and the allocator's arenas that then stay.
"""

from __future__ import annotations

import os
import statistics
import time
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

PROC_SERIES = ("rss_mb", "rss_anon_mb", "rss_file_mb", "open_fds", "open_sockets", "threads")


@dataclass
class Server:
    name: str
    pid: int
    metrics_url: str


@dataclass
class Samples:
    """Every sample of every server: ``series[server][name]`` is a list of (seconds, value)."""

    series: dict[str, dict[str, list[tuple[float, float]]]] = field(default_factory=dict)

    def add(self, server: str, at: float, values: dict[str, float]) -> None:
        mine = self.series.setdefault(server, {})
        for name, value in values.items():
            mine.setdefault(name, []).append((at, value))


def proc_values(pid: int) -> dict[str, float]:
    """RSS (MB; also split into anonymous memory and mapped file pages: the broker maps its
    commit log, whose pages count as resident as they are written and read, and the kernel
    takes back under pressure, so a leak shows in ``rss_anon_mb``), open file descriptors (and
    how many are sockets) and threads of ``pid``; empty once it is gone."""
    values: dict[str, float] = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    values["rss_mb"] = int(line.split()[1]) / 1024
                elif line.startswith("RssAnon:"):
                    values["rss_anon_mb"] = int(line.split()[1]) / 1024
                elif line.startswith("RssFile:"):
                    values["rss_file_mb"] = int(line.split()[1]) / 1024
                elif line.startswith("Threads:"):
                    values["threads"] = int(line.split()[1])
        fds = os.listdir(f"/proc/{pid}/fd")
        values["open_fds"] = len(fds)
        values["open_sockets"] = sum(_is_socket(pid, fd) for fd in fds)
    except OSError:
        return {}
    return values


def _is_socket(pid: int, fd: str) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
    except OSError:  # closed meanwhile
        return False


def metrics_values(url: str) -> dict[str, float]:
    """``asyncio_tasks``, ``series`` (samples on the page) and ``table:<name>`` of each table."""
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    values: dict[str, float] = {"series": 0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values["series"] += 1
            if sample.name == "orbitmq_asyncio_tasks":
                values["asyncio_tasks"] = sample.value
            elif sample.name == "orbitmq_server_table_entries":
                values[f"table:{sample.labels['table']}"] = sample.value
    return values


def sample(servers: list[Server], samples: Samples, started: float) -> None:
    """One sample of every server (blocking: call it in a thread)."""
    at = time.monotonic() - started
    for server in servers:
        values = proc_values(server.pid)
        try:
            values |= metrics_values(server.metrics_url)
        except OSError as error:
            values["scrape_failed"] = 1
            del error
        samples.add(server.name, at, values)


def _mean(points: list[tuple[float, float]], start: float, end: float) -> float | None:
    values = [v for t, v in points if start <= t < end]
    return statistics.fmean(values) if values else None


def growth(
    samples: Samples, warm_s: float, end_s: float, window_s: float
) -> dict[str, dict[str, dict[str, float]]]:
    """Per server and series: ``after_warmup`` and ``at_end`` (window means), ``growth``
    (their ratio minus one; 0 for a series at 0 both times) and ``max``."""
    result: dict[str, dict[str, dict[str, float]]] = {}
    for server, series in samples.series.items():
        for name, points in series.items():
            if name == "scrape_failed":
                continue
            first = _mean(points, warm_s, warm_s + window_s)
            last = _mean(points, end_s - window_s, end_s + 1)
            if first is None or last is None:
                continue
            ratio = (last / first - 1) if first else (0.0 if not last else float("inf"))
            result.setdefault(server, {})[name] = {
                "after_warmup": round(first, 2),
                "at_end": round(last, 2),
                "growth": round(ratio, 4),
                "max": max(v for _, v in points),
            }
    return result


def tables_back(before: dict[str, float], after: dict[str, float]) -> dict[str, dict[str, float]]:
    """The tables (and metric series) left above their level before the churn: name ->
    {before, after}. ``before`` is the largest of the samples before, ``after`` the smallest
    after the expiry, so a table that moves with live traffic (held pulls) is judged fairly."""
    return {
        name: {"before": before[name], "after": value}
        for name, value in sorted(after.items())
        if name in before and value > before[name]
    }
