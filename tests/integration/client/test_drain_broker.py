"""Draining a broker group (RocketMQ's wipeWritePerm): with its write permission wiped on the
name server, producers send only to the other group, also after the drained group registers
again; consumers still consume its backlog, whose measure falls to nothing; add-write-perm
lets producers back in. Real name server and brokers in this process, the CLI as users run it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from clusterkit import Cluster, Collector, consuming, eventually, run_cli, start_cluster

from orbitmq.client import Message, Producer
from orbitmq.client.admin import DELAYED, Admin
from orbitmq.common.topics import SCHEDULE_TOPIC

pytestmark = pytest.mark.timeout(120)
TOPIC = "Orders"
GROUP = "Billing"
REGISTER_MS = 200
"""Brokers re-register this often, so the test sees the drained group's heartbeats."""


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(
        tmp_path, brokers=("broker-a", "broker-b"), register_interval_ms=REGISTER_MS
    )
    yield running
    await running.close()


async def send(producer: Producer, count: int, label: str) -> set[str]:
    """Broker names the ``count`` sends went to."""
    results = [await producer.send(Message(TOPIC, f"{label} {i}".encode())) for i in range(count)]
    return {r.broker_name for r in results}


async def consume_until(cluster: Cluster, collector: Collector, count: int) -> None:
    async with consuming(cluster.address, TOPIC, GROUP, collector):
        await collector.wait_for(count)


async def test_wiped_group_takes_no_sends_and_drains(cluster: Cluster) -> None:
    async with Admin(cluster.address) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
        await admin.create_group(GROUP)
    collector = Collector()
    async with Producer("Shop", cluster.address, route_refresh_ms=REGISTER_MS) as producer:
        assert await send(producer, 8, "first") == {"broker-a", "broker-b"}
        await consume_until(cluster, collector, 8)  # the group now has offsets on both groups
        await send(producer, 8, "backlog")

        code, out, err = await run_cli(
            cluster, "admin", "broker", "wipe-write-perm", "--broker-name", "broker-b", "--json"
        )
        assert code == 0, err
        [row] = json.loads(out)
        assert row["namesrv"] == cluster.address and row["wiped_topics"] >= 1  # Orders, retry topics
        async with Admin(cluster.address) as admin:
            backlog = await admin.broker_backlog("broker-b")
        assert backlog[GROUP, TOPIC] > 0

        await asyncio.sleep(3 * REGISTER_MS / 1000)  # broker-b re-registered with perm 6 meanwhile
        assert await send(producer, 12, "wiped") == {"broker-a"}

        await consume_until(cluster, collector, 8 + 8 + 12)
        async with Admin(cluster.address) as admin:
            await eventually(
                lambda: _drained(admin),
                10,
                lambda: "broker-b's backlog did not reach 0 after its messages were consumed",
            )
        code, out, _ = await run_cli(
            cluster, "admin", "broker", "backlog", "--broker-name", "broker-b", "--json"
        )
        assert (code, json.loads(out)) == (0, [])

        code, out, err = await run_cli(
            cluster, "admin", "broker", "add-write-perm", "--broker-name", "broker-b", "--json"
        )
        assert code == 0, err
        assert json.loads(out)[0]["restored_topics"] == row["wiped_topics"]
        await asyncio.sleep(3 * REGISTER_MS / 1000)  # the producer's route refresh
        assert await send(producer, 8, "restored") == {"broker-a", "broker-b"}


async def _drained(admin: Admin) -> bool:
    return await admin.broker_backlog("broker-b") == {}


async def test_wipe_is_refused_naming_a_silent_name_server(cluster: Cluster) -> None:
    silent = "127.0.0.1:1"
    async with Admin([cluster.address, silent]) as admin:
        with pytest.raises(Exception, match=r"reached 1 of 2 name servers \(127\.0\.0\.1:1 unavailable"):
            await admin.wipe_write_perm("broker-b")
    async with Admin(cluster.address) as admin:
        assert await admin.wipe_write_perm("broker-b") == {cluster.address: 0}, "the live one did it"


async def test_delayed_messages_waiting_on_a_group_are_backlog(cluster: Cluster) -> None:
    """A delayed message reaches its topic on the broker it was sent to only when due: until
    then a drain must count it, or removing the group would lose it."""
    async with Admin(cluster.address) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=2, write_queue_nums=2)
    async with Producer("Later", cluster.address, route_refresh_ms=REGISTER_MS) as producer:
        on_b = 0
        while on_b < 3:
            result = await producer.send(Message(TOPIC, b"later", delay_level=2))  # due in 5 s
            on_b += result.broker_name == "broker-b"
    async with Admin(cluster.address) as admin:
        backlog = await admin.broker_backlog("broker-b")
        assert backlog.get((DELAYED, SCHEDULE_TOPIC), 0) >= 3, backlog
        await eventually(
            lambda: _no_delayed(admin), 20, lambda: "broker-b's delayed messages were never delivered"
        )


async def _no_delayed(admin: Admin) -> bool:
    return (DELAYED, SCHEDULE_TOPIC) not in await admin.broker_backlog("broker-b")
