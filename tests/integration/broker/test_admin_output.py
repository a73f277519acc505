"""``orbitmq admin`` against a real name server and broker: message ids of both kinds find a
message, bad ids say what is wrong, and output is typed for scripts and plain for people."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from brokerkit import RunningBroker, start_broker, stop_broker
from click.testing import CliRunner

from orbitmq.cli.main import main
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.v1 import broker_pb2

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[NameServer, RunningBroker]]:
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen="127.0.0.1:0"))
    await namesrv.start()
    running = await start_broker(tmp_path / "b", namesrv=namesrv.address)
    yield namesrv, running
    await stop_broker(running)
    await namesrv.close()


async def cli(*args: str) -> tuple[int, str]:
    """Run ``orbitmq …`` in a thread (the commands run their own event loop)."""
    result = await asyncio.to_thread(CliRunner().invoke, main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


async def produce_one(namesrv: str, topic: str, key: str) -> dict[str, Any]:
    """What ``orbitmq produce --json`` printed for one message."""
    code, out = await cli(
        "produce", "--topic", topic, "--body", "hello ids", "--key", key, "--json", "--namesrv", namesrv
    )
    assert code == 0, out
    [sent] = [line for line in map(json.loads, out.splitlines()) if "msg_id" in line]
    return sent


async def test_by_id_finds_the_msg_id_produce_prints_and_the_offset_id(
    cluster: tuple[NameServer, RunningBroker],
) -> None:
    namesrv, _ = cluster
    ns = ["--namesrv", namesrv.address]
    sent = await produce_one(namesrv.address, "Ids", "k-1")
    assert sent["msg_id"] != sent["offset_msg_id"]
    for by in (
        ["--id", sent["msg_id"], "--topic", "Ids"],
        ["--id", sent["msg_id"]],  # every topic is searched
        ["--id", sent["offset_msg_id"]],
    ):
        code, out = await cli("admin", "message", "by-id", *by, "--json", *ns)
        assert code == 0, out
        found = json.loads(out)
        assert (found["msg_id"], found["offset_msg_id"]) == (sent["msg_id"], sent["offset_msg_id"])
        assert (found["topic"], found["body"], found["keys"]) == ("Ids", "hello ids", ["k-1"])
    code, out = await cli("admin", "message", "by-id", "--id", sent["msg_id"], *ns)
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert lines["msg_id"] == sent["msg_id"] and lines["offset_msg_id"] == sent["offset_msg_id"]
    missing = "0123456789ABCDEF0123456789ABCDEF"
    code, out = await cli("admin", "message", "by-id", "--id", missing, "--topic", "Ids", *ns)
    assert code == 1 and f"no message has id '{missing}'" in out and "'Ids'" in out


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ("xyz", "message id 'xyz' contains 'x', not hexadecimal"),
        ("ABC", "message id 'ABC' has 3 characters: an offset id has 32 hex characters"),
        ("AB" * 20, "has 40 characters"),
    ],
)
async def test_a_bad_message_id_says_what_is_wrong(
    cluster: tuple[NameServer, RunningBroker], bad: str, said: str
) -> None:
    namesrv, _ = cluster
    code, out = await cli("admin", "message", "by-id", "--id", bad, "--namesrv", namesrv.address)
    assert code == 1 and said in out and len(out.strip().splitlines()) == 1, out
    if "characters" in said:
        assert "a unique key (the msg_id producers and consumers print) has 32" in out


async def test_by_key_rows_label_both_ids_truthfully(cluster: tuple[NameServer, RunningBroker]) -> None:
    namesrv, _ = cluster
    ns = ["--namesrv", namesrv.address]
    sent = await produce_one(namesrv.address, "Keyed", "order-7")
    code, out = await cli("admin", "message", "by-key", "--topic", "Keyed", "--key", "order-7", "--json", *ns)
    assert code == 0, out
    [row] = json.loads(out)
    assert (row["msg_id"], row["offset_msg_id"]) == (sent["msg_id"], sent["offset_msg_id"])
    assert row["keys"] == ["order-7"] and row["tags"] is None
    _, out = await cli("admin", "message", "by-key", "--topic", "Keyed", "--key", "order-7", *ns)
    assert "offset_msg_id" in out and sent["offset_msg_id"] in out
    assert "None" not in out and "['" not in out


async def test_tables_show_values_not_python_reprs(cluster: tuple[NameServer, RunningBroker]) -> None:
    namesrv, running = cluster
    ns = ["--namesrv", namesrv.address]
    code, out = await cli("admin", "topic", "create", "--topic", "Plain", *ns)
    assert code == 0, out
    code, out = await cli("admin", "group", "create", "--group", "PlainGroup", *ns)
    code, out = await cli("admin", "group", "list", *ns)
    assert "broadcast_allowed" in out and "yes" in out and "True" not in out
    code, out = await cli("admin", "group", "list", "--json", *ns)
    expected = {"group": "PlainGroup", "retry_max": 16, "broadcast_allowed": True, "orderly": False}
    assert any(expected.items() <= row.items() for row in json.loads(out))
    code, out = await cli("admin", "topic", "route", "--topic", "Plain", "--json", *ns)
    assert json.loads(out)[0]["slaves"] == []
    code, out = await cli("admin", "topic", "route", "--topic", "Plain", *ns)
    assert running.broker.address in out and "[]" not in out and "None" not in out
    sent = await produce_one(namesrv.address, "Plain", "p-1")
    code, out = await cli("admin", "message", "by-key", "--topic", "Plain", "--key", "p-1", *ns)
    assert "None" not in out and "['" not in out
    code, out = await cli("admin", "message", "by-id", "--id", sent["msg_id"], *ns)
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert (lines["keys"], lines["tags"]) == ("p-1", "-")
    assert f"UNIQ_KEY={sent['msg_id']}" in lines["properties"] and "{" not in lines["properties"]
    assert lines["store_host"] == running.broker.address


async def test_broker_status_is_typed_and_in_a_stable_order(
    cluster: tuple[NameServer, RunningBroker],
) -> None:
    namesrv, running = cluster
    ns = ["--namesrv", namesrv.address]
    await produce_one(namesrv.address, "Counted", "c-1")
    code, out = await cli("admin", "broker", "status", "--json", *ns)
    assert code == 0, out
    status = json.loads(out)[running.broker.address]
    assert status["broker_name"] == "broker-a" and status["broker_role"] == "ASYNC_MASTER"
    assert status["epoch"] >= 0 and status["broker_id"] == 0 and status["commit_log_max_offset"] > 0
    assert all(isinstance(status[k], int) for k in ("pid", "topic_count", "long_polls_held"))
    declared = [f.name for f in broker_pb2.RuntimeInfo.DESCRIPTOR.fields]
    assert list(status) == declared
    _, out = await cli("admin", "broker", "status", *ns)
    lines = out.splitlines()
    assert lines[0] == f"== {running.broker.address}"
    assert [line.split()[0] for line in lines[1:]] == declared


async def test_consume_prints_values_not_python_reprs(cluster: tuple[NameServer, RunningBroker]) -> None:
    namesrv, _ = cluster
    sent = await produce_one(namesrv.address, "Shown", "s-1")
    args = ["--topic", "Shown", "--group", "ShownGroup", "--from", "first", "--count", "1"]
    done = await asyncio.to_thread(  # a child process: consume installs signal handlers
        subprocess.run,
        [sys.executable, "-m", "orbitmq.cli.main", "consume", *args, "--namesrv", namesrv.address],
        capture_output=True,
        text=True,
        timeout=45,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert f"{sent['msg_id']} tags=- keys=s-1: hello ids" in out and "None" not in out and "['" not in out


async def cli_streams(*args: str) -> tuple[int, str, str]:
    """``orbitmq …`` with standard output and standard error apart (what a script reads)."""
    result = await asyncio.to_thread(CliRunner().invoke, main, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


async def test_perm_takes_r_w_rw_and_numbers(cluster: tuple[NameServer, RunningBroker]) -> None:
    namesrv, _ = cluster
    ns = ["--namesrv", namesrv.address]
    code, out = await cli("admin", "topic", "create", "--topic", "Gated", "--perm", "r", "--json", *ns)
    assert code == 0 and json.loads(out)[0]["after"]["perm"] == 4, out
    for given, perm in (("rw", 6), ("w", 2), ("6", 6)):
        code, out = await cli("admin", "topic", "update", "--topic", "Gated", "--perm", given, "--json", *ns)
        assert code == 0 and json.loads(out)[0]["after"]["perm"] == perm, out
    code, out = await cli("admin", "topic", "update", "--topic", "Gated", "--perm", "x", *ns)
    assert code == 2 and "'x' is not a permission: give r, w or rw, or a number 0-7" in out


async def test_produce_json_summary_carries_the_failure(cluster: tuple[NameServer, RunningBroker]) -> None:
    namesrv, _ = cluster
    ns = ["--namesrv", namesrv.address]
    code, out = await cli("admin", "topic", "create", "--topic", "ReadOnly", "--perm", "4", *ns)
    assert code == 0, out
    code, out, err = await cli_streams("produce", "--topic", "ReadOnly", "--json", *ns)
    assert code == 1
    summary = json.loads(out.splitlines()[-1])["summary"]
    assert summary["sent"] == 0 and summary["failed"] == 1
    assert summary["error"] and "ReadOnly" in summary["error"] and summary["error"] in err, (out, err)
    code, out, err = await cli_streams("produce", "--topic", "Writable", "--json", *ns)
    assert code == 0 and json.loads(out.splitlines()[-1])["summary"]["error"] is None, err


async def test_topic_status_shows_iso_times(cluster: tuple[NameServer, RunningBroker]) -> None:
    namesrv, _ = cluster
    ns = ["--namesrv", namesrv.address]
    await produce_one(namesrv.address, "Timed", "t-1")
    code, out = await cli("admin", "topic", "status", "--topic", "Timed", *ns)
    assert code == 0 and "last_update" in out and "last_update_ms" not in out, out
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", out), out
    code, out = await cli("admin", "topic", "status", "--topic", "Timed", "--json", *ns)
    [written] = [row for row in json.loads(out) if row["max_offset"]]
    assert written["last_update"].endswith("+00:00") and written["last_update_ms"] > 0


async def test_by_key_without_a_match_exits_1_saying_so(cluster: tuple[NameServer, RunningBroker]) -> None:
    namesrv, _ = cluster
    ns = ["--namesrv", namesrv.address]
    await produce_one(namesrv.address, "Keys", "k-1")
    code, out, err = await cli_streams("admin", "message", "by-key", "--topic", "Keys", "--key", "nope", *ns)
    assert code == 1 and out == ""
    assert "no message of topic 'Keys' has the key or unique key 'nope'" in err
    code, out, err = await cli_streams(
        "admin", "message", "by-key", "--topic", "Keys", "--key", "nope", "--json", *ns
    )
    assert code == 1 and json.loads(out) == [] and "'nope'" in err
