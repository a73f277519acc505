"""The official RocketMQ 5 Java client and orbitmq's own CLI on one cluster, both ways: what
``orbitmq produce`` sends (orbitmq's protocol, straight to the broker) a Java PushConsumer gets
through ``orbitmq proxy``, and what the Java Producer sends through the proxy ``orbitmq consume``
reads from the broker, with the same message ids, tags, keys, user properties and bodies.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from javakit import body_of, spec
from v2kit import v2_cluster

from orbitmq.client import Admin
from orbitmq.interop import java_client

pytestmark = pytest.mark.timeout(120)

CLI_TIMEOUT_S = 60.0


async def cli(*args: str) -> list[dict[str, Any]]:
    """``orbitmq <args> --json`` to its end (asyncio: the cluster on this loop keeps serving);
    its JSON lines, the summary last."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "orbitmq.cli.main", *args, "--json",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    stdout, stderr = await asyncio.wait_for(process.communicate(), CLI_TIMEOUT_S)
    assert process.returncode == 0, f"orbitmq {' '.join(args)}: exit {process.returncode}\n{stderr.decode()}"
    return [json.loads(line) for line in stdout.decode().splitlines()]


async def test_cli_produce_is_consumed_by_the_java_push_consumer(tmp_path: Path) -> None:
    """orbitmq's producer (``orbitmq produce``) to the broker while a Java PushConsumer waits in
    long polling through the proxy: its ReceiveMessage wakes up with the body, TAGS as the tag,
    KEYS as keys, user properties, UNIQ_KEY as the message id and the producer's address as born
    host."""
    async with v2_cluster(tmp_path / "cluster") as cluster:
        async with Admin(cluster.namesrv.address) as admin:  # routed, so the consumer is assigned at once
            await admin.create_topic("JFromCli", read_queue_nums=4, write_queue_nums=4)
        async with java_client.JavaClient(
            tmp_path / "java", "push-consume", endpoint=cluster.endpoint, group="j-from-cli",
            topic="JFromCli", count=20, settle_ms=1_000, with_bodies=True,
        ) as consumer:  # fmt: skip
            await consumer.started()
            await asyncio.sleep(1.0)  # its receives are long polls waiting by now
            produced = await cli(
                "produce", "--namesrv", cluster.namesrv.address, "--topic", "JFromCli", "--count", "20",
                "--body", "cli-{i}", "--tag", "TagA", "--key", "k{i}", "--property", "color=red",
            )  # fmt: skip
            assert (produced[-1]["summary"]["sent"], produced[-1]["summary"]["failed"]) == (20, 0)
            consumed = await consumer.finish()
    sent_ids = {record["msg_id"]: i for i, record in enumerate(produced[:-1])}
    deliveries = consumed.of("consumed")
    assert sorted(e["message_id"] for e in deliveries) == sorted(sent_ids)
    for event in deliveries:
        i = sent_ids[event["message_id"]]
        assert body_of(event) == f"cli-{i}".encode()
        assert (event["tag"], event["keys"], event["properties"]) == ("TagA", [f"k{i}"], {"color": "red"})
        assert event["born_host"].startswith("127.0.0.1")
        assert (event["delivery_attempt"], event["corrupted"], event["result"]) == (1, False, "SUCCESS")


async def test_java_sends_are_consumed_by_the_cli(tmp_path: Path) -> None:
    """The Java Producer through the proxy (normal messages, a binary body, a timed one), then
    ``orbitmq consume`` from the broker: every message once, under the id the Java client gave
    it, with its tag, keys and user properties; the timed one only after its delivery time;
    messages of a message group (FIFO sends) read in order by ``orbitmq consume --orderly``."""
    binary = bytes(range(256))
    deliver_at_ms = int(time.time() * 1000) + 3_000
    messages = [
        spec("JToCli", f"java-{i}".encode(), tag="TagJ", keys=[f"j{i}"], properties={"n": str(i)})
        for i in range(10)
    ] + [
        spec("JToCli", binary, tag="TagBin"),
        spec("JToCli", b"timed", tag="TagT", delivery_timestamp_ms=deliver_at_ms),
    ]
    ordered = [spec("JToCliFifo", f"{g}:{i}".encode(), message_group=g) for i in range(5) for g in "xyz"]
    async with v2_cluster(tmp_path / "cluster") as cluster:
        sent = await java_client.run(
            tmp_path / "java", "send", endpoint=cluster.endpoint, messages=messages + ordered
        )
        assert (sent.summary["sent"], sent.summary["failed"]) == (len(messages) + len(ordered), 0)
        namesrv = ("--namesrv", cluster.namesrv.address, "--from", "first", "--idle-timeout", "20")
        read, read_ordered = await asyncio.gather(
            cli("consume", *namesrv, "--group", "cli-reader", "--topic", "JToCli", "--count", "12"),
            cli("consume", *namesrv, "--group", "cli-orderly", "--topic", "JToCliFifo", "--count", "15",
                "--orderly"),
        )  # fmt: skip
        read_at_ms = time.time() * 1000
    ids = [event["message_id"] for event in sent.of("sent")]
    records = {record["msg_id"]: record for record in read[:-1]}
    assert sorted(records) == sorted(ids[:12]), "each message once, under the Java client's id"
    for i in range(10):
        record = records[ids[i]]
        assert (record["body"], record["tags"], record["keys"]) == (f"java-{i}", "TagJ", [f"j{i}"])
        assert record["properties"] == {"n": str(i)}
    assert records[ids[10]]["body_encoding"] == "base64"
    assert base64.b64decode(records[ids[10]]["body"]) == binary
    assert (records[ids[11]]["body"], records[ids[11]]["tags"]) == ("timed", "TagT")
    assert read_at_ms >= deliver_at_ms
    by_group: dict[str, list[str]] = {}
    for record in read_ordered[:-1]:
        by_group.setdefault(record["body"].split(":")[0], []).append(record["body"])
    assert by_group == {g: [f"{g}:{i}" for i in range(5)] for g in "xyz"}
