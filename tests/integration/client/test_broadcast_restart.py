"""A broadcasting ``orbitmq consume`` killed and started again resumes from its local offsets.

Real child processes against a real cluster: the restarted consumer has a new pid, which is
what a restart is (the offsets file used to be named after the pid, so a restart never found
it and began again from ``--from``: re-reading everything, or with ``last`` skipping what was
sent while it was down).
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clusterkit import Cluster, eventually, start_cluster

from orbitmq.client.admin import Admin
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer

pytestmark = pytest.mark.timeout(120)

TOPIC, GROUP = "Bcast", "BG"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path)
    async with Admin(running.address) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
    yield running
    await running.close()


class Consumer:
    """``orbitmq consume --broadcast --json`` as a child process, its stdout read by a thread."""

    def __init__(self, cluster: Cluster, *args: str) -> None:
        command = ["consume", "--json", "--broadcast", "--group", GROUP, "--topic", TOPIC, "--from", "first"]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "orbitmq.cli.main", *command, *args],
            env={**os.environ, "ORBITMQ_NAMESRV": cluster.address, "HOME": str(cluster.root)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(json.loads(line))
        self.lines.put(None)

    async def bodies(self, count: int, within: float = 30) -> list[str]:
        """The next ``count`` message bodies it prints (fails if it prints fewer in time)."""
        got = []
        for _ in range(count):
            line = await asyncio.to_thread(self.lines.get, timeout=within)
            assert line is not None and "summary" not in line, f"ended after {got}: {self.stderr()}"
            got.append(str(line["body"]))
        return got

    async def nothing_more(self, within: float) -> list[dict[str, Any] | None]:
        """The next line it prints within ``within`` seconds (None: it ended), [] if none."""
        try:
            return [await asyncio.to_thread(self.lines.get, timeout=within)]
        except queue.Empty:
            return []

    def stderr(self) -> str:
        if self.process.poll() is None:
            return "(still running)"
        assert self.process.stderr is not None
        return self.process.stderr.read()

    async def stop(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)
        await asyncio.to_thread(self.process.wait, 30)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


async def send(cluster: Cluster, bodies: range) -> None:
    """One send per message, so they spread over the queues (a batch goes to one queue)."""
    async with Producer("PG", cluster.address) as producer:
        for i in bodies:
            await producer.send(Message(TOPIC, str(i).encode()))


def committed(root: Path) -> int:
    """The offsets the group's local files hold, summed over queues and files."""
    total = 0
    for file in root.rglob(f"{GROUP}/offsets.json"):
        total += sum(entry["offset"] for entry in json.loads(file.read_text())["offsetTable"])
    return total


async def test_a_killed_broadcasting_consumer_restarts_where_its_offsets_file_says(cluster: Cluster) -> None:
    offsets_root = cluster.root / ".orbitmq_offsets"
    await send(cluster, range(20))
    first = Consumer(cluster)
    try:
        assert sorted(await first.bodies(20), key=int) == [str(i) for i in range(20)]
        # Offsets reach the file every persist interval (5 s) and on close, so a SIGKILL loses
        # up to that much progress, delivered again after the restart (at least once). Killing
        # only once the file holds all 20 makes the expected redelivery empty: exactly the
        # messages sent while it was down must come next.
        await eventually(
            lambda: committed(offsets_root) == 20, 15, lambda: f"{committed(offsets_root)} in files"
        )
        await first.stop(signal.SIGKILL)
    finally:
        first.kill()
    await send(cluster, range(20, 30))

    restarted = Consumer(cluster)
    try:
        assert sorted(await restarted.bodies(10), key=int) == [str(i) for i in range(20, 30)]
        assert await restarted.nothing_more(2) == [], "earlier messages delivered again"
        # The same group and instance name on this host while it runs: the file is taken.
        rival = Consumer(cluster)
        try:
            assert await asyncio.to_thread(rival.process.wait, 30) == 1
            refusal = rival.stderr()
            assert "instance name 'DEFAULT'" in refusal and "--instance-name" in refusal, refusal
            assert f"pid {restarted.process.pid}" in refusal, refusal
        finally:
            rival.kill()
        # Another instance name is another member with its own file: everything, from first.
        other = Consumer(cluster, "--instance-name", "other", "--count", "30")
        try:
            assert sorted(await other.bodies(30), key=int) == [str(i) for i in range(30)]
        finally:
            other.kill()
        await restarted.stop(signal.SIGTERM)
        rest = [line async for line in _remaining(restarted)]
        assert len(rest) == 1 and rest[0]["summary"]["received"] == 10, rest
    finally:
        restarted.kill()


async def _remaining(consumer: Consumer) -> AsyncIterator[dict[str, Any]]:
    while (line := await asyncio.to_thread(consumer.lines.get, timeout=30)) is not None:
        yield line
