"""The official Apache RocketMQ 5 Python producer against orbitmq (through ``orbitmq proxy``),
with orbitmq's own pull consumer reading what it sent.

Each test names the protocol behaviour it checks; bodies and properties must arrive
byte-identical, and the message id the client generated must be the one orbitmq stores
(``UNIQ_KEY``), so both sides name a message alike.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from v2kit import (
    Checker,
    TransactionResolution,
    V2Cluster,
    assert_message_groups_in_order,
    call,
    message,
    official_producer,
    v2_cluster,
)

from orbitmq.common.topics import split_keys
from orbitmq.rocketmq_v2 import definition_pb2 as v2

pytestmark = pytest.mark.timeout(90)

BINARY = bytes(range(256)) * 3 + b"\x00end"
"""A body with every byte value, NULs included: what is sent is what is read."""


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[V2Cluster]:
    # Check-backs start 1.5 s after a half message is stored: later than any test's own commit
    # or rollback, soon enough for the check-back test.
    async with v2_cluster(
        tmp_path, transaction_timeout_ms=1_500, transaction_check_interval_ms=200
    ) as running:
        yield running


async def test_send_message_normal_keeps_body_tag_keys_and_user_properties(cluster: V2Cluster) -> None:
    """SendMessage (NORMAL): QueryRoute, Telemetry settings, then the send; orbitmq stores the
    body byte for byte, the tag as TAGS, keys as KEYS, user properties as they are, and the
    client's message id as UNIQ_KEY; the receipt's offset is the queue offset."""
    async with official_producer(cluster.endpoint, ["V2Normal"]) as producer:
        receipts = []
        for i in range(3):
            sent = message(
                "V2Normal", BINARY + bytes([i]), tag="TagA", keys=("order-1", f"k{i}"), color="red", n=str(i)
            )
            receipts.append(await call(producer.send, sent))
        # the settings on the telemetry stream say what the client is: that may trail the sends
        deadline = time.monotonic() + 5
        while await cluster.metric("orbitmq_proxy_clients", client_type="PRODUCER") != 1:
            assert time.monotonic() < deadline, "the producer never showed in orbitmq_proxy_clients"
            await asyncio.sleep(0.05)
    assert await cluster.metric("orbitmq_proxy_requests_total", rpc="SendMessage", code="OK") == 3
    assert await cluster.metric("orbitmq_proxy_clients", client_type="PRODUCER") == 0, "gone after shutdown"
    received = await cluster.receive("V2Normal", 3)
    assert sorted(m.body for m in received) == sorted(BINARY + bytes([i]) for i in range(3))
    by_id = {m.properties["UNIQ_KEY"]: m for m in received}
    assert set(by_id) == {r.message_id for r in receipts}
    for receipt in receipts:
        stored = by_id[receipt.message_id]
        i = stored.body[-1]
        assert stored.properties["TAGS"] == "TagA"
        assert set(split_keys(stored.properties["KEYS"])) == {"order-1", f"k{i}"}
        assert stored.properties["color"] == "red" and stored.properties["n"] == str(i)
        assert stored.queue_offset == receipt.offset
        assert receipt.transaction_id in (None, "")


async def test_send_message_fifo_message_group_keeps_order_in_one_queue(cluster: V2Cluster) -> None:
    """SendMessage (FIFO): messages of one message group go to one queue in send order (the
    group is the sharding key), and the group is stored as ``__SHARDINGKEY``."""
    groups = ["g-alpha", "g-beta", "g-gamma"]
    async with official_producer(cluster.endpoint, ["V2Fifo"]) as producer:
        for seq in range(10):
            for group in groups:
                sent = message("V2Fifo", f"{group}:{seq}".encode(), tag="fifo")
                sent.message_group = group
                await call(producer.send, sent)
    received = await cluster.receive("V2Fifo", 30)
    assert len(received) == 30
    assert_message_groups_in_order(received, groups, 10)


async def test_send_message_delay_is_delivered_at_its_delivery_timestamp(cluster: V2Cluster) -> None:
    """SendMessage (DELAY): a message with a delivery timestamp is invisible until then, and the
    broker's timer delivers it at that time (never early, within its precision after). The
    official Python client sends whole seconds (it sets ``Timestamp.seconds``)."""
    async with official_producer(cluster.endpoint, ["V2Delay"]) as producer:
        sent = message("V2Delay", b"later", tag="timer", keys=("d-1",))
        deliver_at_s = int(time.time()) + 2
        sent.delivery_timestamp = deliver_at_s
        await call(producer.send, sent)
    assert await cluster.receive("V2Delay", 1, within_s=0.5) == []
    received = await cluster.receive("V2Delay", 1, within_s=15)
    assert [m.body for m in received] == [b"later"]
    stored = received[0]
    late_ms = stored.store_timestamp_ms - deliver_at_s * 1000
    assert late_ms >= 0, "delivered before its timestamp"
    assert late_ms <= cluster.broker.broker.settings.timer_precision_ms + 200, f"{late_ms} ms late"
    assert stored.properties["TIMER_DELIVER_MS"] == str(deliver_at_s * 1000)
    assert (stored.properties["TAGS"], stored.properties["KEYS"]) == ("timer", "d-1")


async def test_send_message_delay_beyond_the_timer_maximum_is_refused(cluster: V2Cluster) -> None:
    """SendMessage (DELAY) further ahead than the timer's 3 days: ILLEGAL_DELIVERY_TIME, nothing stored."""
    async with official_producer(cluster.endpoint, ["V2DelayFar"]) as producer:
        sent = message("V2DelayFar", b"too far")
        sent.delivery_timestamp = int(time.time()) + 3 * 86_400 + 60
        with pytest.raises(Exception, match="beyond the longest timer delay") as refused:
            await call(producer.send, sent)
        assert str(refused.value).startswith(f"{v2.ILLEGAL_DELIVERY_TIME},")
    assert cluster.broker.broker.timer.pending == 0


