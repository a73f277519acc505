"""Acks of the official SimpleConsumer while its broker group changes masters: every ack issued
while the old master already refuses writes and the new one is not yet promoted succeeds (the
proxy tries it again on the group's master within the client's deadline), and so do acks
during a ``BrokerGroupFailover.switchover``; nothing acked is delivered again."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
from brokerkit import RunningBroker, start_broker, stop_broker
from v2kit import call, message, official_producer, official_simple_consumer

from orbitmq.client import Admin
from orbitmq.ha import Policy
from orbitmq.ha.group import BrokerGroupFailover, GroupMember
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.proxy.server import Proxy
from orbitmq.proxy.settings import ProxySettings
from orbitmq.v1 import broker_pb2

pytestmark = pytest.mark.timeout(150)

TOPIC = "V2AckSwitchover"
GROUP = "v2-ack-switchover"
COUNT = 40
INVISIBLE_S = 20
FAST = {"replica_config_interval_ms": 200, "broker_name": "broker-a"}


@dataclass
class Group:
    namesrv: NameServer
    master: RunningBroker
    slave: RunningBroker
    proxy: Proxy


@asynccontextmanager
async def broker_group(root: Path) -> AsyncIterator[Group]:
    """A name server, a master and its slave (one broker group), and a proxy before them."""
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None))
    await namesrv.start()
    started: list[RunningBroker] = []
    proxy = Proxy(
        ProxySettings(listen="127.0.0.1:0", metrics_listen=None, namesrv=namesrv.address, grace_ms=200)
    )
    try:
        master = await start_broker(root / "a-0", namesrv=namesrv.address, **FAST)
        started.append(master)
        async with Admin(namesrv.address) as admin:
            await admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
        slave = await start_broker(
            root / "a-1", namesrv=namesrv.address, broker_role="SLAVE", broker_id=1, **FAST
        )
        started.append(slave)
        await proxy.start()
        yield Group(namesrv, master, slave, proxy)
    finally:
        await proxy.close()
        for running in started:
            await stop_broker(running)
        await namesrv.close()


async def eventually(check: Any, within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def receive_all(consumer: Any, count: int, within_s: float = 30.0) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + within_s
    while len(got) < count and time.monotonic() < deadline:
        got.extend(await call(consumer.receive, 16, INVISIBLE_S))
    return got


async def ack_all(consumer: Any, messages: list[Any], failures: list[str]) -> None:
    """Ack one after another (the official client: 3 s deadline each), keeping what failed."""
    for m in messages:
        try:
            await call(consumer.ack, m)
        except Exception as error:  # what this test forbids: an ack failing in the user's face
            failures.append(f"{m.body!r}: {type(error).__name__}: {error}")
        await asyncio.sleep(0.02)


async def test_acks_ride_out_a_change_of_master(tmp_path: Path) -> None:
    async with broker_group(tmp_path) as group:
        master, slave = group.master, group.slave
        await eventually(lambda: master.broker.replicas.connected, 20, "the slave never connected")
        async with official_producer(group.proxy.address, [TOPIC]) as producer:
            for i in range(COUNT):
                await call(producer.send, message(TOPIC, f"m{i}".encode()))
        async with official_simple_consumer(group.proxy.address, GROUP, [TOPIC]) as consumer:
            received = await receive_all(consumer, COUNT)
            assert sorted(m.body for m in received) == sorted(f"m{i}".encode() for i in range(COUNT))
            failures: list[str] = []

            # The switchover's steps, with the gap between them held open: the master is
            # demoted (refuses writes), acks arrive, and only then is the slave promoted.
            epoch = master.broker.epoch + 1
            await master.stub.ChangeRole(
                broker_pb2.ChangeRoleRequest(
                    role="SLAVE", epoch=epoch, broker_id=2, master_addr=slave.broker.address
                )
            )
            acks = asyncio.create_task(ack_all(consumer, received[:5], failures))
            await asyncio.sleep(1.0)
            assert not acks.done(), failures  # the first ack is still waiting for a master
            await eventually(
                lambda: slave.broker.store.commitlog.max_offset == master.broker.store.commitlog.max_offset,
                10,
                "the slave did not catch up",
            )
            await slave.stub.ChangeRole(
                broker_pb2.ChangeRoleRequest(role="ASYNC_MASTER", epoch=epoch, broker_id=0)
            )
            await asyncio.wait_for(acks, 30)
            assert failures == []

            # A planned switchover back while acks keep coming.
            await eventually(lambda: slave.broker.replicas.connected, 20, "the old master never followed")
            failover = BrokerGroupFailover(
                [GroupMember("a-0", master.broker.address), GroupMember("a-1", slave.broker.address)],
                "ASYNC_MASTER",
                Policy(),
            )
            acks = asyncio.create_task(ack_all(consumer, received[5:], failures))
            await asyncio.sleep(0.1)
            decision = await failover.switchover(int(time.time() * 1000))
            assert decision is not None and decision.promote == "a-0", decision
            await asyncio.wait_for(acks, 60)
            assert failures == []

            stats = await master.stub.GetConsumeStats(
                broker_pb2.GetConsumeStatsRequest(consumer_group=GROUP, topic=TOPIC)
            )
            assert sum(q.consumer_offset for q in stats.queues) == COUNT
            assert sum(q.pop_in_flight for q in stats.queues) == 0
            # Past the invisible duration: an ack lost anywhere would deliver its message again.
            deadline = time.monotonic() + INVISIBLE_S + 3
            again: list[Any] = []
            while time.monotonic() < deadline:
                again.extend(await call(consumer.receive, 16, INVISIBLE_S))
            assert [m.body for m in again] == []
