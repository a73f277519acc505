"""``orbitmq bench peer``: orbitmq against Apache RocketMQ 5.3.3 on the same machine.

Each round starts one system, runs every workload through its public client (a driver process
per workload, :mod:`orbitmq.bench.peer_workloads`), stops it, then does the same for the other
system; rounds alternate which system goes first, so both meet the machine's quiet and busy
minutes alike, and never run at the same time. Every figure is orbitmq's median over the rounds
with RocketMQ's median as its baseline; the per-round ratios (round ``r`` of one side against
round ``r`` of the other) are quoted in the baseline's name.

Around each driver run the orchestrator reads the broker's CPU seconds (utime + stime of the
broker process and its children, ``/proc/<pid>/stat``) when the driver marks its timed phase and
when its result line arrives; the driver's CPU of the timed phase is its own report, or its
whole-process CPU from ``wait4`` when it marks nothing. The broker's resident memory (VmRSS,
which counts the pages of its mapped store files that are in memory, and RssAnon, which does
not) is read after each run, its peak (VmHWM) at the end of the round.

Workloads (``N`` = ``--messages``, 1 KiB bodies, topics of 8 queues, a fresh group per run):
``send_1`` / ``send_8`` / ``send_32`` (sync sends, that many in flight, ``N / 4`` for one in
flight), RocketMQ again with ``autoBatch`` for 8 and 32 (``send_8_vs_autobatch``);
``batch_128`` (4 in flight, ``10 N``); ``consume`` (a push consumer draining ``10 N`` stored by
the batch workload first, on a topic of its own); ``latency_1000`` / ``latency_10000``
(open-loop paced sends, produce-to-consume latency, ``N / 2`` and ``3 N / 2`` messages, each on
a fresh topic).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import click

from orbitmq.bench.figures import Figure
from orbitmq.bench.peer_workloads import TIMED_MARK, DriverResult, Workload

QUEUES = 8
SYSTEMS = ("rocketmq", "orbitmq")
BASELINE = "rocketmq"
REPORTED = ("send_1", "send_8", "send_32", "batch_128", "consume", "latency_1000", "latency_10000")
"""The workloads ``--only`` picks from, in the order their figures print."""
AUTOBATCH = ("send_8", "send_32")
"""Workloads RocketMQ runs a second time with its producer's ``autoBatch`` on."""
DRIVER_TIMEOUT_S = 900.0
"""A driver still running after this long is killed and the run fails (a hung client)."""
TICKS = os.sysconf("SC_CLK_TCK")


class Cluster(Protocol):
    """What both systems' clusters offer (``RocketMQCluster``, :class:`OrbitmqCluster`)."""

    name: str
    namesrv: str
    broker_pid: int

    def create_topic(self, topic: str, queues: int) -> None: ...

    def driver_command(self) -> list[str]: ...


DEFAULT_WARMUP = 20_000
"""Untimed messages before each send, batch and consume run: RocketMQ's Java client runs
half-compiled code for about its first 20 000 sends (with 2 000 its timed phase ran 2-3x slower
at 2.5x the CPU a message), and the same count is given to orbitmq."""


@dataclass(frozen=True, slots=True)
class Plan:
    """One driver run of a round: ``name`` keys its figures, ``reported`` False for the
    backlog load the consume run drains."""

    name: str
    workload: Workload
    systems: tuple[str, ...] = SYSTEMS
    reported: bool = True
    topic: str = "peer_sends"
    """Send and batch runs share one topic (a producer does not care what is stored before its
    messages); the consume run drains a topic of its own, and each latency run gets a fresh one
    (the contract's)."""