async def test_end_transaction_commit_makes_the_half_message_visible(cluster: V2Cluster) -> None:
    """SendMessage (TRANSACTION) stores a half message nobody sees; EndTransaction COMMIT puts it
    on its topic with its body and properties."""
    checker = Checker(TransactionResolution.ROLLBACK)  # a check-back would lose the message
    async with official_producer(cluster.endpoint, ["V2TxCommit"], checker) as producer:
        transaction = await call(producer.begin_transaction)
        receipt = await call(
            producer.send, message("V2TxCommit", BINARY, tag="tx", keys=("tx-1",), step="pay"), transaction
        )
        assert receipt.transaction_id
        assert await cluster.receive("V2TxCommit", 1, within_s=0.5) == []
        await call(transaction.commit)
        received = await cluster.receive("V2TxCommit", 1)
    assert [m.body for m in received] == [BINARY]
    assert received[0].properties["UNIQ_KEY"] == receipt.message_id
    assert (received[0].properties["TAGS"], received[0].properties["step"]) == ("tx", "pay")
    assert "TRAN_MSG" not in received[0].properties
    assert checker.asked == []


async def test_end_transaction_rollback_discards_the_half_message(cluster: V2Cluster) -> None:
    """EndTransaction ROLLBACK: the half message never reaches its topic, and is not checked
    back later (the broker recorded the outcome)."""
    checker = Checker(TransactionResolution.COMMIT)  # a check-back would wrongly publish it
    async with official_producer(cluster.endpoint, ["V2TxRollback"], checker) as producer:
        transaction = await call(producer.begin_transaction)
        await call(producer.send, message("V2TxRollback", b"never"), transaction)
        await call(transaction.rollback)
        sent = await call(producer.send, message("V2TxRollback", b"plain"))  # the topic works
        received = await cluster.receive("V2TxRollback", 2, within_s=3.0)  # past the check-back time
    assert [m.body for m in received] == [b"plain"]
    assert received[0].properties["UNIQ_KEY"] == sent.message_id
    assert checker.asked == []


async def test_telemetry_recover_orphaned_transaction_asks_the_checker_and_applies_its_answer(
    cluster: V2Cluster,
) -> None:
    """A half message left unresolved is checked back: the broker asks the proxy, the proxy
    pushes RecoverOrphanedTransactionCommand on the producer's Telemetry stream with the
    message as sent, the client's checker answers COMMIT through EndTransaction
    (SOURCE_SERVER_CHECK), and the message becomes visible."""
    checker = Checker(TransactionResolution.COMMIT)
    async with official_producer(cluster.endpoint, ["V2TxCheck"], checker) as producer:
        transaction = await call(producer.begin_transaction)
        receipt = await call(
            producer.send, message("V2TxCheck", b"orphan", tag="t", keys=("c-1",), why="crash"), transaction
        )
        received = await cluster.receive("V2TxCheck", 1, within_s=20)
    assert [m.body for m in received] == [b"orphan"]
    assert received[0].properties["UNIQ_KEY"] == receipt.message_id
    assert len(checker.asked) >= 1
    assert await cluster.metric("orbitmq_proxy_transaction_checks_forwarded_total") >= 1
    asked = checker.asked[0]
    assert (asked.topic, asked.body, asked.message_id) == ("V2TxCheck", b"orphan", receipt.message_id)
    assert (asked.tag, set(asked.keys), asked.properties.get("why")) == ("t", {"c-1"}, "crash")
    await asyncio.sleep(0)  # nothing else pending


async def test_resource_namespace_maps_to_a_prefixed_orbitmq_topic(cluster: V2Cluster) -> None:
    """Resource namespaces: a client configured with namespace ``tenant1`` publishes topic ``T``
    as orbitmq topic ``tenant1%T`` (RocketMQ's wrapping), also for transactions and their
    check-backs, so tenants sharing a cluster do not share topics."""
    checker = Checker(TransactionResolution.COMMIT)
    async with official_producer(cluster.endpoint, ["V2Tenant"], checker, namespace="tenant1") as producer:
        await call(producer.send, message("V2Tenant", b"plain"))
        transaction = await call(producer.begin_transaction)
        await call(producer.send, message("V2Tenant", b"checked"), transaction)
        received = await cluster.receive("tenant1%V2Tenant", 2, within_s=20)
    assert sorted(m.body for m in received) == [b"checked", b"plain"]
    assert await cluster.receive("V2Tenant", 1, within_s=0.3) == []
    assert [(m.topic, m.namespace) for m in checker.asked[:1]] == [("V2Tenant", "tenant1")]


async def test_send_message_rides_out_a_broker_restart_behind_the_proxy(cluster: V2Cluster) -> None:
    """SendMessage while the only broker restarts: the proxy's orbitmq producer retries on fresh
    routes within the client's deadline, so the official client gets a receipt (RocketMQ 5
    clients only know the proxy's endpoint; failover is the proxy's job)."""
    async with official_producer(cluster.endpoint, ["V2Restart"]) as producer:
        await call(producer.send, message("V2Restart", b"before"))
        address = await cluster.stop_broker()
        during = asyncio.ensure_future(call(producer.send, message("V2Restart", b"during")))
        await asyncio.sleep(0.5)
        assert not during.done(), "the send should wait for the broker, not fail at once"
        await cluster.start_broker(address)
        receipt = await asyncio.wait_for(during, 15)
        received = await cluster.receive("V2Restart", 2)
    assert {b"before", b"during"} <= {m.body for m in received}
    assert receipt.message_id in {m.properties["UNIQ_KEY"] for m in received}
