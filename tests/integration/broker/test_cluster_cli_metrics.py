"""A name server and a broker together: the admin CLI (tables and --json), metrics families,
SQL92 subscriptions, and the broker as a real process configured by file, environment and flags."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from brokerkit import RunningBroker, start_broker, stop_broker
from click.testing import CliRunner
from test_send_pull import pull_request, send_request

from orbitmq.cli.main import main
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2, common_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[NameServer, RunningBroker]]:
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen="127.0.0.1:0"))
    await namesrv.start()
    running = await start_broker(tmp_path / "b", namesrv=namesrv.address)
    yield namesrv, running
    await stop_broker(running)
    await namesrv.close()


async def cli(*args: str) -> tuple[int, str]:
    """Run ``orbitmq …`` in a thread (the admin commands run their own event loop)."""
    result = await asyncio.to_thread(CliRunner().invoke, main, list(args), catch_exceptions=False)
    return result.exit_code, result.output


async def test_admin_cli_parity(cluster: tuple[NameServer, RunningBroker]) -> None:
    namesrv, running = cluster
    ns = ["--namesrv", namesrv.address]
    code, out = await cli(
        "admin", "topic", "create", "--topic", "Cli", "--read-queues", "2", "--write-queues", "2", *ns
    )
    assert code == 0 and running.broker.address in out
    code, out = await cli("admin", "topic", "list", "--json", *ns)
    assert {"topic": "Cli"} in json.loads(out)
    code, out = await cli("admin", "topic", "route", "--topic", "Cli", "--json", *ns)
    assert json.loads(out)[0]["write_queues"] == 2 and json.loads(out)[0]["master"] == running.broker.address
    sent = await running.stub.SendMessage(send_request("Cli", b"hello cli", queue_id=1, KEYS="key-7"))
    code, out = await cli("admin", "topic", "status", "--topic", "Cli", "--json", *ns)
    assert [(r["queue"], r["max_offset"]) for r in json.loads(out)] == [(0, 0), (1, 1)]
    code, out = await cli("admin", "message", "by-key", "--topic", "Cli", "--key", "key-7", "--json", *ns)
    assert [m["body"] for m in json.loads(out)] == ["hello cli"]
    code, out = await cli("admin", "message", "by-id", "--id", sent.msg_ids[0], "--json", *ns)
    assert json.loads(out)["queue_offset"] == 0
    code, out = await cli("admin", "group", "create", "--group", "CliGroup", "--retry-max", "3", *ns)
    assert code == 0
    code, out = await cli("admin", "group", "list", "--json", *ns)
    expected = {"group": "CliGroup", "retry_max": 3, "broadcast_allowed": True, "orderly": False}
    assert any(expected.items() <= row.items() for row in json.loads(out))
    await running.stub.UpdateConsumerOffset(
        broker_pb2.UpdateConsumerOffsetRequest(consumer_group="CliGroup", topic="Cli", queue_id=1, offset=0)
    )
    code, out = await cli(
        "admin", "group", "progress", "--group", "CliGroup", "--topic", "Cli", "--json", *ns
    )
    assert {(r["queue"], r["lag"]) for r in json.loads(out)} == {(0, 0), (1, 1)}
    code, out = await cli(
        "admin", "offset", "reset", "--group", "CliGroup", "--topic", "Cli", "--to", "1", "--json", *ns
    )
    assert {(r["queue"], r["offset"]) for r in json.loads(out)} == {(0, 0), (1, 1)}
    code, out = await cli("admin", "cluster", "list", "--json", *ns)
    assert json.loads(out) == [
        {
            "cluster": "DefaultCluster",
            "broker_name": "broker-a",
            "broker_id": 0,
            "role": "master",
            "address": running.broker.address,
        }
    ]
    code, out = await cli("admin", "broker", "status", "--json", *ns)
    assert json.loads(out)[running.broker.address]["broker_name"] == "broker-a"
    code, out = await cli("admin", "dlq", "list", "--group", "CliGroup", "--json", *ns)
    assert json.loads(out) == []
    code, out = await cli("admin", "topic", "list", *ns)  # a table for people
    assert "Cli" in out and "┃" in out
    code, out = await cli("admin", "topic", "delete", "--topic", "Cli", *ns)
    assert code == 0
    code, out = await cli("admin", "topic", "route", "--topic", "Cli", *ns)
    assert code == 1 and "TOPIC_NOT_EXIST" in out
    code, out = await cli("admin", "topic", "create", "--topic", "bad name!", *ns)
    assert code == 1 and "'bad name!'" in out


async def test_dead_letters_listed(cluster: tuple[NameServer, RunningBroker]) -> None:
    namesrv, running = cluster
    sent = await running.stub.SendMessage(send_request("Fails", b"poison", queue_id=0))
    await running.stub.SendBack(
        broker_pb2.SendBackRequest(
            consumer_group="G", commit_log_offset=sent.commit_log_offset, delay_level=-1
        )
    )
    running.broker.registration_changed()
    await asyncio.sleep(0.3)
    code, out = await cli("admin", "dlq", "list", "--group", "G", "--json", "--namesrv", namesrv.address)
    assert code == 0 and [m["body"] for m in json.loads(out)] == ["poison"]


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return reply.read().decode()


async def test_metrics_families(cluster: tuple[NameServer, RunningBroker]) -> None:
    _, running = cluster
    await running.stub.SendMessage(send_request("Metered", b"m", queue_id=0))
    await running.stub.PullMessage(pull_request("Metered", 0, 0, commit_offset=0))
    await running.stub.LockBatch(
        broker_pb2.LockBatchRequest(
            consumer_group="CG",
            client_id="c1",
            queues=[common_pb2.MessageQueue(topic="Metered", broker_name="broker-a", queue_id=0)],
        )
    )
    text = await asyncio.to_thread(_scrape, running.broker.grpc.metrics_url)
    for family in [
        'orbitmq_queue_max_offset{broker="broker-a",queue="0",topic="Metered"} 1.0',
        'orbitmq_queue_min_offset{broker="broker-a",queue="0",topic="Metered"} 0.0',
        'orbitmq_consumer_offset{broker="broker-a",group="CG",queue="0",topic="Metered"} 0.0',
        'orbitmq_consumer_lag{broker="broker-a",group="CG",queue="0",topic="Metered"} 1.0',
        'orbitmq_queue_lock_owner{broker="broker-a",client="c1",group="CG",queue="0",topic="Metered"} 1.0',
        'orbitmq_queue_lock_events_total{broker="broker-a",event="acquired",group="CG"} 1.0',
        'orbitmq_messages_put_total{broker="broker-a",topic="Metered"} 1.0',
        'orbitmq_messages_got_total{broker="broker-a",group="CG",topic="Metered"} 1.0',
        "orbitmq_send_latency_seconds_count",
        "orbitmq_pull_latency_seconds_bucket",
        "orbitmq_long_polls_held",
        "orbitmq_commitlog_bytes",
        "orbitmq_commitlog_disk_bytes",
        "orbitmq_dispatch_lag_bytes",
    ]:
        assert family in text, family


async def test_sql92_subscription_on_pull(cluster: tuple[NameServer, RunningBroker]) -> None:
    _, running = cluster
    for i in range(10):
        await running.stub.SendMessage(
            send_request("Sql", f"{i}".encode(), queue_id=0, a=str(i), region="eu" if i % 2 else "us")
        )
    sub = common_pb2.Subscription(
        topic="Sql", expression="a BETWEEN 2 AND 6 AND region = 'eu'", expression_type=common_pb2.SQL92
    )
    reply = await running.stub.PullMessage(pull_request("Sql", 0, 0, subscription=sub))
    assert [decode(r).body for r in reply.records] == [b"3", b"5"]
    bad = common_pb2.Subscription(topic="Sql", expression="a >", expression_type=common_pb2.SQL92)
    from test_send_pull import expect_failure

    await expect_failure(
        running.stub.PullMessage(pull_request("Sql", 0, 0, subscription=bad)),
        ErrorReason.INVALID_EXPRESSION,
        "column",
    )


def test_broker_process_from_file_env_and_flags(tmp_path: Path) -> None:
    config = tmp_path / "broker.yaml"
    config.write_text(f"data_dir: {tmp_path / 'data'}\nbroker_name: from-file\nmetrics_listen: ''\n")
    env = {**os.environ, "ORBITMQ_BROKER_CLUSTER": "EnvCluster"}
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orbitmq.cli.main",
            "broker",
            "--config",
            str(config),
            "--listen",
            "127.0.0.1:0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("broker from-file listening on 127.0.0.1:")
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(20) == 0
    assert (tmp_path / "data" / "commitlog").is_dir()
    bad = subprocess.run(
        [sys.executable, "-m", "orbitmq.cli.main", "broker", "--config", str(config)],
        capture_output=True,
        text=True,
        env={**env, "ORBITMQ_BROKER_FLUSH_MODE": "SOMETIMES"},
        timeout=60,
    )
    assert bad.returncode != 0 and "flush_mode" in bad.stderr and "ORBITMQ_BROKER_FLUSH_MODE" in bad.stderr
    config.write_text("unknown_setting: 1\n")
    bad = subprocess.run(
        [sys.executable, "-m", "orbitmq.cli.main", "broker", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0 and "unknown_setting" in bad.stderr and str(config) in bad.stderr