def plans(messages: int, only: tuple[str, ...], warmup: int = DEFAULT_WARMUP) -> list[Plan]:
    """The driver runs of one round for ``messages`` = ``N``, restricted to ``only``; every
    send, batch and consume run first does ``warmup`` messages untimed (``W``)."""
    n = messages
    chosen: list[Plan] = []
    for name in only:
        if name.startswith("send_"):
            in_flight = int(name.split("_")[1])
            count = max(1, n // 4) if in_flight == 1 else n
            send = Workload("send", count, in_flight=in_flight, warmup=warmup)
            chosen.append(Plan(name, send))
            if name in AUTOBATCH:
                auto = Workload("send", count, in_flight=in_flight, warmup=warmup, auto_batch=True)
                chosen.append(Plan(f"{name}_autobatch", auto, systems=(BASELINE,)))
        elif name == "batch_128":
            chosen.append(Plan(name, Workload("batch", 10 * n, in_flight=4, batch=128, warmup=warmup)))
        elif name == "consume":
            topic = "peer_backlog"
            load = Workload("batch", 10 * n + warmup, in_flight=4, batch=128)
            chosen.append(Plan("backlog", load, reported=False, topic=topic))
            chosen.append(Plan(name, Workload("consume", 10 * n, warmup=warmup), topic=topic))
        elif name.startswith("latency_"):
            rate = int(name.split("_")[1])
            count = max(1, n // 2) if rate <= 1000 else max(1, 3 * n // 2)
            latency = Workload("latency", count, rate=rate, warmup=max(1, rate // 2))
            chosen.append(Plan(name, latency, topic=f"peer_{name}"))
    return chosen


@dataclass(slots=True)
class Measured:
    """One driver run: its result and what the orchestrator measured around it."""

    result: DriverResult
    broker_cpu_s: float
    client_cpu_s: float
    messages: int
    """Messages the CPU is charged over: ``N``, or ``N + W`` when the driver marked nothing."""
    marked: bool
    wall_s: float = 0.0
    """The driver process's whole run (start-up to exit)."""

    def cpu_us(self, which: str) -> float:
        seconds = {"total": self.broker_cpu_s + self.client_cpu_s, "broker": self.broker_cpu_s}.get(
            which, self.client_cpu_s
        )
        return seconds / self.messages * 1e6


@dataclass(slots=True)
class Round:
    """One system's runs in one round."""

    system: str
    runs: dict[str, Measured] = field(default_factory=dict)
    rss_mb: float = 0.0
    private_mb: float = 0.0
    peak_rss_mb: float = 0.0
    seconds: float = 0.0


def process_tree_cpu_s(pid: int) -> float:
    """utime + stime of ``pid`` and its live descendants, in seconds."""
    parents: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is the state (field 3); ppid is field 4, utime 14, stime 15
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = (int(fields[11]) + int(fields[12])) / TICKS
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        total += cpu.get(current, 0.0)
        todo.extend(child for child, parent in parents.items() if parent == current)
    return total


def memory_mb(pid: int, key: str) -> float:
    """``VmRSS``, ``RssAnon`` or ``VmHWM`` of ``pid`` in MB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(f"{key}:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def run_driver(cluster: Cluster, plan: Plan, topic: str, group: str, logs: Path) -> Measured:
    """Run ``plan``'s driver to its end; CPU measured around its timed phase (see the module)."""
    argv = cluster.driver_command() + plan.workload.flags(cluster.namesrv, topic, group)
    stderr_path = logs / f"{plan.name}.stderr"
    with stderr_path.open("w") as stderr:
        before = process_tree_cpu_s(cluster.broker_pid)
        driver = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True
        )
        watchdog = threading.Timer(DRIVER_TIMEOUT_S, driver.kill)
        watchdog.start()
        marked_at: float | None = None
        result_line, result_at = "", before
        assert driver.stdout is not None
        try:
            for line in driver.stdout:
                if line.strip() == TIMED_MARK:
                    marked_at = process_tree_cpu_s(cluster.broker_pid)
                elif line.startswith("{"):
                    result_line, result_at = line, process_tree_cpu_s(cluster.broker_pid)
            # wait4 gives this child's own rusage: RUSAGE_CHILDREN deltas would also count any
            # other child reaped meanwhile.
            _, status, usage = os.wait4(driver.pid, 0)
            driver.returncode = os.waitstatus_to_exitcode(status)
        finally:
            watchdog.cancel()
            if driver.returncode is None:
                driver.kill()
                driver.wait()
    if driver.returncode != 0 or not result_line:
        tail = stderr_path.read_text(errors="replace")[-3000:]
        raise click.ClickException(
            f"{cluster.name} driver for {plan.name} exited with {driver.returncode}"
            f"{'' if result_line else ' and no result line'}: {' '.join(argv)}\n{tail}"
        )
    result = DriverResult.from_json(result_line)
    w = plan.workload
    if marked_at is not None and "cpu_s" in result.extra:
        return Measured(result, result_at - marked_at, result.extra["cpu_s"], w.messages, True)
    return Measured(result, result_at - before, usage.ru_utime + usage.ru_stime, w.messages + w.warmup, False)


def run_round(
    cluster: Cluster, system: str, chosen: list[Plan], logs: Path, label: str, say: Callable[[str], None]
) -> Round:
    """Every plan of ``system`` on a started ``cluster``, one driver at a time."""
    this = Round(system)
    started = time.perf_counter()
    topics = {plan.topic for plan in chosen if system in plan.systems}
    for topic in sorted(topics):
        cluster.create_topic(topic, QUEUES)
    for plan in chosen:
        if system not in plan.systems:
            continue
        topic = plan.topic
        group = f"peer_{plan.name}_{label}_{system}".replace(" ", "_").replace("/", "of")
        run_started = time.perf_counter()
        measured = run_driver(cluster, plan, topic, group, logs)
        measured.wall_s = time.perf_counter() - run_started
        this.runs[plan.name] = measured
        this.rss_mb = max(this.rss_mb, memory_mb(cluster.broker_pid, "VmRSS"))
        this.private_mb = max(this.private_mb, memory_mb(cluster.broker_pid, "RssAnon"))
        say(f"{label} {system:<8} {plan.name:<18} {_describe(measured)}")
    this.peak_rss_mb = memory_mb(cluster.broker_pid, "VmHWM")
    this.seconds = time.perf_counter() - started
    return this


def _describe(m: Measured) -> str:
    r = m.result
    parts = [f"{r.msg_per_s:>10,.0f} msg/s"]
    if r.p99_ms is not None:
        parts.append(f"p99 {r.p99_ms:,.1f} ms")
    if r.first_message_s is not None:
        parts.append(f"first {r.first_message_s:.2f} s")
    parts.append(f"cpu/msg broker {m.cpu_us('broker'):,.0f} client {m.cpu_us('client'):,.0f} us")
    if not m.marked:
        parts.append("(whole run)")
    if r.errors:
        parts.append(f"ERRORS {r.errors}")
    return ", ".join(parts) + f" [{m.wall_s:.1f} s]"


ClusterFactory = Callable[[str, Path], AbstractContextManager[Cluster]]


def default_cluster(heap_mb: int) -> ClusterFactory:
    """Start ``system``'s cluster under a directory (RocketMQ's needs its peer built first)."""

    def start(system: str, directory: Path) -> AbstractContextManager[Cluster]:
        if system == "orbitmq":
            from orbitmq.bench.peer_orbitmq import OrbitmqCluster

            return OrbitmqCluster(directory)
        from orbitmq.bench.peer_rocketmq import RocketMQCluster

        return RocketMQCluster(directory, heap_mb=heap_mb)

    return start


def build_rocketmq() -> None:
    """Build (or find cached) RocketMQ's name server, broker and Java driver."""
    try:
        from orbitmq.bench.peer_rocketmq import build_peer
    except ImportError as error:
        raise click.ClickException(f"the RocketMQ peer is not available here: {error}") from None
    build_peer()


def run(
    emit: Callable[[Figure], None],
    *,
    rounds: int,
    messages: int,
    only: tuple[str, ...] = REPORTED,
    systems: tuple[str, ...] = SYSTEMS,
    heap_mb: int = 1024,
    warmup: int = DEFAULT_WARMUP,
    work_dir: Path | None = None,
    say: Callable[[str], None] = lambda line: click.echo(line, err=True),
    clusters: ClusterFactory | None = None,
) -> None:
    """Alternating rounds of every system in ``systems``, then the figures (see the module)."""
    if BASELINE in systems:
        say("building the RocketMQ peer (cached after the first time)")
        build_rocketmq()
    start = clusters or default_cluster(heap_mb)
    chosen = plans(messages, only, warmup)
    results: dict[str, list[Round]] = {system: [] for system in systems}
    began = time.perf_counter()
    for index in range(rounds):
        order = systems if index % 2 == 0 else tuple(reversed(systems))
        for system in order:
            directory = Path(tempfile.mkdtemp(prefix=f"orbitmq-bench-peer-{system}-", dir=work_dir))
            try:
                label = f"round {index + 1}/{rounds}"
                started = time.perf_counter()
                with start(system, directory) as cluster:
                    say(f"{label} {system:<8} started in {time.perf_counter() - started:.1f} s")
                    results[system].append(run_round(cluster, system, chosen, directory, label, say))
                    stopping = time.perf_counter()
                say(f"{label} {system:<8} stopped in {time.perf_counter() - stopping:.1f} s")
            finally:
                shutil.rmtree(directory, ignore_errors=True)
    say(f"{rounds} round(s) in {time.perf_counter() - began:,.0f} s")
    for figure in figures(results, chosen, heap_mb):
        emit(figure)


@dataclass(frozen=True, slots=True)
class Metric:
    """A figure's name (``{name}`` is the workload's), unit, how it is read from a run, and its
    target."""

    name: str
    unit: str
    read: Callable[[Measured], float | None]
    target: str = ""


def _metrics(plan: Plan) -> Iterator[Metric]:
    kind = plan.workload.workload
    targets = {"send_8": "ratio >= 1.0", "send_32": "ratio >= 1.0", "batch_128": "ratio >= 0.8"}
    if kind == "latency":
        yield Metric(
            "{name}_p99_ms",
            "ms",
            lambda m: m.result.p99_ms,
            "<= baseline" if plan.name == "latency_1000" else "",
        )
        yield Metric("{name}_p50_ms", "ms", lambda m: m.result.p50_ms)
        yield Metric(
            "{name}_msg_per_s", "msg/s", lambda m: m.result.msg_per_s, f"= {plan.workload.rate} (offered)"
        )
    else:
        target = "ratio >= 1.0" if kind == "consume" else targets.get(plan.name, "")
        yield Metric("{name}", "msg/s", lambda m: m.result.msg_per_s, target)
        if kind == "consume":
            yield Metric("first_message_s", "s", lambda m: m.result.first_message_s, "<= baseline")
        else:
            yield Metric("{name}_p99_ms", "ms", lambda m: m.result.p99_ms)
    yield Metric("{name}_cpu_us_per_msg", "us", lambda m: m.cpu_us("total"), "ratio <= 1.5")
    yield Metric("{name}_broker_cpu_us_per_msg", "us", lambda m: m.cpu_us("broker"))
    yield Metric("{name}_client_cpu_us_per_msg", "us", lambda m: m.cpu_us("client"))


def _values(rounds: list[Round], name: str, read: Callable[[Measured], float | None]) -> list[float | None]:
    return [read(r.runs[name]) if name in r.runs else None for r in rounds]


def _figure(
    figure: str,
    unit: str,
    ours: list[float | None],
    theirs: list[float | None],
    baseline_name: str,
    target: str,
) -> Figure | None:
    mine = [v for v in ours if v is not None]
    if not mine:
        return None
    base = [v for v in theirs if v is not None]
    ratios = [o / t for o, t in zip(ours, theirs, strict=False) if o is not None and t]
    spread = ""
    if len(ratios) > 1:
        spread = (
            f"; per-round ratios {min(ratios):.2f}-{max(ratios):.2f}, median {statistics.median(ratios):.2f}"
        )
    return Figure(
        figure,
        statistics.median(mine),
        unit,
        statistics.median(base) if base else None,
        f"{baseline_name}, median of {len(base)} round(s){spread}" if base else "",
        target,
    )


def figures(results: dict[str, list[Round]], chosen: list[Plan], heap_mb: int) -> list[Figure]:
    """orbitmq's medians against RocketMQ's, workload by workload, then memory."""
    ours = results.get("orbitmq", [])
    theirs = results.get(BASELINE, [])
    default = "RocketMQ 5.3.3 default producer"
    out: list[Figure | None] = []
    for plan in chosen:
        if not plan.reported or "orbitmq" not in plan.systems:
            continue
        for metric in _metrics(plan):
            out.append(
                _figure(
                    metric.name.format(name=plan.name),
                    metric.unit,
                    _values(ours, plan.name, metric.read),
                    _values(theirs, plan.name, metric.read),
                    default if plan.workload.workload in ("send", "batch") else "RocketMQ 5.3.3",
                    metric.target,
                )
            )
        if plan.name in AUTOBATCH:
            auto = f"{plan.name}_autobatch"
            for suffix, unit, read in (
                ("", "msg/s", lambda m: m.result.msg_per_s),
                ("_p99_ms", "ms", lambda m: m.result.p99_ms),
                ("_cpu_us_per_msg", "us", lambda m: m.cpu_us("total")),
            ):
                out.append(
                    _figure(
                        f"{plan.name}_vs_autobatch{suffix}",
                        unit,
                        _values(ours, plan.name, read),
                        _values(theirs, auto, read),
                        "RocketMQ 5.3.3 producer with autoBatch",
                        "",
                    )
                )
    heap = f"RocketMQ 5.3.3 broker, -Xmx{heap_mb}m"
    memory = (
        ("broker_rss_mb", "rss_mb", "VmRSS after each run, the round's largest", "<= 150"),
        (
            "broker_private_mb",
            "private_mb",
            "RssAnon after each run, the round's largest: without the mapped store's pages",
            "",
        ),
        ("broker_peak_rss_mb", "peak_rss_mb", "VmHWM at the end of a round", ""),
    )
    for name, attribute, what, target in memory:
        ours_mb = [getattr(r, attribute) for r in ours]
        theirs_mb = [getattr(r, attribute) for r in theirs]
        out.append(_figure(name, "MB", ours_mb, theirs_mb, f"{heap} ({what})", target))
    return [f for f in out if f is not None]
