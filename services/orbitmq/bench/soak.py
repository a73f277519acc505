"""``orbitmq bench soak``: clients that come and go, then hours of steady traffic; what grows.

A name server, a broker, the proxy and the sidecar run as child processes with their metrics
ports on. The run (:func:`run`):

1. **Churn** — ``churn`` short-lived clients come and go (:mod:`orbitmq.bench.soak_churn`),
   one in ten without a word, in two halves, while the soak's clients are connected and
   idle (their traffic would leave retry topics and store files that could not be told from
   the churn's). Once the first half's silent ones expired, the
   level of every table, of the open files and tasks and of the series on each
   metrics page is taken; after the second half and the expiry each must be back at it (the
   first half makes what appears once per group or topic appear: a label set, a retry topic,
   a consume-queue file), and the tables of clients (``PER_CLIENT_TABLES``) back at their
   level from before any churn; this process's own files and tasks too (its
   ``Producer`` clients come and go as well).
2. **Capacity** — every path (:mod:`orbitmq.bench.soak_paths`: the Python client, the proxy's
   ``apache.rocketmq.v2``, the sidecar) sends as fast as ``CAPACITY_IN_FLIGHT`` sends in flight
   allow, all at once, for ``capacity_s``, while their consumers consume: each path's
   acknowledged sends per second is its capacity in this mix.
3. **Soak** — every path sends at half its capacity for ``duration_s`` and consumes, while
   every server's RSS, open files, threads, event-loop tasks and per-client tables are sampled
   every ``sample_s`` (:mod:`orbitmq.bench.soak_watch`). Reported: growth of each series from
   just after the warm-up (5 minutes, or the first 10 % of a shorter run) to the end, the
   end-to-end p99 (send to the consumer's hands) of every minute and its drift; tasks and open
   files also idle, before the traffic and after the drain (``IDLE_JUDGED``).
4. **Drain** — senders stop; every acknowledged message must be consumed (loss: those that
   were not, by path).

The broker's client and lock expiry are shortened (``expiry_ms``) and the soak's own clients
heartbeat more often than it, so the churn's silent leavers are swept within the run. The
broker keeps ``RETENTION_MS`` of log in 64 MiB segments unless the environment says otherwise
(``ORBITMQ_BROKER_SEGMENT_BYTES``, ``ORBITMQ_BROKER_FILE_RESERVED_TIME_MS``), so the store
stays small and retention runs all along; its disk ratios are the environment's too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orbitmq.bench.broker import Process, cli
from orbitmq.bench.soak_churn import Churn, kinds_of
from orbitmq.bench.soak_paths import ClientPath, ProxyPath, SidecarPath, SoakPath
from orbitmq.bench.soak_watch import Samples, Server, growth, proc_values, sample, tables_back
from orbitmq.client.admin import Admin

BROKER_NAME = "soak-broker"
TOPICS = {"client": "SoakClient", "proxy": "SoakProxy", "sidecar": "SoakSidecar"}
CHURN_TOPIC = "SoakChurn"
QUEUES = 8
CAPACITY_IN_FLIGHT = 32
MAX_OUTSTANDING = 256
"""Paced sends of one path in flight at most; past it the sender waits (and its lag shows)."""
IDLE_JUDGED = ("/asyncio_tasks", "/open_sockets")
"""Compared idle, before the traffic and after its drain (smallest value over 10 s against the
largest over 5 s): under load tasks follow the requests in flight (the proxy's went from 25 to
430 and back within a minute), so their growth under load is reported, not judged; sockets,
not all files, as the broker's store files grow with its data until retention bounds them."""
PER_CLIENT_TABLES = tuple(
    f"table:{name}"
    for name in (
        "broker_clients",
        "broker_client_sessions",
        "broker_queue_locks",
        "proxy_clients",
        "proxy_telemetry_streams",
        "proxy_held_messages",
        "sidecar_app_streams",
    )
)
"""Tables of clients themselves: back at their level from before any churn, not only at the
level between the halves."""
CHURN_RESOURCES = ("open_fds", "open_sockets", "asyncio_tasks")
"""Judged after the churn beside the tables: a client gone must leave no socket or task (threads
are not: thread pools grow lazily to their bound, a thread more is not a client's)."""
HEARTBEAT_MS = 2_000
RETENTION_MS = 120_000
WARMUP_S = 300.0
DRAIN_STALL_S = 90.0
"""A drain ends when nothing was consumed this long: longer than the proxy path's invisible
time, after which a receive whose answer was lost (its deadline passed under load) is
delivered again."""

