"""A slave whose master died leaves nothing of the dead replication stream running: gRPC's
``cancel`` of a call that already failed does not stop the task reading its request generator,
and the slave's acks generator kept that task (and the call) waiting for good, one more for every
master lost, until it was destroyed pending ("Task was destroyed but it is pending!" in the
promoted broker's log during ``orbitmq chaos``).

Real brokers in this process; the master is stopped without a word, as a SIGKILL leaves it.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import Cluster, eventually, start_cluster

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, brokers=())
    yield running
    await running.close()


def request_readers() -> list[asyncio.Task[object]]:
    """Tasks gRPC runs to read stream calls' request generators (the slave's acks here)."""
    return [
        t for t in asyncio.all_tasks() if "_consume_request_iterator" in repr(t.get_coro()) and not t.done()
    ]


async def test_a_lost_masters_replication_stream_leaves_no_task_behind(cluster: Cluster) -> None:
    await cluster.start_broker("a-master", broker_name="broker-a", broker_role="ASYNC_MASTER")
    await cluster.start_broker("a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1)
    master = cluster.brokers["a-master"].broker
    slave = cluster.brokers["a-slave"].broker
    replication = slave.replication
    assert replication is not None
    await eventually(replication.connected.is_set, 10, lambda: "the slave's stream to its master")
    assert len(request_readers()) == 1  # the live stream's

    await master.grpc.stop(0)  # gone without a word: the stream fails
    await eventually(lambda: not replication.connected.is_set(), 10, lambda: "the slave saw it")
    await asyncio.sleep(0.5)
    assert request_readers() == [], "the dead stream's acks reader is still waiting"
