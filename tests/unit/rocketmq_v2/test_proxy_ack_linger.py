"""The proxy's ack coalescing under load (``orbitmq.proxy.coalesce``): a lone ack goes at once,
while acks that keep arriving as calls are on their way linger and share fewer, larger calls."""

from __future__ import annotations

import asyncio
import time

import pytest

from orbitmq.proxy.coalesce import Coalescer

pytestmark = pytest.mark.timeout(10)

CALL_S = 0.003
"""A broker call's round trip in these tests."""


class Broker:
    """Answers each batch after :data:`CALL_S` with one result per item, keeping the batches."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    async def ack(self, key: str, items: list[int]) -> list[int]:
        self.batches.append(items)
        await asyncio.sleep(CALL_S)
        return [item * 10 for item in items]


async def _steady_acks(coalescer: Coalescer[str, int, int], count: int, every_s: float) -> list[int]:
    """``count`` acks arriving one every ``every_s`` (a client with acks outstanding)."""

    async def one(item: int) -> int:
        await asyncio.sleep(item * every_s)
        return await coalescer.submit("broker-a/group/topic", item)

    return await asyncio.gather(*(one(i) for i in range(count)))


async def test_a_lone_ack_waits_for_nothing() -> None:
    broker = Broker()
    coalescer: Coalescer[str, int, int] = Coalescer(broker.ack, max_items=32, linger_s=0.5)
    started = time.monotonic()
    assert await coalescer.submit("broker-a/group/topic", 7) == 70
    assert time.monotonic() - started < 0.25  # far less than the linger
    assert broker.batches == [[7]]
    await coalescer.close()


async def test_acks_under_load_linger_into_fewer_calls_each_with_its_own_result() -> None:
    without, lingering = Broker(), Broker()
    plain: Coalescer[str, int, int] = Coalescer(without.ack, max_items=32, linger_s=0)
    patient: Coalescer[str, int, int] = Coalescer(lingering.ack, max_items=32, linger_s=0.01)
    assert await _steady_acks(plain, 200, 0.0005) == [i * 10 for i in range(200)]
    assert await _steady_acks(patient, 200, 0.0005) == [i * 10 for i in range(200)]
    assert sorted(i for batch in lingering.batches for i in batch) == list(range(200))
    assert max(len(batch) for batch in lingering.batches) <= 32
    assert len(lingering.batches) < len(without.batches) / 1.5, (len(lingering.batches), len(without.batches))
    await plain.close()
    await patient.close()
