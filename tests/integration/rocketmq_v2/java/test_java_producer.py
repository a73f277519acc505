"""The official RocketMQ 5 Java client's Producer through ``orbitmq proxy``: normal, FIFO, timed
and transactional sends, read back with orbitmq's own pull consumer.

Each test names the protocol behaviour it checks. Bodies and properties must arrive
byte-identical, and the message id the Java client generated must be the one orbitmq stores
(``UNIQ_KEY``), so both sides name a message alike.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from javakit import sha256, spec
from v2kit import V2Cluster, assert_message_groups_in_order, v2_cluster

from orbitmq.common.topics import split_keys
from orbitmq.interop import java_client

pytestmark = pytest.mark.timeout(120)

BINARY = bytes(range(256)) * 3 + b"\x00end"
"""A body with every byte value, NULs included: what is sent is what is read."""


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[V2Cluster]:
    # Check-backs start 1.5 s after a half message is stored: later than a test's own commit or
    # rollback, soon enough for the check-back test.
    async with v2_cluster(
        tmp_path / "cluster", transaction_timeout_ms=1_500, transaction_check_interval_ms=200
    ) as running:
        yield running


async def test_send_normal_keeps_body_tag_keys_properties_and_message_id(
    cluster: V2Cluster, tmp_path: Path
) -> None:
    """SendMessage (NORMAL) from the Java client: QueryRoute, Telemetry settings, then the sends
    (8 in flight); orbitmq stores each body byte for byte, the tag as TAGS, keys as KEYS, user
    properties as they are and the client's message id as UNIQ_KEY; the receipt's offset is the
    queue offset."""
    messages = [
        spec("JNormal", BINARY + bytes([i]), tag="TagA", keys=["order-1", f"k{i}"], properties={"n": str(i)})
        for i in range(20)
    ]
    events = await java_client.run(
        tmp_path / "java", "send", endpoint=cluster.endpoint, topic="JNormal", in_flight=8, messages=messages
    )
    assert (events.summary["sent"], events.summary["failed"]) == (20, 0)
    receipts = {event["message_id"]: event for event in events.of("sent")}
    received = await cluster.receive("JNormal", 20)
    assert sorted(m.body for m in received) == sorted(BINARY + bytes([i]) for i in range(20))
    assert {m.properties["UNIQ_KEY"] for m in received} == set(receipts)
    for stored in received:
        i = stored.body[-1]
        receipt = receipts[stored.properties["UNIQ_KEY"]]
        assert receipt["index"] == i
        assert receipt["offset"] == stored.queue_offset  # the queue is the proxy's pick, as in RocketMQ
        assert stored.properties["TAGS"] == "TagA"
        assert set(split_keys(stored.properties["KEYS"])) == {"order-1", f"k{i}"}
        assert stored.properties["n"] == str(i)


async def test_send_fifo_keeps_each_message_group_in_one_queue_in_order(
    cluster: V2Cluster, tmp_path: Path
) -> None:
    """SendMessage (FIFO) from the Java client: the messages of one message group go to one
    queue in send order (the group is the sharding key), stored as ``__SHARDINGKEY``."""
    groups = ["g-alpha", "g-beta", "g-gamma"]
    messages = [spec("JFifo", f"{g}:{seq}".encode(), message_group=g) for seq in range(10) for g in groups]
    events = await java_client.run(tmp_path / "java", "send", endpoint=cluster.endpoint, messages=messages)
    assert events.summary["sent"] == 30
    received = await cluster.receive("JFifo", 30)
    assert len(received) == 30
    assert_message_groups_in_order(received, groups, 10)


async def test_send_delay_is_delivered_at_its_delivery_timestamp(cluster: V2Cluster, tmp_path: Path) -> None:
    """SendMessage (DELAY) from the Java client, whose delivery timestamp has milliseconds (the
    Python client's has whole seconds): invisible until then, delivered by the broker's timer at
    that time (never early, within its precision after), the timestamp kept to the millisecond."""
    deliver_at_ms = int(time.time() * 1000) + 4_000 + 321
    messages = [spec("JDelay", b"later", tag="timer", keys=["d-1"], delivery_timestamp_ms=deliver_at_ms)]
    events = await java_client.run(tmp_path / "java", "send", endpoint=cluster.endpoint, messages=messages)
    assert events.summary["sent"] == 1
    assert await cluster.receive("JDelay", 1, within_s=0.3) == [], "visible before its time"
    received = await cluster.receive("JDelay", 1, within_s=15)
    assert [m.body for m in received] == [b"later"]
    stored = received[0]
    late_ms = stored.store_timestamp_ms - deliver_at_ms
    assert late_ms >= 0, "delivered before its timestamp"
    assert late_ms <= cluster.broker.broker.settings.timer_precision_ms + 200, f"{late_ms} ms late"
    assert stored.properties["TIMER_DELIVER_MS"] == str(deliver_at_ms)
    assert (stored.properties["TAGS"], stored.properties["KEYS"]) == ("timer", "d-1")
    assert stored.properties["UNIQ_KEY"] == events.of("sent")[0]["message_id"]


async def test_transactions_commit_rollback_and_check_back(cluster: V2Cluster, tmp_path: Path) -> None:
    """SendMessage (TRANSACTION) and EndTransaction from the Java client: a committed half
    message reaches its topic, a rolled-back one never does (and is not checked back), and one
    left open is checked back: the proxy pushes RecoverOrphanedTransactionCommand on the
    producer's Telemetry stream with the message as sent, the Java checker answers COMMIT, and
    it becomes visible."""
    committed = await java_client.run(
        tmp_path / "java", "send", name="commit", endpoint=cluster.endpoint, topic="JTx",
        transaction="commit", check="rollback",  # a check-back would lose it
        messages=[spec("JTx", BINARY, tag="tx", keys=["tx-1"], properties={"step": "pay"})],
    )  # fmt: skip
    rolled_back = await java_client.run(
        tmp_path / "java", "send", name="rollback", endpoint=cluster.endpoint, topic="JTx",
        transaction="rollback", check="commit",  # a check-back would wrongly publish it
        messages=[spec("JTx", b"never")],
    )  # fmt: skip
    orphaned = await java_client.run(
        tmp_path / "java", "send", name="orphan", endpoint=cluster.endpoint, topic="JTx",
        transaction="open", check="commit", await_checks=1, checks_within_ms=20_000,
        messages=[spec("JTx", b"orphan", tag="t", keys=["c-1"], properties={"why": "crash"})],
    )  # fmt: skip
    received = await cluster.receive("JTx", 2, within_s=10)
    assert sorted(m.body for m in received) == sorted([BINARY, b"orphan"])
    by_body = {m.body: m for m in received}
    commit_receipt = committed.of("sent")[0]
    assert commit_receipt["transaction_id"]
    assert by_body[BINARY].properties["UNIQ_KEY"] == commit_receipt["message_id"]
    assert (by_body[BINARY].properties["TAGS"], by_body[BINARY].properties["step"]) == ("tx", "pay")
    assert "TRAN_MSG" not in by_body[BINARY].properties
    assert committed.of("checked") == [] and rolled_back.of("checked") == []

    [asked] = orphaned.of("checked")[:1]
    orphan_id = orphaned.of("sent")[0]["message_id"]
    assert (asked["topic"], asked["message_id"]) == ("JTx", orphan_id)
    assert asked["body_sha256"] == sha256(b"orphan")
    assert (asked["tag"], asked["keys"], asked["properties"].get("why")) == ("t", ["c-1"], "crash")
    assert by_body[b"orphan"].properties["UNIQ_KEY"] == orphan_id
    assert await cluster.metric("orbitmq_proxy_transaction_checks_forwarded_total") >= 1
