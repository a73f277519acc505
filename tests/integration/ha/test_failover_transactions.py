"""Transactions resolved on a master stay resolved on the slave promoted after it: the new
master's check-back pass must not ask the producer again about a half message whose commit (an
op record) reached it by replication, or a COMMIT answer stores the message a second time
(``orbitmq chaos`` saw 11 committed transactions stored twice across two master kills).

Real brokers in this process; the master is stopped without a word and the slave promoted by
``ChangeRole``, as the local supervisor does.
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

from orbitmq.broker.ha import ReplicationClient
from orbitmq.broker.server import Broker
from orbitmq.broker.transactions import PROGRESS_GROUP
from orbitmq.client import Admin, Message, StoredMessage, TransactionProducer, TransactionResolution
from orbitmq.common.topics import TRANS_HALF_TOPIC
from orbitmq.v1 import broker_pb2

pytestmark = pytest.mark.timeout(60)

TOPIC = "FailoverTx"
FAST_CHECKS = {"transaction_timeout_ms": 200, "transaction_check_interval_ms": 100}
PASSES_S = 1.5
"""Fifteen check passes of the promoted slave: time for it to ask about every half it thinks open."""


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, brokers=())
    yield running
    await running.close()


def half_records(running_broker: object) -> int:
    """Records in the half topic's queue: each check-back appends the half again first."""
    queue = running_broker.store.consume_queue(TRANS_HALF_TOPIC, 0)  # type: ignore[attr-defined]
    return 0 if queue is None else queue.max_offset


async def start_pair(
    cluster: Cluster, names: tuple[str, str] = ("a-master", "a-slave"), **settings: object
) -> tuple[Broker, Broker]:
    """The master and slave of ``broker-a`` (``settings`` on both), the topic on the master."""
    master, slave = names
    await cluster.start_broker(master, broker_name="broker-a", broker_role="ASYNC_MASTER", **settings)
    async with Admin(cluster.address) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=1, write_queue_nums=1)
    await cluster.start_broker(slave, broker_name="broker-a", broker_role="SLAVE", broker_id=1, **settings)
    return cluster.brokers[master].broker, cluster.brokers[slave].broker


async def test_a_promoted_slave_does_not_check_back_transactions_its_master_resolved(
    cluster: Cluster,
) -> None:
    master, slave = await start_pair(cluster, **FAST_CHECKS)

    asked: list[StoredMessage] = []

    def check(message: StoredMessage) -> TransactionResolution:
        asked.append(message)
        return TransactionResolution.COMMIT

    async with TransactionProducer(
        "FailoverTxProducer",
        cluster.address,
        local_transaction=lambda message, arg: TransactionResolution.COMMIT,
        check=check,
        heartbeat_ms=200,
    ) as producer:
        for i in range(3):
            await producer.send_in_transaction(Message(TOPIC, f"paid {i}".encode()))
        await eventually(lambda: master.transactions.committed == 3, 10, lambda: "the master's commits")
        await eventually(
            lambda: slave.store.commitlog.max_offset == master.store.commitlog.max_offset,
            10,
            lambda: "the slave's copy of the halves, the messages and the op records",
        )
        halves = half_records(slave)

        await master.grpc.stop(0)  # gone without a word, as a SIGKILL leaves it
        promoted = await cluster.brokers["a-slave"].stub.ChangeRole(
            broker_pb2.ChangeRoleRequest(role="ASYNC_MASTER", epoch=1, broker_id=0)
        )
        assert promoted.role == "ASYNC_MASTER"
        await asyncio.sleep(PASSES_S)

    assert half_records(slave) == halves, "the promoted slave checked back resolved transactions"
    assert asked == []
    queue = slave.store.consume_queue(TOPIC, 0)
    assert queue is not None and queue.max_offset == 3  # each committed message once


