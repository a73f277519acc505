"""Two transactional producers of different groups in one process each answer their own
check-backs (found while reading the broker's per-client session table for the soak: it kept
one session per client id, and every producer of a process shares its id, ``host@pid``, so
the producer that opened its session last was asked about the other's transactions and its
``check`` decided them)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
from brokerkit import start_broker, stop_broker

from orbitmq.client.message import Message
from orbitmq.client.producer import TransactionProducer
from orbitmq.client.pull_consumer import PullConsumer, PullStatus
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.store.record import StoredMessage
from orbitmq.v1.broker_pb2 import TransactionResolution

pytestmark = pytest.mark.timeout(90)


async def test_each_producer_of_a_process_is_asked_about_its_own_transactions(tmp_path: Path) -> None:
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None))
    await namesrv.start()
    broker = await start_broker(
        tmp_path / "broker",
        namesrv=namesrv.address,
        transaction_timeout_ms=300,
        transaction_check_interval_ms=100,
    )
    asked: dict[str, list[bytes]] = {"A": [], "B": []}

    def checker(name: str, answer: TransactionResolution):  # type: ignore[no-untyped-def]
        def check(message: StoredMessage) -> TransactionResolution:
            asked[name].append(message.body)
            return answer

        return check

    def local(_: Message, outcome: TransactionResolution) -> TransactionResolution:
        return outcome

    first = TransactionProducer(
        "TxGroupA", namesrv.address, local_transaction=local, check=checker("A", TransactionResolution.COMMIT)
    )
    second = TransactionProducer(
        "TxGroupB",
        namesrv.address,
        local_transaction=local,
        check=checker("B", TransactionResolution.ROLLBACK),
    )
    try:
        async with first, second:
            assert first.client_id == second.client_id  # one process, one client id
            await first.send_in_transaction(Message("TxTwo", b"A's"), TransactionResolution.UNKNOWN)
            await asyncio.sleep(0.3)  # B's session opens after A's
            await second.send_in_transaction(Message("TxTwo", b"B's"), TransactionResolution.COMMIT)
            for _ in range(100):
                if asked["A"] or asked["B"]:
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(0.5)
        assert asked == {"A": [b"A's"], "B": []}
        async with PullConsumer("tx-check", namesrv.address) as consumer:
            visible = []
            for mq in await consumer.queues("TxTwo"):
                result = await consumer.pull(mq, 0, max_nums=32)
                if result.status is PullStatus.FOUND:
                    visible += [m.body for m in result.messages]
        assert sorted(visible) == [b"A's", b"B's"]
    finally:
        await stop_broker(broker)
        await namesrv.close()
