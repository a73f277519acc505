"""A client's session stream to a broker that restarted: the first event the client sends on the
new stream (a check-back's answer) reaches the broker. The old stream's request reader, left
running by gRPC when the call had already failed, took that event from the shared queue and
lost it writing to the dead call (``orbitmq chaos``: pending tasks and "aclose(): asynchronous
generator is already running" at exit after a master kill; each lost answer cost a check pass).

Real name server and broker in this process; the broker restarts gracefully on its port.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
sys.path.insert(0, str(Path(__file__).parent))
from clusterkit import Cluster, eventually, start_cluster

from orbitmq.client import Admin, Message, StoredMessage, TransactionProducer, TransactionResolution

pytestmark = pytest.mark.timeout(60)

TOPIC = "SessionRestart"
CHECKS = {"transaction_timeout_ms": 300, "transaction_check_interval_ms": 1_000}
"""A check pass a second: an answer lost is asked again a pass later, one received is not."""


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, **CHECKS)
    async with Admin(running.address) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
    yield running
    await running.close()


async def test_the_first_answer_on_a_reopened_session_reaches_the_broker(cluster: Cluster) -> None:
    asked: list[bytes] = []

    async def check(message: StoredMessage) -> TransactionResolution:
        asked.append(message.body)
        return TransactionResolution.COMMIT

    async def unknown(message: Message, arg: object) -> TransactionResolution:
        return TransactionResolution.UNKNOWN  # the check-back decides

    async with TransactionProducer(
        "SessionRestartProducer", cluster.address, local_transaction=unknown, check=check, heartbeat_ms=200
    ) as producer:
        await producer.send_in_transaction(Message(TOPIC, b"before"))
        await eventually(lambda: cluster.brokers["broker-a"].broker.transactions.committed == 1, 10)

        restarted = await cluster.restart_broker("broker-a")  # the session stream ends
        await eventually(lambda: restarted.broker.clients.session(producer.client_id) is not None, 15)
        await producer.send_in_transaction(Message(TOPIC, b"after"))
        await eventually(lambda: restarted.broker.transactions.committed == 1, 10, lambda: f"asked {asked}")

    assert asked.count(b"after") == 1, f"asked {asked}: the first answer after the restart was lost"
