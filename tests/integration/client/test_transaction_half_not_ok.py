"""A half message the broker stored without ``SEND_OK`` is rolled back without running the local
transaction, as RocketMQ's producer does: a ``SYNC_MASTER`` with no slave answers
``SLAVE_NOT_AVAILABLE`` (only the master has the half; a failover may lose it), and committing
would tie the application's work to a message that may vanish (``orbitmq chaos`` counted
hundreds of such halves whose local transactions had run and committed during slave restarts).

A real name server and a ``SYNC_MASTER`` broker without a slave, in this process.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
sys.path.insert(0, str(Path(__file__).parent))
from clusterkit import Cluster, eventually, start_cluster

from orbitmq.client import (
    Admin,
    Message,
    SendStatus,
    StoredMessage,
    TransactionProducer,
    TransactionResolution,
)

pytestmark = pytest.mark.timeout(60)

TOPIC = "HalfNotOk"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, broker_role="SYNC_MASTER")
    async with Admin(running.address) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
    yield running
    await running.close()


async def test_a_half_without_send_ok_is_rolled_back_and_the_local_transaction_never_runs(
    cluster: Cluster,
) -> None:
    ran: list[bytes] = []

    async def local(message: Message, arg: object) -> TransactionResolution:
        ran.append(message.body)
        return TransactionResolution.COMMIT

    async def check(message: StoredMessage) -> TransactionResolution:
        return TransactionResolution.COMMIT

    async with TransactionProducer(
        "HalfNotOkProducer", cluster.address, local_transaction=local, check=check
    ) as producer:
        result, resolution = await producer.send_in_transaction(Message(TOPIC, b"order 1"))

    assert result.status is SendStatus.SLAVE_NOT_AVAILABLE
    assert resolution == TransactionResolution.ROLLBACK
    assert ran == []
    broker = cluster.brokers["broker-a"].broker
    await eventually(lambda: broker.transactions.rolled_back == 1, 10, lambda: "the rollback")
    assert broker.transactions.committed == 0
    queue = broker.store.consume_queue(TOPIC, 0)
    assert queue is None or queue.max_offset == 0  # nothing visible
