"""Sends through the proxy under concurrency: the official clients send one message per call, and
the proxy's producer coalesces those that arrive while a call of their topic (NORMAL) or queue
(FIFO) is on its way into one batch call (``orbitmq.client.accumulator``). Each message still
gets its own receipt naming where it was stored, FIFO groups keep their order, and a lone send
goes at once, alone."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from v2kit import V2Cluster, call, message, official_producer, v2_cluster

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[V2Cluster]:
    async with v2_cluster(tmp_path) as running:
        yield running


def broker_calls(cluster: V2Cluster) -> int:
    """SendMessage calls the broker has answered."""
    return cluster.broker.broker.metrics.send_latency.count


async def test_official_async_sends_share_broker_calls_and_get_their_own_stored_offsets(
    cluster: V2Cluster,
) -> None:
    """64 outstanding ``send_async``: fewer broker calls than messages, and every receipt's
    offset is where orbitmq stored that message id, whether or not it went in a batch."""
    async with official_producer(cluster.endpoint, ["V2CoalesceOfficial"]) as producer:
        await call(producer.send, message("V2CoalesceOfficial", b"warm-up"))
        before = broker_calls(cluster)

        def send_all() -> list[object]:
            futures = [
                producer.send_async(message("V2CoalesceOfficial", f"m{i}".encode())) for i in range(64)
            ]
            return [f.result() for f in futures]

        receipts = await call(send_all)
        used = broker_calls(cluster) - before
    assert used < 64, f"{used} broker calls for 64 concurrent sends"
    stored = {m.properties["UNIQ_KEY"]: m for m in await cluster.receive("V2CoalesceOfficial", 65)}
    assert len(stored) == 65
    for i, receipt in enumerate(receipts):
        at = stored[receipt.message_id]  # type: ignore[attr-defined]
        assert at.queue_offset == receipt.offset  # type: ignore[attr-defined]
        assert at.body == f"m{i}".encode()


async def test_fifo_groups_sent_side_by_side_keep_their_order(cluster: V2Cluster) -> None:
    """Eight message groups, each sent one message at a time on its own thread: the groups'
    sends meet in the proxy's queue lanes, and each group stays in one queue, in send order,
    with every receipt naming its own offset."""
    groups = [f"g{n}" for n in range(8)]
    async with official_producer(cluster.endpoint, ["V2CoalesceFifo"]) as producer:

        def send_group(group: str) -> list[object]:
            receipts = []
            for seq in range(25):
                sent = message("V2CoalesceFifo", f"{group}:{seq}".encode())
                sent.message_group = group
                receipts.append(producer.send(sent))
            return receipts

        def send_all() -> list[list[object]]:
            with ThreadPoolExecutor(len(groups)) as pool:
                return list(pool.map(send_group, groups))

        receipts = await call(send_all)
    received = await cluster.receive("V2CoalesceFifo", 200)
    by_id = {m.properties["UNIQ_KEY"]: m for m in received}
    for group, mine in zip(groups, receipts, strict=True):
        stored = [by_id[r.message_id] for r in mine]  # type: ignore[attr-defined]
        assert [m.queue_offset for m in stored] == [r.offset for r in mine]  # type: ignore[attr-defined]
        assert len({m.queue_id for m in stored}) == 1, f"group {group} spread over queues"
        assert [m.queue_offset for m in stored] == sorted(m.queue_offset for m in stored)
        assert [m.body for m in stored] == [f"{group}:{seq}".encode() for seq in range(25)]


async def test_a_lone_send_goes_at_once_and_alone(cluster: V2Cluster) -> None:
    async with official_producer(cluster.endpoint, ["V2CoalesceLone"]) as producer:
        await call(producer.send, message("V2CoalesceLone", b"warm-up"))
        before = broker_calls(cluster)
        for i in range(5):
            await call(producer.send, message("V2CoalesceLone", f"b{i}".encode()))
        assert broker_calls(cluster) - before == 5


async def test_delayed_sends_go_alone_and_keep_their_delivery_time(cluster: V2Cluster) -> None:
    """Concurrent delayed sends are not coalesced (the broker puts each on its timer): a call
    each, a receipt each, and none readable before its time."""
    async with official_producer(cluster.endpoint, ["V2CoalesceDelay"]) as producer:
        await call(producer.send, message("V2CoalesceDelay", b"warm-up"))
        before = broker_calls(cluster)

        def send_all() -> list[object]:
            futures = []
            deliver_at_s = int(time.time()) + 3
            for i in range(8):
                sent = message("V2CoalesceDelay", f"d{i}".encode())
                sent.delivery_timestamp = deliver_at_s
                futures.append(producer.send_async(sent))
            return [f.result() for f in futures]

        receipts = await call(send_all)
        assert broker_calls(cluster) - before == 8
    assert len({r.message_id for r in receipts}) == 8  # type: ignore[attr-defined]
    assert len(await cluster.receive("V2CoalesceDelay", 2, within_s=1.0)) == 1  # the warm-up only
    late = await cluster.receive("V2CoalesceDelay", 9, within_s=20.0)
    assert sorted(m.body for m in late) == sorted([b"warm-up", *(f"d{i}".encode() for i in range(8))])
