"""The proxy's send coalescing (``orbitmq.proxy.coalesce``): NORMAL sends that arrive while one
of their topic is on its way to the broker go together as one batch, and each still gets its
own receipt naming where it was stored."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from v2kit import V2Cluster, call, message, official_producer, v2_cluster

from orbitmq.client.message import Message
from orbitmq.proxy.coalesce import SendCoalescer

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[V2Cluster]:
    async with v2_cluster(tmp_path) as running:
        yield running


async def test_concurrent_sends_share_broker_calls_and_each_result_names_its_own_offset(
    cluster: V2Cluster,
) -> None:
    coalescer = SendCoalescer(cluster.proxy.producer)
    sent = [
        Message("V2Coalesce", f"body-{i}".encode(), system_properties={"UNIQ_KEY": f"id-{i}"})
        for i in range(60)
    ]
    results = await asyncio.gather(*(coalescer.send(m) for m in sent))
    assert coalescer.messages == 60
    assert coalescer.batches < 30, f"{coalescer.batches} broker calls for 60 concurrent sends"
    stored = {(m.queue_id, m.queue_offset): m for m in await cluster.receive("V2Coalesce", 60)}
    assert len(stored) == 60
    for i, result in enumerate(results):
        assert result.status.value == "SEND_OK"
        assert result.msg_id == f"id-{i}"
        at = stored[result.queue_id, result.queue_offset]
        assert at.body == f"body-{i}".encode() and at.properties["UNIQ_KEY"] == f"id-{i}"


async def test_a_lone_send_goes_at_once_and_alone(cluster: V2Cluster) -> None:
    coalescer = SendCoalescer(cluster.proxy.producer)
    for i in range(5):
        await coalescer.send(Message("V2CoalesceLone", f"b{i}".encode()))
    assert (coalescer.batches, coalescer.messages) == (5, 5)


async def test_bad_bounds_and_delayed_messages_are_refused(cluster: V2Cluster) -> None:
    with pytest.raises(ValueError, match="max_in_flight must be at least 1, not 0"):
        SendCoalescer(cluster.proxy.producer, max_in_flight=0)
    for delayed in (
        Message("V2CoalesceLone", b"x", delay_level=3),
        Message("V2CoalesceLone", b"x", delay_ms=5_000),
    ):
        with pytest.raises(ValueError, match=r"delayed message \(V2CoalesceLone\) is not coalesced"):
            await SendCoalescer(cluster.proxy.producer).send(delayed)


async def test_official_async_sends_through_the_proxy_get_their_own_stored_offsets(
    cluster: V2Cluster,
) -> None:
    """SendMessage under concurrency (``send_async``, 64 outstanding): every receipt's offset
    is where orbitmq stored that message id, whether or not the proxy sent it in a batch."""
    async with official_producer(cluster.endpoint, ["V2CoalesceOfficial"]) as producer:

        def send_all() -> list[object]:
            futures = [
                producer.send_async(message("V2CoalesceOfficial", f"m{i}".encode())) for i in range(64)
            ]
            return [f.result() for f in futures]

        receipts = await call(send_all)
    stored = {m.properties["UNIQ_KEY"]: m for m in await cluster.receive("V2CoalesceOfficial", 64)}
    assert len(stored) == 64
    for receipt in receipts:
        assert stored[receipt.message_id].queue_offset == receipt.offset  # type: ignore[attr-defined]
