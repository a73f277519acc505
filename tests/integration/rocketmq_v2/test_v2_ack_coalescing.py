"""AckMessage under concurrency: the official SimpleConsumer acks one message per call; acks of
one broker, group and topic that arrive while one is on its way go to the broker together
(``orbitmq.proxy.coalesce``, a broker AckMessage naming several receipt handles), and every
acked message stays acked: none comes back after its invisible duration."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from v2kit import call, message, official_producer, official_simple_consumer, v2_cluster

pytestmark = pytest.mark.timeout(120)

TOPIC = "V2AckCoalesce"
GROUP = "v2-ack-coalesce"
COUNT = 96


async def test_concurrent_acks_share_broker_calls_and_all_stay_acked(tmp_path: Path) -> None:
    async with v2_cluster(tmp_path) as cluster:
        async with official_producer(cluster.endpoint, [TOPIC]) as producer:
            for i in range(COUNT):
                await call(producer.send, message(TOPIC, f"m{i}".encode()))
        acks = cluster.proxy.servicer.consumers.acks
        async with official_simple_consumer(cluster.endpoint, GROUP, [TOPIC]) as consumer:
            received = []
            while len(received) < COUNT:
                got = await call(consumer.receive, 32, 3)
                assert got, f"only {len(received)} of {COUNT} received"
                received += got
            assert sorted(m.body for m in received) == sorted(f"m{i}".encode() for i in range(COUNT))
            calls_before, items_before = acks.calls, acks.items
            for start in range(0, COUNT, 32):  # 32 acks in flight, each a call of its own
                await asyncio.gather(*(call(consumer.ack, m) for m in received[start : start + 32]))
            assert acks.items - items_before == COUNT
            broker_calls = acks.calls - calls_before
            assert broker_calls < COUNT, f"{broker_calls} broker calls for {COUNT} concurrent acks"
            await asyncio.sleep(3.5)  # past the invisible duration: anything not acked is back
            assert await call(consumer.receive, 32, 3) == []
        assert await cluster.metric("orbitmq_proxy_requests_total", rpc="AckMessage", code="OK") >= COUNT
    print(f"\n{COUNT} official acks: {broker_calls} broker AckMessage calls")