async def test_a_promoted_slave_asks_about_a_half_its_master_checked_with_a_copy_it_never_got(
    cluster: Cluster,
) -> None:
    """The master checked a half (a copy of it appended, its check progress past it) that the
    slave holds but whose copy it never got; the slave copied that progress. Promoted, it must
    still ask about the half: taking the master's progress as it came, it skipped the half for
    good, and a transaction the producer would have answered COMMIT never became visible
    (``orbitmq chaos``: committed transactions missing after master failovers)."""
    slow = {"transaction_timeout_ms": 1_500, "transaction_check_interval_ms": 100}
    master, slave = await start_pair(cluster, **slow)
    asked: list[str] = []

    def check(message: StoredMessage) -> TransactionResolution:
        asked.append(message.body.decode())
        return TransactionResolution.UNKNOWN  # the application has not decided yet

    async with TransactionProducer(
        "FailoverTxProducer",
        cluster.address,
        local_transaction=lambda message, arg: TransactionResolution.UNKNOWN,
        check=check,
        heartbeat_ms=200,
        route_refresh_ms=200,
    ) as producer:
        await producer.send_in_transaction(Message(TOPIC, b"paid"))
        await eventually(lambda: half_records(slave) == 1, 10, lambda: "the slave's copy of the half")
        await slave._stop_replication()  # the master's copies of the half reach it no more
        await eventually(lambda: asked, 10, lambda: "the master's check-back")
        assert master.offsets.query(PROGRESS_GROUP, TRANS_HALF_TOPIC, 0) >= 1
        await ReplicationClient(slave).copy_config(cluster.brokers["a-master"].stub, master.address)

        await cluster.stop_broker("a-master")
        promoted = await cluster.brokers["a-slave"].stub.ChangeRole(
            broker_pb2.ChangeRoleRequest(role="ASYNC_MASTER", epoch=1, broker_id=0)
        )
        assert promoted.role == "ASYNC_MASTER"
        # Asking appends a copy of the half first (whether a producer answers or not yet).
        await eventually(
            lambda: half_records(slave) > 1, 10, lambda: "the promoted slave's check of the half"
        )


async def test_a_demoted_master_whose_log_was_cut_forgets_the_transactions_it_resolved_there(
    cluster: Cluster,
) -> None:
    """The master committed a transaction its slave never got (no commit, no op record); the
    slave, promoted, left it open. The old master, demoted, cut those records to align with the
    new master: promoted again, it must ask about the transaction. Its in-memory set of resolved
    transactions, kept across the cut, said resolved, and the commit was lost for good."""
    slow = {"transaction_timeout_ms": 1_500, "transaction_check_interval_ms": 100}
    first, second = await start_pair(cluster, ("a", "b"), **slow)
    answer = TransactionResolution.COMMIT

    async with TransactionProducer(
        "FailoverTxProducer",
        cluster.address,
        local_transaction=lambda message, arg: TransactionResolution.UNKNOWN,
        check=lambda message: answer,
        heartbeat_ms=200,
    ) as producer:
        await producer.send_in_transaction(Message(TOPIC, b"paid"))
        await eventually(lambda: half_records(second) == 1, 10, lambda: "the slave's copy of the half")
        await second._stop_replication()  # what the master writes next stays on the master
        await eventually(lambda: first.transactions.committed == 1, 10, lambda: "the master's commit")
        answer = TransactionResolution.UNKNOWN  # the new master leaves it open

    promoted = await cluster.brokers["b"].stub.ChangeRole(
        broker_pb2.ChangeRoleRequest(role="ASYNC_MASTER", epoch=1, broker_id=0)
    )
    assert promoted.role == "ASYNC_MASTER"
    await cluster.brokers["a"].stub.ChangeRole(
        broker_pb2.ChangeRoleRequest(role="SLAVE", epoch=1, broker_id=1, master_addr=second.address)
    )
    await eventually(
        lambda: half_records(first) == half_records(second) > 1,
        15,
        lambda: f"the demoted master's copy of the new master's checks: {half_records(first)}",
    )
    assert (queue := first.store.consume_queue(TOPIC, 0)) is None or queue.max_offset == 0  # cut

    await cluster.stop_broker("b")
    await cluster.brokers["a"].stub.ChangeRole(
        broker_pb2.ChangeRoleRequest(role="ASYNC_MASTER", epoch=2, broker_id=0)
    )
    held = half_records(first)
    await eventually(
        lambda: half_records(first) > held, 10, lambda: "the re-promoted master's check of the half"
    )


async def test_a_slave_holds_no_check_progress_its_master_has_not(cluster: Cluster) -> None:
    """A master that never checked a half has no check progress; its slave, copying the
    master's tables, must not make one up (each copy wrote 0 for a progress neither had: an
    offsets table, and metric series, the master lacks; benchmarks/cardinality_bench.py
    waited for the slave's offsets to match the master's and never saw them match)."""
    ha = {"replica_config_interval_ms": 100}
    master, slave = await start_pair(cluster, **ha)
    master.offsets.commit("SomeGroup", TOPIC, 0, 1)
    await eventually(lambda: slave.offsets.query("SomeGroup", TOPIC, 0) == 1, 10, lambda: "no config copy")
    await asyncio.sleep(0.3)  # a few more copies
    assert master.offsets.query(PROGRESS_GROUP, TRANS_HALF_TOPIC, 0) == -1
    assert slave.offsets.query(PROGRESS_GROUP, TRANS_HALF_TOPIC, 0) == -1
    assert set(slave.offsets.snapshot()) == set(master.offsets.snapshot())
