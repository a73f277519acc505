"""Typos in topic and group names are reported, never taken for an idle topic or a group
with no lag (a monitoring script reads exit status 0 and "lag 0" as all is well)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from clusterkit import Cluster, run_cli, start_cluster

from orbitmq.client.admin import Admin
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path)
    async with Admin(running.address) as admin:
        await admin.create_topic("Known", read_queue_nums=2, write_queue_nums=2)
    async with Producer("UnknownNamesP", running.address) as producer:
        await producer.send(Message("Known", b"one"))
    yield running
    await running.close()


@pytest.mark.parametrize(
    "args",
    [
        ("admin", "group", "progress", "--group", "ghostgroup"),
        ("admin", "group", "progress", "--group", "ghostgroup", "--topic", "Known"),
        ("admin", "group", "delete", "--group", "ghostgroup"),
        ("admin", "offset", "reset", "--group", "ghostgroup", "--topic", "Known", "--to", "0"),
    ],
)
async def test_an_unknown_group_is_an_error(cluster: Cluster, args: tuple[str, ...]) -> None:
    code, out, err = await run_cli(cluster, *args)
    assert code == 1, (out, err)
    assert "'ghostgroup' does not exist" in err and "group list" in err, err
    assert "lag" not in out


async def test_a_known_group_still_shows_its_progress(cluster: Cluster) -> None:
    code, out, err = await run_cli(
        cluster, "consume", "--group", "Real", "--topic", "Known", "--from", "first", "--count", "1"
    )
    assert code == 0, err
    code, out, err = await run_cli(cluster, "admin", "group", "progress", "--group", "Real", "--json")
    assert code == 0, err
    assert sum(row["lag"] for row in json.loads(out)) == 0
    code, out, err = await run_cli(
        cluster, "admin", "offset", "reset", "--group", "Real", "--topic", "Known", "--to", "0", "--json"
    )
    assert code == 0, err


async def test_a_negative_timestamp_is_refused(cluster: Cluster) -> None:
    code, _, err = await run_cli(
        cluster, "admin", "offset", "reset", "--group", "Real", "--topic", "Known", "--timestamp", "-5"
    )
    assert code == 2 and "'-5'" in err and "0 or more" in err, err


async def test_a_consumer_of_a_missing_topic_says_so_and_keeps_looking(cluster: Cluster) -> None:
    args = ["consume", "--group", "Late", "--topic", "NoSuchTopicZ", "--from", "first", "--count", "1"]
    consumer = subprocess.Popen(  # noqa: ASYNC220 - read from a thread below, while the test works
        [sys.executable, "-m", "orbitmq.cli.main", *args, "--json"],
        env={**os.environ, "ORBITMQ_NAMESRV": cluster.address, "HOME": str(cluster.root)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert consumer.stderr is not None
        line = await asyncio.wait_for(asyncio.to_thread(consumer.stderr.readline), 20)
        assert "WARNING" in line and "'NoSuchTopicZ' does not exist" in line, line
        # the topic appears later: the same consumer finds it and consumes
        async with Admin(cluster.address) as admin:
            await admin.create_topic("NoSuchTopicZ", read_queue_nums=1, write_queue_nums=1)
        async with Producer("UnknownNamesP", cluster.address) as producer:
            await producer.send(Message("NoSuchTopicZ", b"at last"))
        sent = time.monotonic()
        out, _ = await asyncio.to_thread(consumer.communicate, timeout=60)
        # it heartbeats the topic's broker as soon as the route shows it, so its rebalance
        # finds itself in the group (was: the next rebalance, 20-30 s later)
        assert time.monotonic() - sent < 10
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.communicate()
    assert consumer.returncode == 0
    message, summary = map(json.loads, out.splitlines())
    assert message["body"] == "at last" and summary["summary"]["received"] == 1