Echo = Callable[[str], object]


class Marks:
    """A set of sequence numbers (1, 2, ...) kept as a byte each: an hour at thousands of
    messages a second is tens of MB, not the GB a set of ints would take."""

    def __init__(self) -> None:
        self._marks = bytearray()
        self.count = 0

    def add(self, n: int) -> bool:
        """Mark ``n``; False when it was already marked."""
        marks = self._marks
        if n >= len(marks):
            marks.extend(bytes(max(n + 1 - len(marks), len(marks))))
        if marks[n]:
            return False
        marks[n] = 1
        self.count += 1
        return True

    def missing_from(self, other: Marks) -> int:
        """How many of these are not in ``other`` (one byte a number: a byte-wise and-not of
        the two as big integers counts them at C speed)."""
        mine = int.from_bytes(self._marks, "little")
        theirs = int.from_bytes(other._marks, "little")
        return (mine & ~theirs).bit_count()


@dataclass
class PathTally:
    """One path's sends and deliveries."""

    acked: Marks = field(default_factory=Marks)
    failed: int = 0
    consumed: Marks = field(default_factory=Marks)
    deliveries: int = 0
    minutes: dict[int, array[float]] = field(default_factory=dict)
    """Milliseconds from send to consumer, by the soak's minute the message was sent in."""
    send_ms: array[float] = field(default_factory=lambda: array("f"))

    def consumed_one(self, seq: int, sent_us: int, soak_started_us: int) -> None:
        self.deliveries += 1
        self.consumed.add(seq)
        if soak_started_us and sent_us >= soak_started_us:
            minute = (sent_us - soak_started_us) // 60_000_000
            latencies = self.minutes.get(minute)
            if latencies is None:
                latencies = self.minutes[minute] = array("f")
            latencies.append((time.time_ns() // 1000 - sent_us) / 1000)


def warmup_s(duration_s: float) -> float:
    """The issue's 5 minutes for an hour-long run; the first 10 % of a shorter one."""
    return WARMUP_S if duration_s >= 10 * WARMUP_S else duration_s / 10


def _p99(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else float("nan")


def p99_per_minute(minutes: dict[int, array[float]]) -> list[float]:
    """p99 of the latencies of the messages sent in each minute of the soak, in order (the last,
    partial minute left out when there are whole ones)."""
    keys = sorted(minutes)
    if len(keys) > 1:
        keys = keys[:-1]
    return [round(_p99(minutes[k]), 2) for k in keys]


class _Servers:
    """The cluster's four processes, each with its metrics port."""

    def __init__(self, data: Path, expiry_ms: int) -> None:
        env = {
            # an hour at thousands of 1 KiB messages a second is GBs: the store keeps two
            # minutes (everything is consumed within seconds) in 64 MiB segments, so retention
            # deletes segments and consume-queue files all along, as a long-lived broker's does
            "ORBITMQ_BROKER_SEGMENT_BYTES": str(64 * 1024 * 1024),
            "ORBITMQ_BROKER_FILE_RESERVED_TIME_MS": str(RETENTION_MS),
            **os.environ,
            "ORBITMQ_BROKER_CHANNEL_EXPIRY_MS": str(expiry_ms),
            "ORBITMQ_BROKER_SCAN_INTERVAL_MS": "1000",
            "ORBITMQ_BROKER_LOCK_EXPIRY_MS": str(expiry_ms),
            "ORBITMQ_SIDECAR_HEARTBEAT_MS": str(HEARTBEAT_MS),
            "ORBITMQ_PROXY_HEARTBEAT_MS": str(HEARTBEAT_MS),
        }
        metrics = ("--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
        self.started: list[Process] = []
        self.sidecar: Process | None = None
        self._env = env
        try:
            self.namesrv = self._start(cli("namesrv", *metrics), env)
            broker = (
                "--data-dir",
                str(data),
                "--namesrv",
                self.namesrv.address,
                "--broker-name",
                BROKER_NAME,
            )
            self.broker = self._start(cli("broker", *metrics, *broker), env)
            self.proxy = self._start(cli("proxy", *metrics, "--namesrv", self.namesrv.address), env)
        except BaseException:
            self.stop()
            raise

    def _start(self, args: list[str], env: dict[str, str]) -> Process:
        process = Process(args, env)
        self.started.append(process)
        return process

    def start_sidecar(self) -> Process:
        """After the topics exist: the sidecar subscribes at start."""
        self.sidecar = self._start(
            cli(
                "sidecar",
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
                "--namesrv",
                self.namesrv.address,
                "--group",
                "soak-sidecar",
                "--subscribe",
                TOPICS["sidecar"],
                "--max-in-flight",
                "256",
            ),
            self._env,
        )
        return self.sidecar

    def watched(self) -> list[Server]:
        named = [("namesrv", self.namesrv), ("broker", self.broker), ("proxy", self.proxy)]
        if self.sidecar is not None:
            named.append(("sidecar", self.sidecar))
        return [Server(name, p.popen.pid, p.metrics_url) for name, p in named]

    def stop(self) -> None:
        for process in reversed(self.started):
            process.stop()


class Soak:
    def __init__(self, servers: _Servers, echo: Echo, sample_s: float) -> None:
        self.servers = servers
        self.echo = echo
        self.sample_s = sample_s
        self.tallies: dict[str, PathTally] = {}
        self.paths: list[SoakPath] = []
        self.samples = Samples()
        self.started = time.monotonic()
        self.soak_started_us = 0
        self._seq: dict[str, int] = {}

    def _consumed(self, name: str) -> Callable[[int, int], None]:
        tally = self.tallies[name]
        return lambda seq, sent_us: tally.consumed_one(seq, sent_us, self.soak_started_us)

    async def _send(self, path: SoakPath, record_ms: bool) -> None:
        tally = self.tallies[path.name]
        seq = self._seq[path.name] = self._seq.get(path.name, 0) + 1
        before = time.perf_counter()
        try:
            await path.send(seq)
        except Exception:  # any failed send is counted, never fatal to the soak
            tally.failed += 1
            return
        tally.acked.add(seq)
        if record_ms:
            tally.send_ms.append((time.perf_counter() - before) * 1000)

    async def capacity(self, paths: list[SoakPath], seconds: float) -> dict[str, float]:
        """Acknowledged sends per second of each path, all sending flat out together."""
        deadline = time.monotonic() + seconds
        before = {path.name: self.tallies[path.name].acked.count for path in paths}

        async def loop(path: SoakPath) -> None:
            while time.monotonic() < deadline:
                await self._send(path, record_ms=False)

        await asyncio.gather(*(loop(path) for path in paths for _ in range(CAPACITY_IN_FLIGHT)))
        return {p.name: (self.tallies[p.name].acked.count - before[p.name]) / seconds for p in paths}

    async def paced(self, path: SoakPath, rate: float, seconds: float) -> None:
        """Sends at ``rate`` a second for ``seconds``, at most ``MAX_OUTSTANDING`` in flight (a
        path that falls behind sends fewer: the result's ``sent_per_s`` says how many)."""
        slots = asyncio.Semaphore(MAX_OUTSTANDING)
        pending: set[asyncio.Task[None]] = set()
        started = time.perf_counter()
        total = int(rate * seconds)

        async def one() -> None:
            try:
                await self._send(path, record_ms=True)
            finally:
                slots.release()

        for i in range(total):
            delay = started + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            elif time.perf_counter() - started >= seconds:  # behind: the run ends on time
                break
            await slots.acquire()
            task = asyncio.create_task(one())
            pending.add(task)
            task.add_done_callback(pending.discard)
        if pending:
            await asyncio.gather(*pending)

    async def sampler(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await asyncio.to_thread(sample, self.servers.watched(), self.samples, self.started)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.sample_s)

    async def drain(self, limit_s: float) -> None:
        """Until every acknowledged send was consumed, or nothing moved for DRAIN_STALL_S."""
        last, moved = -1, time.monotonic()
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            missing = sum(t.acked.missing_from(t.consumed) for t in self.tallies.values())
            if missing == 0:
                return
            if missing != last:
                last, moved = missing, time.monotonic()
            elif time.monotonic() - moved > DRAIN_STALL_S:
                return
            await asyncio.sleep(0.5)

    async def tables_now(self) -> dict[str, float]:
        """Every server's tables, metric series count and :data:`CHURN_RESOURCES`, as
        ``server/name``."""
        probe = Samples()
        await asyncio.to_thread(sample, self.servers.watched(), probe, self.started)
        found = {
            f"{server}/{name}": points[-1][1]
            for server, series in probe.series.items()
            for name, points in series.items()
            if name.startswith("table:") or name in ("series", *CHURN_RESOURCES)
        }
        driver = proc_values(os.getpid())  # the churn's Python clients ran here
        found["driver/open_fds"] = driver.get("open_fds", 0)
        found["driver/open_sockets"] = driver.get("open_sockets", 0)
        found["driver/asyncio_tasks"] = len(asyncio.all_tasks())
        return found

    async def settle(self, seconds: float, every_s: float = 1.0) -> dict[str, float]:
        """The largest value of each table over ``seconds`` of samples."""
        return await self._extreme(max, seconds, every_s)

    async def lowest(self, seconds: float, every_s: float = 1.0) -> dict[str, float]:
        """The smallest value of each table and resource over ``seconds`` of samples."""
        return await self._extreme(min, seconds, every_s)

    async def _extreme(
        self, pick: Callable[[float, float], float], seconds: float, every_s: float
    ) -> dict[str, float]:
        """``pick`` (max or min) of each table's samples, one every ``every_s`` for ``seconds``."""
        kept: dict[str, float] = {}
        deadline = time.monotonic() + seconds
        while True:
            for name, value in (await self.tables_now()).items():
                kept[name] = pick(kept.get(name, value), value)
            if time.monotonic() >= deadline:
                return kept
            await asyncio.sleep(every_s)

    async def back_to(self, before: dict[str, float], limit_s: float) -> tuple[dict[str, Any], float]:
        """Polls until no table is above ``before`` (smallest value seen after counts); returns
        what stayed above at the end and the seconds it took."""
        lowest: dict[str, float] = {}
        started = time.monotonic()
        while True:
            for name, value in (await self.tables_now()).items():
                lowest[name] = min(lowest.get(name, value), value)
            above = tables_back(before, lowest)
            if not above or time.monotonic() - started > limit_s:
                return above, time.monotonic() - started
            await asyncio.sleep(1.0)


async def _measure(
    servers: _Servers,
    echo: Echo,
    *,
    duration_s: float,
    capacity_s: float,
    sample_s: float,
    churn: int,
    expiry_ms: int,
) -> dict[str, Any]:
    async with Admin(servers.namesrv.address) as admin:
        for topic in [*TOPICS.values(), CHURN_TOPIC]:
            await admin.create_topic(topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
    await asyncio.sleep(1.0)
    sidecar = await asyncio.to_thread(servers.start_sidecar)
    soak = Soak(servers, echo, sample_s)
    paths: list[SoakPath] = [
        ClientPath(servers.namesrv.address, TOPICS["client"], heartbeat_ms=HEARTBEAT_MS),
        ProxyPath(servers.proxy.address, TOPICS["proxy"], BROKER_NAME),
        SidecarPath(sidecar.address, TOPICS["sidecar"]),
    ]
    soak.paths = paths
    for path in paths:
        soak.tallies[path.name] = PathTally()
        await path.start(soak._consumed(path.name))
    stop = asyncio.Event()
    sampler = asyncio.create_task(soak.sampler(stop))
    result: dict[str, Any] = {"duration_s": duration_s, "sample_s": sample_s}
    try:
        await asyncio.sleep(2.0)  # rebalance, streams attached
        if churn:  # first: the soak's traffic leaves nothing behind to be told from the churn's
            result["churn"] = await _churn(soak, servers, churn, expiry_ms, echo)
        idle_before = await soak.settle(5)
        echo(f"capacity: all paths flat out for {capacity_s:.0f} s")
        capacity = await soak.capacity(paths, capacity_s)
        rates = {name: max(1.0, rate / 2) for name, rate in capacity.items()}
        result["capacity_per_s"] = {k: round(v, 1) for k, v in capacity.items()}
        result["rate_per_s"] = {k: round(v, 1) for k, v in rates.items()}
        await soak.drain(120.0)  # the soak starts without the capacity run's backlog
        echo(f"soak: {duration_s:.0f} s at half capacity {result['rate_per_s']}")
        soak_started = time.monotonic() - soak.started
        soak.soak_started_us = time.time_ns() // 1000
        acked = {path.name: soak.tallies[path.name].acked.count for path in paths}
        await asyncio.gather(*(soak.paced(path, rates[path.name], duration_s) for path in paths))
        soak_ended = time.monotonic() - soak.started
        result["sent_per_s"] = {
            name: round((soak.tallies[name].acked.count - before) / (soak_ended - soak_started), 1)
            for name, before in acked.items()
        }
        await soak.drain(max(600.0, duration_s / 4))
        await asyncio.sleep(5.0)  # the last acks and long polls answered
        idle_after = await soak.lowest(10)
        result["idle"] = {
            name: {"before": idle_before[name], "after": idle_after[name]}
            for name in sorted(idle_after)
            if name in idle_before and name.endswith(IDLE_JUDGED)
        }
        warm = warmup_s(duration_s)
        window = max(sample_s * 3, warm)
        result["warmup_s"] = warm
        result["growth"] = growth(soak.samples, soak_started + warm, soak_ended, window)
        result["paths"] = _path_results(soak.tallies, warm)
    finally:
        stop.set()
        await sampler
        for path in paths:
            with contextlib.suppress(Exception):
                await path.close()
    result["samples"] = soak.samples.series
    return result


def _path_results(tallies: dict[str, PathTally], warm_s: float) -> dict[str, Any]:
    results = {}
    for name, tally in tallies.items():
        minutes = p99_per_minute(tally.minutes)
        everything = sorted(v for latencies in tally.minutes.values() for v in latencies)
        settled = minutes[min(len(minutes) - 1, int(warm_s // 60)) :] if minutes else []
        lost = tally.acked.missing_from(tally.consumed)
        results[name] = {
            "acknowledged": tally.acked.count,
            "send_failed": tally.failed,
            "consumed": tally.acked.count - lost,
            "lost": lost,
            "deliveries": tally.deliveries,
            "duplicates": tally.deliveries - tally.consumed.count,
            "send_p99_ms": round(_p99(tally.send_ms), 2),
            "e2e_p50_ms": round(everything[len(everything) // 2], 2) if everything else None,
            "e2e_p99_ms": round(_p99(everything), 2),
            "e2e_p99_ms_per_minute": minutes,
            "p99_drift_ms": round(settled[-1] - settled[0], 2) if len(settled) > 1 else 0.0,
        }
    return results


async def _churn(soak: Soak, servers: _Servers, clients: int, expiry_ms: int, echo: Echo) -> dict[str, Any]:
    """Half the clients, the level of everything once the silent ones expired, the other half:
    all must come back to that level. The first half makes each label set, retry topic and
    store file the churn brings appear once; what grows with clients grows again in the second."""
    assert servers.sidecar is not None
    churn = Churn(
        servers.namesrv.address,
        servers.broker.address,
        BROKER_NAME,
        servers.proxy.address,
        servers.sidecar.address,
        CHURN_TOPIC,
    )
    expiry_s = expiry_ms / 1000
    first, second = clients // 2, clients - clients // 2
    for path in soak.paths:  # producers introduce themselves to the broker at their first send
        await soak._send(path, record_ms=False)
    idle = await soak.settle(3)
    per_client = {k: v for k, v in idle.items() if k.split("/")[1].startswith(PER_CLIENT_TABLES)}
    echo(f"churn: {first} clients come and go, then the level of everything")
    await churn.run(first)
    await soak.back_to(per_client, expiry_s * 2 + 30)  # the silent leavers swept
    before = await soak.settle(5)
    echo(f"churn: {second} more")
    started = time.monotonic()
    await churn.run(second, first=first)
    took = time.monotonic() - started
    peak = await soak.tables_now()
    above, back_s = await soak.back_to(before, expiry_s * 2 + 30)
    not_idle, _ = await soak.back_to(per_client, expiry_s + 10)
    return {
        "clients": clients,
        "kinds": kinds_of(clients),
        "seconds_second_half": round(took, 1),
        "failed": churn.failed,
        "expiry_ms": expiry_ms,
        "idle": idle,
        "before": before,
        "right_after": peak,
        "above_before": above | not_idle,
        "back_within_s": round(back_s, 1),
    }


def run(
    echo: Echo,
    *,
    duration_s: float,
    capacity_s: float,
    sample_s: float,
    churn: int,
    expiry_ms: int,
    work_dir: Path | None,
) -> dict[str, Any]:
    """The whole run's result (see the module's docstring)."""
    data = Path(tempfile.mkdtemp(prefix="orbitmq-bench-soak-", dir=work_dir))
    servers = None
    try:
        servers = _Servers(data, expiry_ms)
        return asyncio.run(
            _measure(
                servers,
                echo,
                duration_s=duration_s,
                capacity_s=capacity_s,
                sample_s=sample_s,
                churn=churn,
                expiry_ms=expiry_ms,
            )
        )
    finally:
        if servers is not None:
            servers.stop()
        shutil.rmtree(data, ignore_errors=True)
