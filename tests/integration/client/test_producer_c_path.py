"""A producer's everyday sends take the broker's C path (``orbitmq.native.scan_send``).

The broker stores whatever the scanner leaves to its Python path just as well, only at several
times the CPU a message, so a producer whose requests the scanner stopped taking (a property it
added, a framing change) would show nowhere but in a benchmark. Real name server, real broker,
the public Producer: one call at a time, coalesced calls, and a batch.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
from brokerkit import RunningBroker, start_broker, stop_broker

from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.native import NATIVE

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(NATIVE is None, reason="orbitmq._native is not built (or turned off)"),
]


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[tuple[str, RunningBroker]]:
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None))
    await namesrv.start()
    running = await start_broker(tmp_path / "a", namesrv=namesrv.address, broker_name="broker-a")
    yield namesrv.address, running
    await stop_broker(running)
    await namesrv.close()


def _everyday(n: int) -> Message:
    """What applications send: tags, one key or several, properties of their own."""
    return Message(
        "CPath",
        f"body {n}".encode(),
        tags=f"Tag{n % 3}",
        keys=[f"order-{n}", f"user-{n % 7}"] if n % 2 else f"order-{n}",
        properties={"region": "eu", "attempt": str(n)} if n % 4 else {},
    )


async def test_everyday_sends_take_the_c_path(broker: tuple[str, RunningBroker]) -> None:
    namesrv, running = broker
    servicer = running.broker.servicer
    async with Producer("c-path", namesrv, auto_batch=False) as one_by_one:
        for n in range(4):
            await one_by_one.send(_everyday(n))
    async with Producer("c-path-coalesced", namesrv) as coalescing:
        await asyncio.gather(*(coalescing.send(_everyday(n)) for n in range(4, 68)))
        await coalescing.send_batch([_everyday(n) for n in range(68, 100)])
    assert servicer.python_path_sends == 0

    async with Producer("c-path-delayed", namesrv) as delayed:  # the counter counts
        message = _everyday(100)
        message.delay_level = 1
        await delayed.send(message)
    assert servicer.python_path_sends == 1
