"""A client's channel replaced after a broker came back is closed once its calls end (found
by ``orbitmq bench soak``: a disk-full episode left ten more sockets in the proxy, the sidecar
and the broker for good, one per probe that saw the broker answer again)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
from brokerkit import start_broker, stop_broker

from orbitmq.client.channels import Channels
from orbitmq.v1 import broker_pb2, common_pb2

pytestmark = pytest.mark.timeout(60)


def _sockets() -> int:
    """Sockets open in this process (the client's connections and the in-process broker's)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            continue
    return count


async def test_channels_replaced_by_reconnect_close_and_their_connections_go(tmp_path: Path) -> None:
    running = await start_broker(tmp_path / "broker")
    address = running.broker.address
    channels = Channels("127.0.0.1:1")
    heartbeat = broker_pb2.HeartbeatRequest(client_id="reconnecting")
    try:
        await channels.broker(address).Heartbeat(heartbeat, timeout=5)
        await asyncio.sleep(0.2)
        before = _sockets()
        for _ in range(20):  # as a producer's probe does each time a set-aside broker answers
            channels.reconnect(address)
            await channels.broker(address).Heartbeat(heartbeat, timeout=5)
        for _ in range(50):
            if _sockets() <= before + 2:
                break
            await asyncio.sleep(0.1)
        assert _sockets() <= before + 2, f"{_sockets() - before} sockets more after 20 reconnects"
        # a call in flight on a replaced channel is not cut: its long poll ends on its own
        config = common_pb2.TopicConfig(topic_name="Reconnect", read_queue_nums=1, write_queue_nums=1)
        await channels.broker(address).CreateTopic(broker_pb2.CreateTopicRequest(topic=config), timeout=5)
        pull = channels.broker(address).PullMessage(
            broker_pb2.PullMessageRequest(
                consumer_group="g", topic="Reconnect", queue_id=0, max_msg_nums=1, suspend_timeout_ms=1_000
            ),
            timeout=5,
        )
        started = asyncio.get_running_loop().time()
        await asyncio.sleep(0.1)
        channels.reconnect(address)
        assert (await pull).status == broker_pb2.NO_NEW_MSG
        assert asyncio.get_running_loop().time() - started >= 0.9  # held its whole second
    finally:
        await channels.close()
        await stop_broker(running)
