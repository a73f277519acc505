"""Cardinality budget (issue 15): the series each process of a real local cluster exposes with
``--topics`` topics x ``--queues`` queues x ``--groups`` consumer groups, and how fast every
dashboard panel's query answers on a real Prometheus at the largest size.

A name server, an ASYNC/SYNC master and its slave (``orbitmq.local.supervisor``, the processes
``orbitmq local up`` runs) and a sidecar are real child processes on free ports. The topics are
added in steps (``--sizes``); every new topic gets one message on each queue (SendMessage to
that queue), and every group pulls each queue (PullMessage carrying its committed offset),
commits the next offset (UpdateConsumerOffset) and holds the lock of every queue (LockBatch,
renewed with heartbeats), so every per-(topic, queue, group) family is populated: the worst
case of a cluster whose groups all consume orderly. The sidecar is a concurrent member of the
first group subscribed to every topic (restarted at each size with the new topic list).

After each step every process's ``/metrics`` is parsed (``prometheus_client.parser``) and its
samples counted per family. The broker master's series are fitted by least squares against
topics x queues x groups (slope, intercept, largest deviation: "grows linearly") and held to the
50 000 budget; the family that grows fastest is named when it is over.

At the largest size a real Prometheus (promkit: the test bed's build) scrapes every process.
Its TSDB is first backfilled with ``--history`` of the same series at the scrape interval
(``promtool tsdb create-blocks-from openmetrics``; gauges constant, counters growing to their
current value), so a range query over the dashboards' default last hour reads an hour of
samples per series as it would in production, not a few seconds of them. Once it has scraped
every target live at least three times, every query of every panel of every generated
dashboard (``charts/orbitmq/dashboards``, variables at "All", ``$__interval``/``$__rate_interval``
as Grafana derives them) runs as the range query a time-series panel sends, ``--repeats``
times each; each template variable's ``label_values`` runs as Grafana's label-values call.
Baseline, same Prometheus, same range and step: the trivial query ``up``.

Progress goes to stderr; figures and tables to stdout (``--json``: one JSON object a line per
figure, as ``orbitmq bench``, and the tables to stderr).

    .venv/bin/python benchmarks/cardinality_bench.py [--json] [--quick] [--sizes 10,25,50,100]
        [--queues 8] [--groups 10] [--history 1h] [--scrape-interval 15s] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TextIO

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "tests" / "integration" / "monitoring"), str(REPO / "operator")]

import grpc  # noqa: E402
from dashkit import dashboard_queries, variable_selectors  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from promkit import Prometheus, PrometheusError, fetch, promtool, run_prometheus  # noqa: E402

from orbitmq.bench.figures import Figure, emit  # noqa: E402
from orbitmq.client import Admin  # noqa: E402
from orbitmq.local.supervisor import Component, LocalCluster  # noqa: E402
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2  # noqa: E402
from orbitmq_operator.monitoring.queries import format_duration, parse_duration  # noqa: E402

BUDGET = 50_000
"""Series one broker may expose at the issue's size (100 topics x 8 queues x 10 groups)."""
LATENCY_TARGET_S = 1.0
"""Every dashboard query answers within this on Prometheus at that size."""
IN_FLIGHT = 64
"""Concurrent gRPC calls of the workload."""
RENEW_S = 20.0
"""Locks (60 s expiry) and client heartbeats (120 s) are renewed this often."""
COUNTER_SUFFIXES = ("_total", "_count", "_sum", "_bucket", "_created")


