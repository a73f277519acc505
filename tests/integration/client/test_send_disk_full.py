"""A broker group whose disk is full refuses a send with DISK_FULL; the producer takes it to
another group of the route at once, as RocketMQ's does (its broker answers SERVICE_NOT_AVAILABLE,
"the broker's disk is full", a code its producer retries on another broker). A send bound to a
queue on the full group, or one whose every group is full, fails at once, not after its budget.

The full group is a broker whose refusal ratio is 1 %: the machine's disk is past it."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
from brokerkit import RunningBroker, start_broker, stop_broker

from orbitmq.client import Admin
from orbitmq.client.message import Message, SendStatus
from orbitmq.client.producer import Producer, sharding_queue
from orbitmq.client.retry import SendFailed
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.store.disk import used_ratio
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(60)

FULL_AT_ONE_PERCENT = {
    "disk_max_used_space_ratio": 0.01,
    "disk_space_warning_level_ratio": 0.01,
    "disk_space_clean_forcibly_ratio": 1.0,  # nothing is deleted: the test's disk is not ours
    "disk_check_interval_ms": 100,
}


@pytest.fixture
async def groups(tmp_path: Path) -> AsyncIterator[tuple[NameServer, RunningBroker, RunningBroker]]:
    assert used_ratio(tmp_path) > 0.01
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None))
    await namesrv.start()
    full = await start_broker(
        tmp_path / "full", namesrv=namesrv.address, broker_name="broker-full", **FULL_AT_ONE_PERCENT
    )
    roomy = await start_broker(tmp_path / "roomy", namesrv=namesrv.address, broker_name="broker-roomy")
    async with Admin(namesrv.address) as admin:
        await admin.create_topic("Spread", read_queue_nums=2, write_queue_nums=2, cluster="DefaultCluster")
        await admin.create_topic(
            "OnlyFull", read_queue_nums=2, write_queue_nums=2, broker_addr=full.broker.address
        )
    yield namesrv, full, roomy
    for running in (full, roomy):
        await stop_broker(running)
    await namesrv.close()


@pytest.mark.parametrize("auto_batch", [True, False], ids=["auto-batch", "one-call-each"])
async def test_a_full_groups_refusal_moves_the_send_to_another_group(groups, auto_batch: bool) -> None:  # type: ignore[no-untyped-def]
    namesrv, _, _ = groups
    async with Producer("DiskPG", namesrv.address, auto_batch=auto_batch) as producer:
        queues = await producer.write_queues("Spread")
        assert {q.broker_name for q in queues} == {"broker-full", "broker-roomy"}
        results = [await producer.send(Message("Spread", f"m{i}".encode())) for i in range(8)]
        batch = await producer.send_batch([Message("Spread", f"b{i}".encode()) for i in range(4)])
        for result in [*results, batch]:
            assert (result.status, result.broker_name) == (SendStatus.SEND_OK, "broker-roomy")

        full_key = next(
            k
            for k in (f"key{n}" for n in range(100))
            if queues[sharding_queue(k, len(queues))].broker_name == "broker-full"
        )
        for topic, key in (("Spread", full_key), ("OnlyFull", None)):
            started = time.monotonic()
            with pytest.raises(SendFailed) as refused:
                await producer.send(Message(topic, b"nowhere"), sharding_key=key)
            assert time.monotonic() - started < 3, "a full disk is not a reason to wait out the budget"
            assert refused.value.reason == ErrorReason.DISK_FULL
            assert not refused.value.retriable
            assert refused.value.broker_name == "broker-full"
