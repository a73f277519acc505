"""How ``orbitmq bench soak`` judges and prints its result (:func:`verdict`, :func:`summary`)."""

from __future__ import annotations

from typing import Any

GROWTH_LIMIT = 0.10
"""The issue's bound: no resource grows more than 10 % after the warm-up."""
SLACK = {"rss_anon_mb": 10.0, "open_fds": 8.0, "threads": 4.0}
"""The series judged under load, and the absolute growth below which one is not: a handful of file
descriptors or tasks on a small base (a sidecar at 30 fds) is a percentage, not a leak.
Memory is judged by its anonymous part: the broker's mapped commit-log pages (``rss_file_mb``)
grow with the log until the kernel reclaims them, as any mmap store's do."""
IDLE_SLACK = {"asyncio_tasks": 5.0, "open_sockets": 2.0}
"""Idle, before and after the traffic: a timer or a pooled connection more is not a leak."""
JUDGED_FROM_S = 600.0
"""Growth is judged in runs this long or longer; a shorter run's warm-up (10 % of it) leaves
caches, pools and the allocator still filling, so its growth is reported, not judged."""
SHOWN = ("rss_mb", "rss_anon_mb", "open_fds", "threads", "asyncio_tasks")


def verdict(result: dict[str, Any]) -> list[str]:
    """Problems of a run: lost messages, a resource grown past the limit, a table or the
    metric series count not back at its level after the churn. Empty: the run passed."""
    problems = []
    for name, path in result.get("paths", {}).items():
        if path["lost"]:
            problems.append(f"{name}: {path['lost']} acknowledged messages never consumed")
    judged = result.get("duration_s", 0) >= JUDGED_FROM_S
    for server, series in result.get("growth", {}).items() if judged else ():
        for name, slack in SLACK.items():
            figures = series.get(name)
            if figures is None:
                continue
            grown = figures["at_end"] - figures["after_warmup"]
            if figures["growth"] > GROWTH_LIMIT and grown > slack:
                problems.append(
                    f"{server} {name} grew {figures['growth']:.1%} "
                    f"({figures['after_warmup']} -> {figures['at_end']}) after the warm-up"
                )
    for name, levels in result.get("idle", {}).items():
        slack = IDLE_SLACK[name.rsplit("/", 1)[1]]
        if levels["after"] > levels["before"] + slack:
            problems.append(f"{name} idle at {levels['after']} after the traffic, {levels['before']} before")
    churn = result.get("churn")
    if churn:
        for name, levels in churn["above_before"].items():
            problems.append(
                f"{name} stayed at {levels['after']} after the churn (before: {levels['before']})"
            )
        if churn["failed"]:
            problems.append(f"churn clients failed: {churn['failed'][:3]}")
    return problems


def summary(result: dict[str, Any]) -> str:
    """The figures a reader compares, one per line."""
    lines = [
        f"capacity (msg/s, all paths at once): {result['capacity_per_s']}",
        f"soak rate (msg/s): {result['rate_per_s']} for {result['duration_s']:.0f} s "
        f"(warm-up {result['warmup_s']:.0f} s); acknowledged: {result.get('sent_per_s')}",
    ]
    for name, path in result["paths"].items():
        lines.append(
            f"{name:<8} acked {path['acknowledged']} lost {path['lost']} duplicates {path['duplicates']} "
            f"send p99 {path['send_p99_ms']} ms e2e p99 {path['e2e_p99_ms']} ms "
            f"drift {path['p99_drift_ms']} ms per minute {path['e2e_p99_ms_per_minute']}"
        )
    for server, series in result["growth"].items():
        shown = ", ".join(
            f"{name} {f['after_warmup']}->{f['at_end']} ({f['growth']:+.1%})"
            for name, f in series.items()
            if name in SHOWN
        )
        lines.append(f"{server:<8} {shown}")
    churn = result.get("churn")
    if churn:
        lines.append(
            f"churn: {churn['clients']} clients (second half in {churn['seconds_second_half']} s), "
            f"back within "
            f"{churn['back_within_s']} s; above their level: {churn['above_before'] or 'none'}"
        )
    problems = verdict(result)
    lines.append("PASS" if not problems else "FAIL: " + "; ".join(problems))
    return "\n".join(lines)