def note(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def topic_name(index: int) -> str:
    return f"CardTopic{index:03d}"


def group_name(index: int) -> str:
    return f"CardGroup{index:02d}"


def client_id(group: str) -> str:
    return f"card-{group}@127.0.0.1"


async def bounded(calls: Iterable[Callable[[], Awaitable[Any]]], limit: int = IN_FLIGHT) -> None:
    """Run the calls with at most ``limit`` in flight; the first failure propagates."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Callable[[], Awaitable[Any]]) -> None:
        async with gate:
            await call()

    await asyncio.gather(*(one(call) for call in calls))


# -- the workload --------------------------------------------------------------------------------


@dataclasses.dataclass
class Workload:
    """Topics, groups and their activity on the master, through the broker's gRPC API."""

    cluster: LocalCluster
    queues: int
    groups: list[str]
    broker_name: str = "broker-a"
    topics: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        self.admin = Admin(self.cluster.namesrv.address)
        self.channel = grpc.aio.insecure_channel(self.cluster.brokers[0].component.address)
        self.stub = broker_pb2_grpc.BrokerStub(self.channel)

    async def close(self) -> None:
        await self.channel.close()
        await self.admin.close()

    async def create_groups(self) -> None:
        for group in self.groups:
            await self.admin.create_group(group, orderly=True)

    async def add_topics(self, names: list[str]) -> None:
        """Create the topics, fill one message a queue, pull, commit and lock as every group."""
        for topic in names:
            await self.admin.create_topic(topic, read_queue_nums=self.queues, write_queue_nums=self.queues)
        self.topics += names
        await self.heartbeat()
        pairs = [(t, q) for t in names for q in range(self.queues)]
        await bounded(lambda t=t, q=q: self._send(t, q) for t, q in pairs)
        await bounded(lambda g=g, t=t, q=q: self._consume(g, t, q) for g in self.groups for t, q in pairs)
        await self.lock(names)

    async def _send(self, topic: str, queue: int) -> None:
        reply = await self.stub.SendMessage(
            broker_pb2.SendMessageRequest(
                producer_group="CardProducer",
                topic=topic,
                queue_id=queue,
                messages=[common_pb2.Message(topic=topic, body=b"x" * 64, properties={"TAGS": "card"})],
                born_timestamp_ms=int(time.time() * 1000),
                born_host="127.0.0.1:0",
            ),
            timeout=30,
        )
        if reply.queue_id != queue:
            raise RuntimeError(f"a send to {topic} queue {queue} landed on queue {reply.queue_id}")

    async def _consume(self, group: str, topic: str, queue: int) -> None:
        """What a consumer does with a queue: pull from its offset (committing it), then commit
        past what it got."""
        await self.stub.PullMessage(
            broker_pb2.PullMessageRequest(
                consumer_group=group,
                topic=topic,
                queue_id=queue,
                queue_offset=0,
                max_msg_nums=32,
                commit_offset=0,
                subscription=common_pb2.Subscription(topic=topic, expression="*"),
            ),
            timeout=30,
        )
        await self.stub.UpdateConsumerOffset(
            broker_pb2.UpdateConsumerOffsetRequest(
                consumer_group=group, topic=topic, queue_id=queue, offset=1
            ),
            timeout=30,
        )

    async def heartbeat(self) -> None:
        """One orderly push consumer per group, subscribed to every topic."""
        for group in self.groups:
            await self.stub.Heartbeat(
                broker_pb2.HeartbeatRequest(
                    client_id=client_id(group),
                    consumers=[
                        broker_pb2.ConsumerData(
                            group=group,
                            consume_type=common_pb2.CONSUME_PASSIVELY,
                            message_model=common_pb2.CLUSTERING,
                            consume_from_where=common_pb2.CONSUME_FROM_FIRST_OFFSET,
                            subscriptions=[
                                common_pb2.Subscription(topic=t, expression="*") for t in self.topics
                            ],
                            orderly=True,
                        )
                    ],
                ),
                timeout=30,
            )

    async def lock(self, topics: list[str] | None = None) -> None:
        """Every group's member locks (or renews) every queue of ``topics`` (default: all)."""

        async def lock_topic(group: str, topic: str) -> None:
            queues = [
                common_pb2.MessageQueue(topic=topic, broker_name=self.broker_name, queue_id=q)
                for q in range(self.queues)
            ]
            reply = await self.stub.LockBatch(
                broker_pb2.LockBatchRequest(consumer_group=group, client_id=client_id(group), queues=queues),
                timeout=30,
            )
            if len(reply.locked) != self.queues:
                raise RuntimeError(f"{group} locked {len(reply.locked)} of {self.queues} queues of {topic}")

        await bounded(lambda g=g, t=t: lock_topic(g, t) for g in self.groups for t in topics or self.topics)

    async def keep_alive(self) -> None:
        """Renew heartbeats and locks until cancelled (a Prometheus phase outlasts the expiry)."""
        while True:
            await asyncio.sleep(RENEW_S)
            await self.heartbeat()
            await self.lock()


# -- the processes -------------------------------------------------------------------------------


async def start_sidecar(cluster: LocalCluster, group: str, topics: list[str]) -> Component:
    args = ["sidecar", "--namesrv", cluster.namesrv.address, "--group", group, "--concurrent"]
    for topic in topics:
        args += ["--subscribe", topic]
    options = {
        "--consume-from": "first",
        "--listen": "127.0.0.1:0",
        "--metrics-listen": "127.0.0.1:0",
        "--instance-name": "card-sidecar",
        "--rebalance-ms": "1000",
        "--heartbeat-ms": "1000",
        "--persist-ms": "1000",
    }
    for option, value in options.items():
        args += [option, value]
    sidecar = Component("sidecar", args)
    await sidecar.start()
    return sidecar


def processes(cluster: LocalCluster, sidecar: Component | None) -> dict[str, Component]:
    """{role: component}: namesrv, master, slave (if any), sidecar (if any)."""
    found = {"namesrv": cluster.namesrv, "master": cluster.brokers[0].component}
    for index, member in enumerate(cluster.brokers[1:], 1):
        found["slave" if index == 1 else f"slave{index}"] = member.component
    if sidecar is not None:
        found["sidecar"] = sidecar
    return found


def host_port(url: str) -> str:
    return url.split("://", 1)[1].split("/", 1)[0]


def series_by_family(url: str) -> Counter[str]:
    """The samples (= series once scraped) of each family on one /metrics page."""
    return Counter(
        {
            family.name: len(family.samples)
            for family in text_string_to_metric_families(fetch(url, timeout=60))
        }
    )


SLAVE_COPIES = ("orbitmq_consumer_offset", "orbitmq_queue_max_offset")
"""Families a slave copies from its master (every ``replica_config_interval_ms``, 3 s)."""


async def settled_series(
    procs: dict[str, Component], quiet_s: float, within_s: float = 60
) -> dict[str, Counter[str]]:
    """Every process's series per family once the slave has copied the master's offsets and
    topics and no count moved for ``quiet_s`` (the sidecar rebalancing, committing)."""
    deadline = time.monotonic() + within_s
    previous: dict[str, Counter[str]] = {}
    while True:
        series = {p: await asyncio.to_thread(series_by_family, c.metrics_url) for p, c in procs.items()}
        copied = all(
            series[slave][family] == series["master"][family]
            for slave in series
            if slave.startswith("slave")
            for family in SLAVE_COPIES
        )
        if copied and series == previous:
            return series
        if time.monotonic() > deadline:
            note(
                f"series still moving after {within_s:.0f} s (slave copied: {copied}); "
                "counting them as they are"
            )
            return series
        previous = series
        await asyncio.sleep(quiet_s)


# -- cardinality ---------------------------------------------------------------------------------


@dataclasses.dataclass
class Size:
    topics: int
    triples: int
    """topics x queues x groups"""
    series: dict[str, Counter[str]]
    """{process: {family: series}}"""

    def total(self, process: str) -> int:
        return sum(self.series.get(process, Counter()).values())


def linear_fit(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """Least squares y = slope·x + intercept; (slope, intercept, largest |residual|)."""
    if len(set(xs)) < 2:
        return 0.0, ys[0] if ys else 0.0, 0.0
    slope, intercept = statistics.linear_regression(xs, ys)
    deviation = max(abs(y - (slope * x + intercept)) for x, y in zip(xs, ys, strict=True))
    return slope, intercept, deviation


def cardinality_tables(sizes: list[Size], idle: dict[str, int], out: TextIO) -> None:
    processes_ = sorted({p for s in sizes for p in s.series}, key=_process_order)
    header = f"{'topics':>6} {'txqxg':>7}  " + " ".join(f"{p:>9}" for p in processes_)
    print("\nSeries per process (idle = before any topic or group)", file=out)
    print(header, file=out)
    print(
        f"{'idle':>6} {'':>7}  "
        + " ".join(f"{idle[p]:>9,}" if p in idle else f"{'-':>9}" for p in processes_),
        file=out,
    )
    for size in sizes:
        cells = " ".join(f"{size.total(p):>9,}" for p in processes_)
        print(f"{size.topics:>6} {size.triples:>7,}  {cells}", file=out)
    last = sizes[-1]
    for process in processes_:
        families = sorted(last.series[process], key=lambda f: -last.series[process][f])
        print(
            f"\n{process}: series per family" + (" (and per txqxg triple added)" if len(sizes) > 1 else ""),
            file=out,
        )
        print(f"  {'family':44} " + " ".join(f"{s.topics:>7}t" for s in sizes) + "   per triple", file=out)
        for family in families:
            counts = [s.series[process].get(family, 0) for s in sizes]
            if not any(counts):
                continue
            growth = (
                (counts[-1] - counts[0]) / (sizes[-1].triples - sizes[0].triples) if len(sizes) > 1 else 0
            )
            cells = " ".join(f"{c:>8,}" for c in counts)
            print(f"  {family:44} {cells}   {growth:10.3f}", file=out)


def _process_order(name: str) -> tuple[int, str]:
    order = ["namesrv", "master", "slave", "sidecar"]
    return (order.index(name) if name in order else len(order), name)


def fastest_family(sizes: list[Size], process: str) -> tuple[str, int]:
    last = sizes[-1].series[process]
    first = sizes[0].series[process] if len(sizes) > 1 else Counter()
    family = max(last, key=lambda f: last[f] - first.get(f, 0))
    return family, last[family]


# -- Prometheus ----------------------------------------------------------------------------------


def backfill(
    path: Path, pages: dict[tuple[str, str], str], history_s: float, interval_s: float, end: float
) -> int:
    """Write ``history_s`` of every sample on the pages ({(job, instance): /metrics text}) as
    OpenMetrics at ``interval_s`` up to ``end``; the number of samples written."""
    steps = max(1, int(history_s // interval_s))
    stamps = [end - (steps - i) * interval_s for i in range(steps)]
    written = 0
    with path.open("w") as out:
        for (job, instance), text in pages.items():
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    labels = {**sample.labels, "job": job, "instance": instance}
                    label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
                    head = f"{sample.name}{{{label_text}}} "
                    grows = sample.name.endswith(COUNTER_SUFFIXES) and not sample.name.endswith("_created")
                    value = float(sample.value)
                    lines = [
                        f"{head}{value * (i + 1) / steps if grows else value} {stamp:.3f}\n"
                        for i, stamp in enumerate(stamps)
                    ]
                    out.writelines(lines)
                    written += len(lines)
        out.write("# EOF\n")
    return written


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@dataclasses.dataclass
class Timed:
    """One query's runs: wall time to the reply's last byte (Prometheus evaluating, encoding
    and sending; not this script's JSON decoding) and Prometheus's own ``execTotalTime``."""

    what: str
    promql: str
    seconds: list[float] = dataclasses.field(default_factory=list)
    server: list[float] = dataclasses.field(default_factory=list)
    series: int = 0
    points: int = 0
    reply_bytes: int = 0
    error: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.seconds) if self.seconds else float("nan")

    @property
    def best(self) -> float:
        """The least disturbed run (the VM is shared: other work inflates the median)."""
        return min(self.seconds) if self.seconds else float("nan")

    @property
    def server_median(self) -> float:
        return statistics.median(self.server) if self.server else float("nan")


def api_get(prom: Prometheus, path: str, params: dict[str, Any]) -> tuple[float, Any, int]:
    """(seconds to the reply's last byte, its ``data``, its size) of GET /api/v1/<path>."""
    url = f"{prom.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=300) as reply:
            body = reply.read()
    except urllib.error.HTTPError as exc:  # 400/422/503 carry a JSON error body
        body = exc.read()
    elapsed = time.perf_counter() - started
    try:
        answer = json.loads(body)
    except ValueError:
        raise PrometheusError(f"GET {url}: not JSON: {body[:200]!r}") from None
    if answer.get("status") != "success":
        raise PrometheusError(f"{answer.get('errorType')}: {answer.get('error')}")
    return elapsed, answer["data"], len(body)


def run_timed(timed: Timed, call: Callable[[], tuple[float, Any, int]], repeats: int) -> Timed:
    try:
        for _ in range(repeats):
            elapsed, data, size = call()
            timed.seconds.append(elapsed)
            timed.reply_bytes = size
            if isinstance(data, dict) and data.get("resultType") in ("scalar", "string"):
                timed.series = timed.points = 1
            elif isinstance(data, dict) and "result" in data:
                timed.series = len(data["result"])
                timed.points = sum(len(s["values"]) if "values" in s else 1 for s in data["result"])
                timed.server.append(
                    float(data.get("stats", {}).get("timings", {}).get("execTotalTime", "nan"))
                )
            else:
                timed.series = len(data)
    except PrometheusError as exc:
        timed.error = str(exc)
    return timed


def run_queries(
    prom: Prometheus,
    scrape: str,
    step: str,
    range_s: float,
    repeats: int,
    selected: dict[str, list[str]] | None = None,
) -> tuple[Timed, list[Timed], list[Timed]]:
    """(the ``up`` baseline, every panel query, every variable query), timed as range queries
    over the last ``range_s`` at ``step``; variables at "All" but those ``selected``."""
    end = time.time()
    start = end - range_s
    step_s = parse_duration(step)

    def ranged(promql: str) -> Callable[[], tuple[float, Any, int]]:
        params = {"query": promql, "start": start, "end": end, "step": step_s, "stats": "all"}
        return lambda: api_get(prom, "query_range", params)

    def instant(promql: str) -> Callable[[], tuple[float, Any, int]]:
        params = {"query": promql, "time": end, "stats": "all"}
        return lambda: api_get(prom, "query", params)

    ranged("up")()  # warm the HTTP path
    baseline = run_timed(Timed("up", "up"), ranged("up"), max(repeats, 10))
    queries = dashboard_queries(
        scrape_interval=scrape, interval=step, range_=format_duration(range_s), selected=selected
    )
    panels = [
        run_timed(
            Timed(f"{q.dashboard} {q.title}" + (" (instant)" if q.instant else ""), q.promql),
            (instant if q.instant else ranged)(q.promql),
            repeats,
        )
        for q in queries
    ]
    variables: list[Timed] = []
    if selected:
        return baseline, panels, variables
    for dashboard, variable, selector, label in variable_selectors(scrape_interval=scrape):
        params = {"match[]": selector, "start": start, "end": end}
        timed = Timed(f"{dashboard} ${variable}", f"label_values({selector}, {label})")
        variables.append(
            run_timed(
                timed,
                lambda label=label, params=params: api_get(prom, f"label/{label}/values", params),
                repeats,
            )
        )
    return baseline, panels, variables


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (p99 of fewer than 100 values is their maximum)."""
    ordered = sorted(values)
    rank = max(1, min(len(ordered), -(-int(fraction * len(ordered) * 1000) // 1000)))
    return ordered[rank - 1]


@dataclasses.dataclass
class QueryRun:
    """Every dashboard query run once per repeat with the variables in one state."""

    label: str
    baseline: Timed
    panels: list[Timed]
    variables: list[Timed]

    @property
    def failed(self) -> list[Timed]:
        return [t for t in self.panels + self.variables if t.error]


def latency_report(run: QueryRun, out: TextIO) -> None:
    ok = [t for t in run.panels if not t.error]
    print(
        f"\nDashboard queries, {run.label}: {len(run.panels)} panel queries ({len(run.panels) - len(ok)} "
        f"failed), {len(run.variables)} variable queries; wall time to the reply's last byte, "
        f"Prometheus's execTotalTime; baseline `up`: {run.baseline.median * 1000:.1f} ms "
        f"({run.baseline.series} series)",
        file=out,
    )
    walls = [t.median * 1000 for t in ok]
    servers = [t.server_median * 1000 for t in ok if t.server]
    if walls:
        print(
            f"  wall median {statistics.median(walls):.1f} ms, p99 {percentile(walls, 0.99):.1f} ms, "
            f"max {max(walls):.1f} ms; server median {statistics.median(servers):.1f} ms, "
            f"max {max(servers):.1f} ms; {sum(1 for w in walls if w > LATENCY_TARGET_S * 1000)} over "
            f"{LATENCY_TARGET_S * 1000:.0f} ms",
            file=out,
        )
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"  best of the runs: max {max(t.best for t in ok) * 1000:.1f} ms; load average {load} (2 cores)",
        file=out,
    )
    columns = " ".join(f"{c:>9}" for c in ("wall", "best", "server", "series", "points", "MB"))
    print(f"  {'slowest 5 (by median)':58} {columns}", file=out)
    for timed in sorted(ok, key=lambda t: -t.median)[:5]:
        print(
            f"  {timed.what[:58]:58} {timed.median * 1000:7.0f}ms {timed.best * 1000:7.0f}ms "
            f"{timed.server_median * 1000:7.0f}ms "
            f"{timed.series:>9,} {timed.points:>9,} {timed.reply_bytes / 1e6:9.1f}",
            file=out,
        )
        print(f"      {timed.promql[:150]}", file=out)
    for timed in sorted(run.variables, key=lambda t: -t.median)[:3]:
        print(
            f"  {timed.what[:58]:58} {timed.median * 1000:7.1f}ms (variable, {timed.series} values)", file=out
        )
    for timed in run.failed:
        print(f"  FAILED {timed.what}: {timed.promql}: {timed.error}", file=out)


async def prometheus_phase(
    workdir: Path, procs: dict[str, Component], selected: dict[str, list[str]], args: argparse.Namespace
) -> tuple[list[QueryRun], int]:
    """Backfill, start Prometheus, let it scrape, run every query at "All" and with
    ``selected`` variables; the runs and the samples backfilled."""
    jobs = {"namesrv": "namesrv", "master": "broker", "slave": "broker", "sidecar": "sidecar"}
    targets: dict[str, list[str]] = {}
    pages: dict[tuple[str, str], str] = {}
    for role, component in procs.items():
        job = jobs.get(role.rstrip("0123456789"), role)
        address = host_port(component.metrics_url)
        targets.setdefault(job, []).append(address)
        pages[(job, address)] = await asyncio.to_thread(fetch, component.metrics_url, 60)
    promdir = workdir / "prometheus"
    samples = 0
    history_s = parse_duration(args.history) if args.history not in ("", "0") else 0
    if history_s:
        openmetrics = workdir / "history.om"
        interval_s = parse_duration(args.scrape_interval)
        started = time.monotonic()
        samples = await asyncio.to_thread(backfill, openmetrics, pages, history_s, interval_s, time.time())
        note(f"backfilling {samples:,} samples ({openmetrics.stat().st_size / 1e6:,.0f} MB of OpenMetrics)")
        blocks = ("tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(promdir / "data"))
        await asyncio.to_thread(promtool, *blocks, timeout=3600)
        openmetrics.unlink()
        note(f"backfilled {args.history} in {time.monotonic() - started:.0f} s")
    running = run_prometheus(targets, promdir, scrape_interval=args.scrape_interval)
    prom = await asyncio.to_thread(running.__enter__)
    try:
        # Three live scrapes of every target (its first, then two more).
        scrape_s = parse_duration(args.scrape_interval)
        await asyncio.to_thread(prom.wait_for, "min(count_over_time(up[1h])) >= 3", 5 * scrape_s + 30)
        note(f"prometheus has scraped every target 3 times; {len(pages)} targets; running the queries")
        range_s = parse_duration(args.range)
        runs = []
        for label, picked in (("variables at All", None), (_selection_label(selected), selected)):
            baseline, panels, variables = await asyncio.to_thread(
                run_queries, prom, args.scrape_interval, args.step, range_s, args.repeats, picked
            )
            runs.append(QueryRun(label, baseline, panels, variables))
    finally:
        await asyncio.to_thread(running.__exit__, None, None, None)
    return runs, samples


def _selection_label(selected: dict[str, list[str]]) -> str:
    return ", ".join(f"${name} = {' | '.join(values)}" for name, values in selected.items())


# -- main ----------------------------------------------------------------------------------------


async def run(args: argparse.Namespace, workdir: Path, out: Callable[[Figure], None], tables: TextIO) -> int:
    cluster = LocalCluster(
        workdir / "cluster",
        namesrv_port=0,
        broker_port=0,
        namesrv_metrics_port=0,
        broker_metrics_port=0,
        slaves=0 if args.no_slave else 1,
    )
    sidecar: Component | None = None
    workload: Workload | None = None
    keep_alive: asyncio.Task[None] | None = None
    try:
        await cluster.start()
        note(f"cluster up: {', '.join(f'{c.name} {c.address}' for c in cluster.components)}")
        await asyncio.sleep(1)
        idle = {
            p: sum((await asyncio.to_thread(series_by_family, c.metrics_url)).values())
            for p, c in processes(cluster, None).items()
        }
        groups = [group_name(g) for g in range(args.groups)]
        workload = Workload(cluster, args.queues, groups)
        await workload.create_groups()
        sizes: list[Size] = []
        for topics in args.sizes:
            started = time.monotonic()
            await workload.add_topics([topic_name(i) for i in range(len(workload.topics), topics)])
            if not args.no_sidecar:
                if sidecar is not None:
                    await sidecar.stop()
                sidecar = await start_sidecar(cluster, groups[0], workload.topics)
            await workload.lock()  # renewed: nothing expired while the step ran
            procs = processes(cluster, sidecar)
            series = await settled_series(procs, args.settle)
            size = Size(topics, topics * args.queues * args.groups, series)
            sizes.append(size)
            note(
                f"{topics} topics: "
                + ", ".join(f"{p} {size.total(p):,}" for p in procs)
                + f" series ({time.monotonic() - started:.0f} s)"
            )
        cardinality_tables(sizes, idle, tables)
        figures_for_sizes(sizes, idle, args, out, tables)

        if args.no_prometheus:
            return 0
        keep_alive = asyncio.ensure_future(workload.keep_alive())
        selected = {"topic": [workload.topics[0]], "group": [groups[-1]]}
        runs, samples = await prometheus_phase(workdir, processes(cluster, sidecar), selected, args)
        print(
            f"\nPrometheus: {sizes[-1].topics} topics, history {args.history or 'none'} "
            f"({samples:,} samples backfilled), scrape {args.scrape_interval}, range {args.range}, "
            f"step {args.step}, {args.repeats} run(s) of each query (median kept)",
            file=tables,
        )
        for query_run in runs:
            latency_report(query_run, tables)
        figures_for_latency(runs, out)
        return 1 if any(r.failed for r in runs) else 0
    finally:
        if keep_alive is not None:
            keep_alive.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await keep_alive
        if workload is not None:
            await workload.close()
        if sidecar is not None:
            await sidecar.stop()
        await cluster.stop()


def figures_for_sizes(
    sizes: list[Size],
    idle: dict[str, int],
    args: argparse.Namespace,
    out: Callable[[Figure], None],
    tables: TextIO,
) -> None:
    for size in sizes:
        for process in sorted(size.series, key=_process_order):
            broker = process in ("master", "slave")
            out(
                Figure(
                    f"series_{process}_{size.topics}_topics",
                    size.total(process),
                    "series",
                    idle.get(process),
                    "same process before any topic or group",
                    f"≤ {BUDGET:,}" if broker else "",
                )
            )
    xs = [float(s.triples) for s in sizes]
    ys = [float(s.total("master")) for s in sizes]
    slope, intercept, deviation = linear_fit(xs, ys)
    out(Figure("broker_series_per_triple", slope, "series per (topic, queue, group)", None, "", "linear"))
    out(Figure("broker_series_intercept", intercept, "series", idle.get("master"), "idle master"))
    out(Figure("broker_series_fit_max_dev", deviation, "series", ys[-1], "series at the largest size"))
    at_100 = 100 * args.queues * args.groups
    projected = slope * at_100 + intercept
    print(
        f"\nBroker master series ~ {slope:.3f} x (topics x queues x groups) + {intercept:,.0f}; "
        f"largest deviation from the fit {deviation:,.1f} series ({100 * deviation / ys[-1]:.2f} % of "
        f"{ys[-1]:,.0f}); at 100 x {args.queues} x {args.groups}: {projected:,.0f} (budget {BUDGET:,})",
        file=tables,
    )
    for process in ("master", "slave"):
        if process in sizes[-1].series and sizes[-1].total(process) > BUDGET:
            family, count = fastest_family(sizes, process)
            print(
                f"OVER BUDGET: {process} exposes {sizes[-1].total(process):,} series; "
                f"the fastest-growing family is {family} ({count:,})",
                file=tables,
            )


def figures_for_latency(runs: list[QueryRun], out: Callable[[Figure], None]) -> None:
    """Wall times of the run at "All" (and its server time), then of the drill-down."""
    target = f"< {LATENCY_TARGET_S * 1000:.0f} ms"
    for run, prefix in zip(runs, ("dashboard_query", "drilldown_query"), strict=False):
        ok = [t for t in run.panels if t.seconds and not t.error]
        walls = [t.median * 1000 for t in ok]
        base, base_name = run.baseline.median * 1000, "`up`, same range and step"
        out(Figure(f"{prefix}_p50_ms", statistics.median(walls), "ms", base, base_name))
        out(Figure(f"{prefix}_p99_ms", percentile(walls, 0.99), "ms", base, base_name, target))
        out(Figure(f"{prefix}_max_ms", max(walls), "ms", base, base_name, target))
        best = max(t.best for t in ok) * 1000
        out(Figure(f"{prefix}_max_best_ms", best, "ms", run.baseline.best * 1000, "`up`, best run", target))
        server = [t.server_median * 1000 for t in ok if t.server]
        out(Figure(f"{prefix}_max_server_ms", max(server), "ms", run.baseline.server_median * 1000, "`up`"))
        over = sum(1 for w in walls if w > LATENCY_TARGET_S * 1000)
        out(Figure(f"{prefix}_over_target", over, "queries", len(run.panels), "panel queries run", "0"))
        out(Figure(f"{prefix}_errors", len(run.failed), "queries", None, "", "0"))
        vmedians = [t.median * 1000 for t in run.variables if t.seconds]
        if vmedians:
            out(Figure("variable_query_max_ms", max(vmedians), "ms", base, base_name, target))


def sizes_arg(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--sizes {text!r}: comma-separated topic counts, e.g. 10,25,50,100"
        ) from None
    if not sizes or any(s < 1 for s in sizes) or sizes != sorted(set(sizes)):
        raise argparse.ArgumentTypeError(f"--sizes {text!r}: topic counts must be ≥ 1 and increasing")
    return sizes


def duration_arg(text: str) -> str:
    if text in ("", "0"):
        return text
    try:
        parse_duration(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 15s, 1m or 1h") from None
    return text


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be a whole number ≥ 1")
    return int(text)


QUICK = {
    "sizes": [1, 2, 3],
    "groups": 2,
    "history": "2m",
    "scrape_interval": "1s",
    "step": "1s",
    "repeats": 1,
    "settle": 1.0,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per figure on stdout")
    parser.add_argument("--sizes", type=sizes_arg, default=[10, 25, 50, 100], help="topic counts, increasing")
    parser.add_argument("--queues", type=positive, default=8, help="queues per topic")
    parser.add_argument("--groups", type=positive, default=10, help="consumer groups")
    parser.add_argument("--history", type=duration_arg, default="1h", help="backfilled history ('0': none)")
    parser.add_argument(
        "--scrape-interval", type=duration_arg, default="15s", help="the ServiceMonitor's 15s"
    )
    parser.add_argument(
        "--range", type=duration_arg, default="1h", help="dashboard time range (default now-1h)"
    )
    parser.add_argument(
        "--step",
        type=duration_arg,
        default="15s",
        help="$__interval: Grafana's for 1 h on a ~1000 px panel, at least the scrape interval",
    )
    parser.add_argument("--repeats", type=positive, default=3, help="runs of each query (median kept)")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds before counting series")
    parser.add_argument("--no-slave", action="store_true", help="a master alone")
    parser.add_argument("--no-sidecar", action="store_true", help="no sidecar process")
    parser.add_argument("--no-prometheus", action="store_true", help="series counts only")
    parser.add_argument(
        "--quick", action="store_true", help="smoke: " + ", ".join(f"{k}={v}" for k, v in QUICK.items())
    )
    args = parser.parse_args()
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    tables = sys.stderr if args.json else sys.stdout

    def out(figure: Figure) -> None:
        emit(
            figure, args.json, lambda line: print(line, file=sys.stdout if args.json else tables, flush=True)
        )

    workdir = Path(tempfile.mkdtemp(prefix="omq-card-", dir=os.environ.get("TMPDIR", "/tmp")))
    try:
        return asyncio.run(run(args, workdir, out, tables))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
