"""Producing through a failover: ``orbitmq produce --count`` (and library producers beside it)
keep sending while the master of a ``local up --slaves 1`` group is SIGKILLed; the command
finishes with exit code 0 and every message acknowledged, no library send fails, and a consumer
then reads every acknowledged message."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
sys.path.insert(0, str(Path(__file__).parent))
from clusterkit import FAST, Collector, eventually
from hakit import LocalGroup, healthy_pair, local_group, pid_of

from orbitmq.client import Admin, ConsumeFromWhere, Message, Producer, PushConsumer

pytestmark = pytest.mark.timeout(120)
TOPIC = "FailoverCli"
COUNT = 4_000
KILL_AFTER = 500
"""Acknowledged sends before the master is killed."""
LIBRARY_SENDERS = 4
"""Concurrent library senders beside the command (their failed sends share route refreshes)."""


@pytest.fixture
async def group(tmp_path: Path) -> AsyncIterator[LocalGroup]:
    async with local_group(tmp_path / "data") as running:
        yield running


@dataclass
class ProduceRun:
    """A running ``orbitmq produce --json``: its result lines, timed as they arrive."""

    process: subprocess.Popen[str]
    results: list[tuple[float, dict[str, object]]] = field(default_factory=list)
    summary: dict[str, object] | None = None
    stderr: str = ""

    def read(self) -> None:
        assert self.process.stdout is not None and self.process.stderr is not None
        for line in self.process.stdout:
            record = json.loads(line)
            if "summary" in record:
                self.summary = record["summary"]
            else:
                self.results.append((time.monotonic(), record))
        self.stderr = self.process.stderr.read()


def start_produce(namesrv: str, *args: str) -> tuple[ProduceRun, threading.Thread]:
    process = subprocess.Popen(
        [sys.executable, "-m", "orbitmq.cli.main", "produce", "--namesrv", namesrv, "--json", *args],
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run = ProduceRun(process)
    reader = threading.Thread(target=run.read, daemon=True)
    reader.start()
    return run, reader


async def test_cli_produce_rides_out_a_master_sigkill(group: LocalGroup) -> None:
    async with Admin(group.namesrv) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
    master, _ = await healthy_pair(group.addresses)

    began = time.monotonic()
    run, reader = start_produce(group.namesrv, "--topic", TOPIC, "--count", str(COUNT), "--body", "m{i}")
    library_acked: list[str] = []
    library_failures: list[str] = []

    async def library_sender(producer: Producer, sender: int) -> None:
        i = 0
        while run.process.poll() is None:
            body = f"lib{sender}-{i}"
            try:
                await producer.send(Message(TOPIC, body.encode()))
            except Exception as error:  # any failure reaching the caller is what this test forbids
                library_failures.append(f"{type(error).__name__}: {error}")
            else:
                library_acked.append(body)
            i += 1

    try:
        async with Producer("FailoverLibrary", group.namesrv) as producer:
            senders = [asyncio.create_task(library_sender(producer, n)) for n in range(LIBRARY_SENDERS)]
            await eventually(lambda: len(run.results) >= KILL_AFTER, 30, lambda: f"{len(run.results)} sent")
            os.kill(await pid_of(master), signal.SIGKILL)
            killed = time.monotonic()
            code = await asyncio.to_thread(run.process.wait, 60)
            await asyncio.gather(*senders)
    finally:
        if run.process.poll() is None:
            run.process.kill()
    await asyncio.to_thread(reader.join, 10)
    took = time.monotonic() - began

    assert code == 0, run.stderr
    assert "Traceback" not in run.stderr and "AioRpcError" not in run.stderr, run.stderr
    assert len(run.results) == COUNT, f"{len(run.results)} of {COUNT} acknowledged"
    times = [at for at, _ in run.results]
    resumed = max(later - earlier for earlier, later in itertools.pairwise(times) if later > killed)
    assert run.summary is not None and run.summary["sent"] == COUNT and run.summary["failed"] == 0
    assert library_failures == [], library_failures[:3]

    collector = Collector()
    consumer = PushConsumer(
        "FailoverCliCheck",
        group.namesrv,
        listener=collector.listener("c"),
        settings=FAST,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe(TOPIC)
    await consumer.start()
    expected = {f"m{i}" for i in range(COUNT)} | set(library_acked)
    try:
        await eventually(
            lambda: expected <= set(collector.bodies()),
            30,
            lambda: f"{len(expected - set(collector.bodies()))} acknowledged messages not consumed",
        )
    finally:
        await consumer.close()
    consumed = collector.bodies()
    statuses: dict[str, int] = {}
    for _, record in run.results:
        statuses[str(record["status"])] = statuses.get(str(record["status"]), 0) + 1
    print(
        f"failover produce: {COUNT} from the command in {took:.1f} s ({statuses}) and "
        f"{len(library_acked)} from {LIBRARY_SENDERS} library senders acknowledged, all consumed, "
        f"{len(consumed) - len(set(consumed))} duplicates; writes resumed {resumed:.2f} s after the kill"
    )
