"""A broker or name server whose wall clock is stepped (libfaketime, only that process) keeps its
leases and its view of who is alive.

An orderly queue's lock is a lease: its owner renews it every 20 s and it lapses 60 s after the
last renewal. Measured on the wall clock, a forward step of two minutes lapsed every lock at once
and the next client to ask took a queue its owner was still consuming (two consumers of one
ordered queue); it also expired every client as silent, so the groups rebalanced for nothing.

Transaction check-backs stop at the first half message not yet ``transaction_timeout_ms`` old,
judged by its store time (data, on the wall clock): a half stored during a forward step is stamped
in the future once the clock is back, and it held every later transaction's check-back for as
long as the step (two minutes: committed transactions invisible, their producers unasked). A half
stamped in the future is checked at once: a check is only a question, and the producer answers
UNKNOWN for a transaction still running.

Delayed messages wait in their level's queue in store order, due at store time + the level's
delay; one stored during a forward step was due two minutes late once the clock was back, and
held every later message of its level behind it. A unit due later than now + its level's delay
can only come from such a step: it is delivered now (RocketMQ's correctDeliverTimestamp).

A name server timed its brokers' expiry (120 s after the last registration) on the wall clock
too: a forward step dropped every broker from the routes until its next registration, up to 30 s
of sends failing for want of a route. Leases and liveness are measured on the monotonic clock;
a step shows in what is data (a message's store time), and data stamped in the future holds
nothing behind it.

Needs Debian's libfaketime (scripts/test installs it); skipped without it.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from brokerkit import broker_process

from orbitmq.chaos.clockfault import broker_offset_s, library, set_offset
from orbitmq.client.message import Message
from orbitmq.client.producer import TransactionProducer
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.store.record import StoredMessage
from orbitmq.v1 import broker_pb2, common_pb2, nameserver_pb2, nameserver_pb2_grpc
from orbitmq.v1.broker_pb2 import TransactionResolution

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(library() is None, reason="needs libfaketime (apt-get install libfaketime)"),
]

GROUP = "OrderlyGroup"
STEP_S = 150
"""Past the 60 s lock expiry and the 120 s client expiry."""


async def heartbeat(stub: object, client_id: str) -> None:
    consumer = broker_pb2.ConsumerData(group=GROUP, orderly=True)
    await stub.Heartbeat(broker_pb2.HeartbeatRequest(client_id=client_id, consumers=[consumer]))  # type: ignore[attr-defined]


async def locked(stub: object, client_id: str, queue: common_pb2.MessageQueue) -> bool:
    request = broker_pb2.LockBatchRequest(consumer_group=GROUP, client_id=client_id, queues=[queue])
    reply = await stub.LockBatch(request)  # type: ignore[attr-defined]
    return list(reply.locked) == [queue]


@contextmanager
def stepped_clock(offsets: Path) -> Iterator[dict[str, str]]:
    """The environment that gives a child process the clock ``offsets`` sets."""
    set_offset(offsets, 0)
    yield {
        "LD_PRELOAD": str(library()),
        "FAKETIME_TIMESTAMP_FILE": str(offsets),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


async def test_a_stepped_wall_clock_neither_lapses_a_lock_nor_expires_a_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offsets = tmp_path / "broker.faketime"
    with stepped_clock(offsets) as env:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
    settings = {"scan_interval_ms": 200}  # the client sweep runs often: an expiry would show at once
    async with broker_process(tmp_path / "store", "broker-clock", settings=settings) as (stub, metrics, _):
        monkeypatch.delenv("LD_PRELOAD")
        queue = common_pb2.MessageQueue(topic="Ordered", broker_name="broker-clock", queue_id=0)
        await heartbeat(stub, "owner")
        await heartbeat(stub, "rival")
        assert await locked(stub, "owner", queue)
        assert not await locked(stub, "rival", queue)

        for seconds in (STEP_S, -STEP_S):  # forward, then back past the start
            set_offset(offsets, seconds)
            await asyncio.sleep(0.6)  # sweeps run
            seen = await broker_offset_s(metrics)
            assert seen is not None and abs(seen - seconds) <= 2, f"the step did not land: {seen}"
            members = await stub.GetConsumerList(broker_pb2.GetConsumerListRequest(consumer_group=GROUP))
            assert sorted(members.client_ids) == ["owner", "rival"], f"clients expired at {seconds:+d} s"
            assert not await locked(stub, "rival", queue), f"the owner's lock lapsed at {seconds:+d} s"
            assert await locked(stub, "owner", queue)  # its renewal
            await heartbeat(stub, "owner")
            await heartbeat(stub, "rival")


async def test_a_name_servers_stepped_wall_clock_expires_no_broker(tmp_path: Path) -> None:
    offsets = tmp_path / "namesrv.faketime"
    with stepped_clock(offsets) as env:
        namesrv = await asyncio.create_subprocess_exec(
            sys.executable,
            *(
                "-m",
                "orbitmq.cli.main",
                "namesrv",
                "--listen",
                "127.0.0.1:0",
                "--metrics-listen",
                "127.0.0.1:0",
            ),
            stdout=asyncio.subprocess.PIPE,
            env={**os.environ, **env, "ORBITMQ_NAMESRV_SCAN_INTERVAL_MS": "200"},
        )
    try:
        assert namesrv.stdout is not None
        words = (await asyncio.wait_for(namesrv.stdout.readline(), 30)).decode().split()
        async with grpc.aio.insecure_channel(words[3]) as channel:
            stub = nameserver_pb2_grpc.NameServerStub(channel)
            await stub.RegisterBroker(
                nameserver_pb2.RegisterBrokerRequest(
                    cluster="C", broker_name="broker-x", broker_addr="127.0.0.1:1", broker_id=0
                )
            )
            for seconds in (STEP_S, -STEP_S):
                set_offset(offsets, seconds)
                await asyncio.sleep(0.6)  # scans run
                seen = await broker_offset_s(words[5])
                assert seen is not None and abs(seen - seconds) <= 2, f"the step did not land: {seen}"
                info = await stub.GetClusterInfo(nameserver_pb2.GetClusterInfoRequest())
                assert list(info.live_brokers) == ["127.0.0.1:1"], f"the broker expired at {seconds:+d} s"
    finally:
        namesrv.kill()
        await namesrv.wait()


async def test_a_half_or_delayed_message_stamped_before_a_step_back_holds_none_behind_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None))
    await namesrv.start()
    offsets = tmp_path / "broker.faketime"
    with stepped_clock(offsets) as env:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
    settings = {
        "namesrv": namesrv.address,
        "transaction_timeout_ms": 1000,
        "transaction_check_interval_ms": 200,
    }
    checked: list[str] = []

    async def check(message: StoredMessage) -> TransactionResolution:
        checked.append(message.body.decode())
        return TransactionResolution.COMMIT

    try:
        async with broker_process(tmp_path / "store", "broker-tx", settings=settings) as (stub, _, _):
            monkeypatch.delenv("LD_PRELOAD")
            producer = TransactionProducer(
                "StepTx",
                namesrv.address,
                local_transaction=lambda m, a: TransactionResolution.UNKNOWN,
                check=check,
            )

            async def delayed(body: bytes) -> None:  # delay level 1: due a second after it is stored
                message = common_pb2.Message(topic="Later", body=body, properties={"DELAY": "1"})
                await stub.SendMessage(
                    broker_pb2.SendMessageRequest(topic="Later", queue_id=0, messages=[message])
                )

            async with producer:
                await producer.send_in_transaction(Message("Tx", b"warm-up"), None)  # route and topic
                for _ in range(50):
                    if "warm-up" in checked:
                        break
                    await asyncio.sleep(0.1)
                set_offset(offsets, STEP_S)
                await asyncio.sleep(0.3)
                await producer.send_in_transaction(Message("Tx", b"ahead"), None)  # stamped +150 s
                await delayed(b"ahead")  # due 150 s late once the clock is back
                set_offset(offsets, 0)
                await asyncio.sleep(0.3)
                await producer.send_in_transaction(Message("Tx", b"after"), None)
                await delayed(b"after")
                for _ in range(80):
                    info = await stub.GetRuntimeInfo(broker_pb2.GetRuntimeInfoRequest())
                    if {"ahead", "after"} <= set(checked) and info.schedule_delivered == 2:
                        break
                    await asyncio.sleep(0.1)
            assert {"ahead", "after"} <= set(checked), f"check-backs held: only {checked} asked"
            assert info.schedule_delivered == 2, f"{info.delayed_messages_waiting} delayed messages held back"
    finally:
        await namesrv.close()
