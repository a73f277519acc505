"""A client that goes away mid-stream leaves no task behind on the server (found by
``orbitmq bench soak --churn``: every RocketMQ 5 client that shut down left one pending
``Queue.get`` task in the proxy, freed only by a full garbage collection and logged as
"Task was destroyed but it is pending!")."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "rocketmq_v2"))
from v2kit import v2_cluster

from orbitmq.rocketmq_v2 import definition_pb2 as d
from orbitmq.rocketmq_v2 import service_pb2 as s
from orbitmq.rocketmq_v2 import service_pb2_grpc

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def no_collection() -> Iterator[None]:
    """Cyclic garbage collection off, so a task left pending stays visible (a collection would
    destroy it, pending, a moment later)."""
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _queue_getters() -> list[asyncio.Task[object]]:
    return [
        t
        for t in asyncio.all_tasks()
        if not t.done() and getattr(t.get_coro(), "__qualname__", "") == "Queue.get"
    ]


async def test_a_telemetry_stream_cancelled_by_its_client_leaves_no_pending_task(
    tmp_path: Path, no_collection: None
) -> None:
    async with v2_cluster(tmp_path) as cluster:
        before = len(_queue_getters())
        async with grpc.aio.insecure_channel(cluster.endpoint) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            for n in range(5):
                call = stub.Telemetry(metadata=(("x-mq-client-id", f"leaver-{n}"),))
                await call.write(s.TelemetryCommand(settings=d.Settings(client_type=d.PRODUCER)))
                assert (await asyncio.wait_for(call.read(), 10)).status.code == d.OK
                call.cancel()  # as a client's shutdown closes its channel
        for _ in range(50):
            if len(cluster.proxy.clients) == 0:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.2)
        assert len(cluster.proxy.clients) == 0
        assert len(_queue_getters()) == before, [repr(t) for t in _queue_getters()]
