"""An application's delivery stream whose sidecar died leaves nothing running behind it: gRPC's
``cancel`` of a call that already failed does not stop the task reading the stream's requests,
and ``SidecarClient.deliveries`` left it waiting for answers for good, one more task at every
reconnection (``orbitmq chaos``: "Task was destroyed but it is pending" at exit after its
sidecar faults)."""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
sys.path.insert(0, str(Path(__file__).parent))
from clusterkit import Cluster, start_cluster
from test_sidecar import produce, start_sidecar

from orbitmq.client import Admin
from orbitmq.sidecar.client import SidecarClient

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path)
    async with Admin(running.address) as admin:
        await admin.create_topic("Work", read_queue_nums=2, write_queue_nums=2)
    yield running
    await running.close()


def request_readers() -> list[asyncio.Task[object]]:
    return [
        t for t in asyncio.all_tasks() if "_consume_request_iterator" in repr(t.get_coro()) and not t.done()
    ]


async def test_a_stream_whose_sidecar_died_leaves_no_task_behind(cluster: Cluster) -> None:
    await produce(cluster, 0, 1)
    sidecar = await start_sidecar(cluster, "Reconnect", "--subscribe", "Work", name="r1")
    async with SidecarClient(sidecar.address) as client:
        for _ in range(3):  # an application's loop: open the stream again after each failure
            try:
                async for delivery in client.deliveries(app_id="r1"):
                    await delivery.ack()
                    sidecar.signal(signal.SIGKILL)
            except grpc.aio.AioRpcError:
                pass
            if sidecar.process.poll() is not None:
                break
        await sidecar.wait()
        await asyncio.sleep(0.5)
        assert request_readers() == [], "a dead stream's request reader is still waiting"
