"""A running producer and a broker process SIGKILLed and restarted on the same port and data:
the producer's sends reach the broker again within seconds of its return (a failure used to set
it aside for 10 minutes, so a two-group cluster ran on half its capacity)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
from brokerkit import broker_process

from orbitmq.client.admin import Admin
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings

pytestmark = pytest.mark.timeout(120)

TOPIC = "Restarted"
BACK_WITHIN_S = 5.0
DOWN_S = 3.0
"""How long the broker stays down (the kubelet restarted a killed master in about 3 s): several
failed sends and probes, and a reconnect backoff that has grown."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def _send_forever(producer: Producer, placed: list[tuple[float, str]]) -> None:
    """One send every 50 ms, noting when each was stored and on which broker."""
    i = 0
    while True:
        result = await producer.send(Message(TOPIC, f"{i}".encode()))
        placed.append((time.monotonic(), result.broker_name))
        i += 1
        await asyncio.sleep(0.05)


async def _wait_for(placed: list[tuple[float, str]], broker: str, after: float, within_s: float) -> float:
    """Seconds from ``after`` to the first send stored on ``broker`` after it; fails after
    ``within_s`` more."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        late = [t for t, name in placed if name == broker and t > after]
        if late:
            return late[0] - after
        await asyncio.sleep(0.05)
    names = sorted({name for t, name in placed if t > after})
    pytest.fail(f"no send reached {broker} within {within_s} s of {after:.1f}; sends went to {names}")


async def _create_topic_on_both(namesrv: str) -> None:
    """The topic on both brokers before the first send, so every route names both."""
    async with Admin(namesrv) as admin:
        deadline = time.monotonic() + 15
        while len(await admin.masters()) < 2:
            assert time.monotonic() < deadline, "the two brokers did not register"
            await asyncio.sleep(0.1)
        await admin.create_topic(TOPIC)


async def test_sends_reach_a_broker_again_soon_after_it_restarts(tmp_path: Path) -> None:
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None))
    await namesrv.start()
    settings = {"namesrv": namesrv.address}
    listen_a = f"127.0.0.1:{_free_port()}"
    placed: list[tuple[float, str]] = []
    try:
        async with (
            broker_process(tmp_path / "b", "broker-b", settings=settings),
            Producer("PG", namesrv.address) as producer,
        ):
            async with broker_process(tmp_path / "a", "broker-a", settings=settings, listen=listen_a) as (
                _,
                _,
                process,
            ):
                await _create_topic_on_both(namesrv.address)
                sender = asyncio.create_task(_send_forever(producer, placed))
                await _wait_for(placed, "broker-a", 0, 15)
                process.kill()  # SIGKILL: no unregistering, the route still names it
                killed = time.monotonic()
            await asyncio.sleep(DOWN_S)  # sends meanwhile fail over to broker-b
            assert not sender.done()
            assert [n for t, n in placed if t > killed + 1.0] and all(
                n == "broker-b" for t, n in placed if t > killed + 1.0
            )
            async with broker_process(tmp_path / "a", "broker-a", settings=settings, listen=listen_a):
                returned = time.monotonic()
                back_after_s = await _wait_for(placed, "broker-a", returned, 15)
                print(f"sends reached the restarted broker {back_after_s:.2f} s after its return")
                assert not sender.done()
                sender.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sender
            assert back_after_s < BACK_WITHIN_S
    finally:
        await namesrv.close()
