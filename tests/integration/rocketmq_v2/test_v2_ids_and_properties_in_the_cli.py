"""The CLI with messages the official RocketMQ 5 Python client sent through ``orbitmq proxy``:
``orbitmq consume --json`` prints the client's message id (34 characters, ``01`` first) and the
message's user properties, and ``orbitmq admin message by-id`` finds the message by that id,
with or without ``--topic``, as it does by the offset id."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from v2kit import call, message, official_producer, v2_cluster

from orbitmq.cli.main import main

pytestmark = pytest.mark.timeout(90)

TOPIC = "V2CliIds"


async def cli(*args: str) -> tuple[int, str]:
    """Run ``orbitmq admin …`` in a thread (the command runs its own event loop)."""
    result = await asyncio.to_thread(CliRunner().invoke, main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


async def consume(namesrv: str, group: str, count: int, *args: str) -> tuple[int, str]:
    """``orbitmq consume`` as a user runs it, a child process (it handles SIGINT and SIGTERM,
    which only a main thread can): the first ``count`` messages of the topic."""
    command = [sys.executable, "-m", "orbitmq.cli.main", "consume", "--group", group, "--topic", TOPIC]
    command += ["--from", "first", "--count", str(count), "--idle-timeout", "30", *args]
    process = await asyncio.create_subprocess_exec(
        *command,
        env={**os.environ, "ORBITMQ_NAMESRV": namesrv},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(process.communicate(), 60)
    finally:
        if process.returncode is None:  # never leave a consumer running behind a failed test
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode()


async def test_consume_prints_the_official_clients_id_and_properties_and_by_id_finds_it(
    tmp_path: Path,
) -> None:
    async with v2_cluster(tmp_path) as cluster:
        async with official_producer(cluster.endpoint, [TOPIC]) as producer:
            sent = await call(
                producer.send,
                message(TOPIC, b"from v5", tag="T1", keys=("order-9",), region="eu", tier="gold"),
            )
        ns = ("--namesrv", cluster.namesrv.address)
        code, out = await consume(cluster.namesrv.address, "v2-cli-ids", 1, "--json")
        assert code == 0, out
        [record] = [r for r in map(json.loads, out.splitlines()) if "msg_id" in r]
        assert record["msg_id"] == sent.message_id
        assert len(record["msg_id"]) == 34 and record["msg_id"].startswith("01")
        assert record["properties"] == {"region": "eu", "tier": "gold"}
        assert (record["tags"], record["keys"], record["body"]) == ("T1", ["order-9"], "from v5")

        offset_ids = set()
        for by in (["--topic", TOPIC], []):  # without the topic every topic's index is asked
            code, out = await cli("admin", "message", "by-id", "--id", record["msg_id"], *by, "--json", *ns)
            assert code == 0, out
            found = json.loads(out)
            assert (found["msg_id"], found["topic"], found["body"]) == (sent.message_id, TOPIC, "from v5")
            assert found["properties"]["region"] == "eu"
            offset_ids.add(found["offset_msg_id"])
        [offset_id] = offset_ids
        code, out = await cli("admin", "message", "by-id", "--id", offset_id, "--json", *ns)
        assert code == 0 and json.loads(out)["msg_id"] == sent.message_id, out

        missing = "01" + "0" * 32
        code, out = await cli("admin", "message", "by-id", "--id", missing, *ns)
        assert code == 1 and f"no message has id '{missing}'" in out, out


async def test_consume_text_lines_show_user_properties(tmp_path: Path) -> None:
    async with v2_cluster(tmp_path) as cluster:
        async with official_producer(cluster.endpoint, [TOPIC]) as producer:
            await call(producer.send, message(TOPIC, b"plain"))
            await call(producer.send, message(TOPIC, b"with", region="eu"))
        code, out = await consume(cluster.namesrv.address, "v2-cli-text", 2)
        assert code == 0, out
        lines = {line.rsplit(": ", 1)[1]: line for line in out.splitlines() if TOPIC in line}
        assert "properties=region=eu" in lines["with"]
        assert "properties" not in lines["plain"] and "UNIQ_KEY" not in out
