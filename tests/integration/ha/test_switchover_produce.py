"""A planned switchover (``BrokerGroupFailover.switchover``) against real in-process brokers while
producers keep sending: no send fails after the client's retries, every acknowledged message is
read back afterwards, and mastership moves twice (there and back), as a rolling update does."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import Cluster, consume_all, eventually, start_cluster

from orbitmq.client import Admin, Message, Producer
from orbitmq.ha import Policy
from orbitmq.ha.group import BrokerGroupFailover, GroupMember

pytestmark = pytest.mark.timeout(120)
TOPIC = "Switchover"
SENDERS = 4


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, brokers=())
    yield running
    await running.close()


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.mark.parametrize("master_role", ["ASYNC_MASTER", "SYNC_MASTER"])
async def test_switchover_under_continuous_produce_loses_and_fails_nothing(
    cluster: Cluster, master_role: str
) -> None:
    fast = {"replica_config_interval_ms": 200}
    master = await cluster.start_broker("a-0", broker_name="broker-a", broker_role=master_role, **fast)
    async with Admin(cluster.address) as admin:
        await admin.create_topic(TOPIC, read_queue_nums=4, write_queue_nums=4)
    slave = await cluster.start_broker(
        "a-1", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **fast
    )
    members = [GroupMember("a-0", master.broker.address), GroupMember("a-1", slave.broker.address)]
    group = BrokerGroupFailover(members, master_role, Policy())
    await eventually(lambda: master.broker.replicas.connected, 10, lambda: "the slave never connected")

    acked: list[str] = []
    failures: list[str] = []
    not_ok: list[str] = []
    pauses: list[float] = []
    stop = asyncio.Event()

    async def sender(producer: Producer, n: int) -> None:
        i = 0
        while not stop.is_set():
            body = f"s{n}-{i}"
            began = time.monotonic()
            try:
                result = await producer.send(Message(TOPIC, body.encode()))
            except Exception as error:  # a failure reaching the caller is what this test forbids
                failures.append(f"{type(error).__name__}: {error}")
            else:
                acked.append(body)
                if result.status.name != "SEND_OK":
                    not_ok.append(result.status.name)
            pauses.append(time.monotonic() - began)
            i += 1

    async with Producer("SwitchoverP", cluster.address) as producer:
        tasks = [asyncio.create_task(sender(producer, n)) for n in range(SENDERS)]
        try:
            await eventually(lambda: len(acked) >= 300, 30, lambda: f"{len(acked)} acknowledged")
            there = await group.switchover(now_ms())
            assert there is not None and (there.promote, there.demote, there.epoch) == ("a-1", ("a-0",), 1), (
                there
            )
            assert group.live_master() is members[1] and members[0].state is not None
            assert members[0].state.role == "SLAVE" and members[0].state.epoch == 1
            halfway = len(acked)
            await eventually(lambda: len(acked) >= halfway + 300, 30, lambda: f"{len(acked)} acknowledged")
            # back again once the demoted master follows the new one (a rolling update's next step)
            for _ in range(100):
                back = await group.switchover(now_ms())
                if back is not None and not back.nothing:
                    break
                await asyncio.sleep(0.1)
            assert back is not None and (back.promote, back.epoch) == ("a-0", 2), back
            await eventually(lambda: len(acked) >= halfway + 600, 30, lambda: f"{len(acked)} acknowledged")
        finally:
            stop.set()
            await asyncio.gather(*tasks)

    assert failures == [], failures[:3]
    # a new SYNC_MASTER stores sends before its demoted master streams again (tens of ms): not lost
    assert set(not_ok) <= ({"SLAVE_NOT_AVAILABLE"} if master_role == "SYNC_MASTER" else set()), set(not_ok)
    assert group.switchovers == 2 and group.failovers == 0
    await consume_all(cluster.address, TOPIC, acked, "SwitchoverCheck")
    print(
        f"switchover ({master_role}) x2: {len(acked)} sends acknowledged by {SENDERS} senders, "
        f"{len(failures)} failed after retries, "
        f"{len(not_ok)} acknowledged not SEND_OK {sorted(set(not_ok))}, "
        f"longest send {max(pauses) * 1000:.0f} ms"
    )
