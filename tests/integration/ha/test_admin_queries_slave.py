"""Admin queries by id and key are answered by a slave when its master is unreachable."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import Cluster, eventually, start_cluster

from orbitmq.client import Admin, Message, Producer
from orbitmq.client.admin import MessageNotFound

pytestmark = pytest.mark.timeout(90)

HA = {"replica_config_interval_ms": 100}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, brokers=())
    yield running
    await running.close()


async def test_a_slave_answers_by_id_and_by_key_while_the_master_is_away(cluster: Cluster) -> None:
    await cluster.start_broker("a-master", broker_name="broker-a", broker_role="ASYNC_MASTER", **HA)
    await cluster.start_broker("a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **HA)
    async with Admin(cluster.address) as admin:
        await admin.create_topic("Kept", read_queue_nums=2, write_queue_nums=2)
    async with Producer("PG", cluster.address) as producer:
        sent = await producer.send(Message("Kept", b"kept body", keys=["kept-1"]))
    master = cluster.brokers["a-master"].broker
    slave = cluster.brokers["a-slave"].broker
    await eventually(
        lambda: (
            slave.store.dispatcher.dispatched_offset == master.store.commitlog.max_offset
            and slave.topics.get("Kept") is not None  # the config copy, every 100 ms here
        ),
        20,
    )
    await master.grpc.stop(0)  # gone without a word: the name servers still list it
    async with Admin(cluster.address) as admin:
        for topic in ("Kept", None):
            found = await admin.message_by_id(sent.msg_id, topic)
            assert (found.body, found.msg_id) == (b"kept body", sent.offset_msg_id)
        assert [m.body for m in await admin.messages_by_key("Kept", "kept-1")] == [b"kept body"]
        with pytest.raises(MessageNotFound, match="no message has id"):
            await admin.message_by_id("0123456789ABCDEF0123456789ABCDEF", "Kept")
