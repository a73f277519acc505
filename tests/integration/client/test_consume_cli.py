"""``orbitmq consume`` as a user runs it: a real child process against a real cluster."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
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


def consume(cluster: Cluster, *args: str, as_json: bool = True) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "orbitmq.cli.main", "consume", *(["--json"] if as_json else []), *args],
        env={**os.environ, "ORBITMQ_NAMESRV": cluster.address, "HOME": str(cluster.root)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def communicate(process: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        return await asyncio.to_thread(process.communicate, timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()  # never leave a consumer running behind a failed test
        process.communicate()
        raise


async def finish(process: subprocess.Popen[str]) -> tuple[int, list[dict[str, object]], str]:
    """Exit code, the messages printed and stderr; a run that ends normally ends with its
    summary line, which is checked against the messages and left out of them."""
    out, err = await communicate(process)
    lines = [json.loads(line) for line in out.splitlines()]
    if process.returncode == 0:
        summary = lines.pop()["summary"]
        assert summary["received"] == len(lines) == sum(q["count"] for q in summary["queues"])
        assert not any("summary" in line for line in lines)
    return process.returncode, lines, err


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
        "properties",
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


async def test_orderly_sigterm_summary_and_metrics(cluster: Cluster) -> None:
    """SIGTERM ends the run with its summary (count, per queue, why); --metrics-port serves the
    consumer's own figures while it runs."""
    process = consume(
        cluster, "--group", "GO", "--topic", "Cli", "--from", "first", "--orderly", "--metrics-port", "0"
    )
    assert process.stdout is not None and process.stderr is not None
    announced = await asyncio.to_thread(process.stderr.readline)
    url = re.search(r"metrics on (http://\S+)", announced)
    assert url, announced
    lines = [json.loads(await asyncio.to_thread(process.stdout.readline)) for _ in range(30)]
    want = ['orbitmq_consume_results_total{group="GO",status="SUCCESS",topic="Cli"} 30.0']
    for _ in range(50):  # the listener's result is counted just after its line is printed
        scraped = await asyncio.to_thread(lambda: urllib.request.urlopen(url[1], timeout=10).read().decode())
        results = [line for line in scraped.splitlines() if line.startswith("orbitmq_consume_results_total{")]
        if results == want:
            break
        await asyncio.sleep(0.1)
    assert results == want
    assert 'orbitmq_client_queues_assigned{client="' in scraped
    process.send_signal(signal.SIGTERM)
    out, err = await communicate(process)
    assert process.returncode == 0, err
    [summary_line] = out.splitlines()
    summary = json.loads(summary_line)["summary"]
    assert (summary["received"], summary["stopped_by"]) == (30, "SIGTERM")
    per_queue = {q["queue"]: q["count"] for q in summary["queues"]}
    assert per_queue == {q: sum(1 for r in lines if r["queue"] == q) for q in range(4)}
    for queue in range(4):
        offsets = [r["queue_offset"] for r in lines if r["queue"] == queue]
        assert offsets == sorted(offsets), "orderly: each queue in offset order"
    async with Admin(cluster.address) as admin:
        progress = await admin.consume_progress("GO", "Cli")
    assert sum(p.consumer_offset for p in progress) == 30, "offsets committed on SIGTERM"


async def test_idle_timeout_ends_a_text_run_with_its_summary_and_says_which_body_is_base64(
    cluster: Cluster,
) -> None:
    async with Producer("PB", cluster.address) as producer:
        await producer.send(Message("Bodies", "grüße".encode()))
        await producer.send(Message("Bodies", b"\xff\x00\x01"))
    process = consume(
        cluster,
        "--group",
        "GB",
        "--topic",
        "Bodies",
        "--from",
        "first",
        "--idle-timeout",
        "1.5",
        as_json=False,
    )
    out, err = await communicate(process)
    assert process.returncode == 0, err
    bodies = sorted(line.split(": ", 1)[1] for line in out.splitlines())
    assert bodies == ["[base64, not UTF-8] /wAB", "grüße"]
    summary = err.strip().splitlines()[-1]
    assert summary.startswith("orbitmq consume: received 2 message(s) in "), err
    assert summary.endswith("; stopped by --idle-timeout (1.5 s without a message)"), err
    queues = re.search(r"per queue: (.*);", summary)
    assert queues and sum(int(part.rsplit(" ", 1)[1]) for part in queues[1].split(", ")) == 2, summary
