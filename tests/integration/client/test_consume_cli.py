"""``orbitmq consume`` as a user runs it: a real child process against a real cluster."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from clusterkit import Cluster, start_cluster

from orbitmq.client.admin import Admin
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path)
    async with Admin(running.address) as admin:
        await admin.create_topic("Cli", read_queue_nums=4, write_queue_nums=4)
    async with Producer("PG", running.address) as producer:
        for i in range(30):
            await producer.send(Message("Cli", f"body {i}".encode(), tags="AB"[i % 2], keys=[f"k{i}"]))
    yield running
    await running.close()


def consume(cluster: Cluster, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "orbitmq.cli.main", "consume", "--json", *args],
        env={**os.environ, "ORBITMQ_NAMESRV": cluster.address, "HOME": str(cluster.root)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def finish(process: subprocess.Popen[str]) -> tuple[int, list[dict[str, object]], str]:
    try:
        out, err = await asyncio.to_thread(process.communicate, timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()  # never leave a consumer running behind a failed test
        process.communicate()
        raise
    return process.returncode, [json.loads(line) for line in out.splitlines()], err


async def test_count_exits_and_leaves_the_rest_for_the_next_run(cluster: Cluster) -> None:
    code, first, err = await finish(
        consume(cluster, "--group", "G", "--topic", "Cli", "--from", "first", "--count", "10")
    )
    assert code == 0, err
    assert len(first) == 10
    assert set(first[0]) == {
        "topic",
        "queue",
        "queue_offset",
        "msg_id",
        "keys",
        "tags",
        "reconsume_times",
        "body",
    }
    code, second, err = await finish(consume(cluster, "--group", "G", "--topic", "Cli", "--count", "20"))
    assert code == 0, err
    bodies = sorted(str(r["body"]) for r in first + second)
    assert bodies == sorted(f"body {i}" for i in range(30)), "nothing lost or repeated between runs"
    assert {(r["keys"][0], r["body"]) for r in first + second} == {(f"k{i}", f"body {i}") for i in range(30)}  # type: ignore[index]


async def test_tag_and_sql_expressions(cluster: Cluster) -> None:
    code, tagged, err = await finish(
        consume(cluster, "--group", "GT", "--topic", "Cli", "--from", "first", "--expr", "B", "--count", "15")
    )
    assert code == 0, err
    assert {r["tags"] for r in tagged} == {"B"} and len(tagged) == 15
    bad = await finish(consume(cluster, "--group", "GS", "--topic", "Cli", "--sql", "--expr", "a >"))
    assert bad[0] == 1 and "a >" in bad[2]
    bad = await finish(consume(cluster, "--group", "bad group", "--topic", "Cli"))
    assert bad[0] == 1 and "'bad group'" in bad[2]


async def test_orderly_and_sigterm(cluster: Cluster) -> None:
    process = consume(cluster, "--group", "GO", "--topic", "Cli", "--from", "first", "--orderly")
    assert process.stdout is not None
    lines = [json.loads(await asyncio.to_thread(process.stdout.readline)) for _ in range(30)]
    process.send_signal(signal.SIGTERM)
    code, rest, err = await finish(process)
    assert code == 0, err
    assert rest == []
    for queue in range(4):
        offsets = [r["queue_offset"] for r in lines if r["queue"] == queue]
        assert offsets == sorted(offsets), "orderly: each queue in offset order"
    async with Admin(cluster.address) as admin:
        progress = await admin.consume_progress("GO", "Cli")
    assert sum(p.consumer_offset for p in progress) == 30, "offsets committed on SIGTERM"
