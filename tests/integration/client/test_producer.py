"""Producers against a real name server and real brokers."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
from brokerkit import RunningBroker, start_broker, stop_broker

from orbitmq.client.message import Message, SendStatus
from orbitmq.client.producer import Producer, TransactionProducer, sharding_queue
from orbitmq.common.properties import SystemPropertyError
from orbitmq.common.rpc import RpcFailure
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.store.record import StoredMessage, decode
from orbitmq.v1 import broker_pb2
from orbitmq.v1.broker_pb2 import ErrorReason, TransactionResolution

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[NameServer, list[RunningBroker]]]:
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None))
    await namesrv.start()
    brokers = [
        await start_broker(
            tmp_path / name,
            namesrv=namesrv.address,
            broker_name=name,
            transaction_timeout_ms=300,
            transaction_check_interval_ms=100,
        )
        for name in ("broker-a", "broker-b")
    ]
    yield namesrv, brokers
    for running in brokers:
        if not running.broker.closing:
            await stop_broker(running)
    await namesrv.close()


@pytest.fixture(params=[True, False], ids=["auto-batch", "one-call-each"])
def auto_batch(request: pytest.FixtureRequest) -> bool:
    """Both ways of sending: concurrent sends coalesced (the default), or a call each."""
    return request.param  # type: ignore[no-any-return]


async def pull_all(running: RunningBroker, topic: str, queue_id: int) -> list[StoredMessage]:
    """Everything in one queue; nothing when this broker never received the topic."""
    if running.broker.topics.get(topic) is None:
        return []
    reply = await running.stub.PullMessage(
        broker_pb2.PullMessageRequest(
            consumer_group="check",
            topic=topic,
            queue_id=queue_id,
            queue_offset=0,
            max_msg_nums=1000,
            commit_offset=-1,
        )
    )
    return [decode(r) for r in reply.records]


async def test_sync_round_robin_over_every_queue_of_every_broker(cluster, auto_batch) -> None:  # type: ignore[no-untyped-def]
    namesrv, _ = cluster
    async with Producer("PG", namesrv.address, auto_batch=auto_batch) as producer:
        results = [
            await producer.send(Message("Spread", f"{i}".encode(), tags="T", keys=[f"k{i}"]))
            for i in range(16)
        ]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    placements = sorted((r.broker_name, r.queue_id) for r in results)
    assert placements == sorted([(b, q) for b in ("broker-a", "broker-b") for q in range(4)] * 2)
    assert all(len(r.msg_id) == 32 and len(r.offset_msg_id) == 32 for r in results)


async def test_short_lived_producers_spread_over_the_queues(cluster) -> None:  # type: ignore[no-untyped-def]
    """Each producer starts its round robin at a random queue (RocketMQ's ThreadLocalIndex), so
    one-message producers (``produce --count 1``, a Spark writer task) do not all write queue 0."""
    namesrv, _ = cluster
    async with Producer("PG", namesrv.address) as producer:
        await producer.send(Message("Short", b"warm-up"))  # the topic exists on both brokers
    placements = []
    for i in range(8):
        async with Producer("PG", namesrv.address) as producer:
            result = await producer.send(Message("Short", f"{i}".encode()))
        placements.append((result.broker_name, result.queue_id))
    # 8 queues: all eight on one queue by chance has probability 8 / 8**8 (about 5e-7).
    assert len(set(placements)) > 1, placements


async def test_sharding_key_keeps_order_in_one_queue(cluster, auto_batch) -> None:  # type: ignore[no-untyped-def]
    namesrv, brokers = cluster
    async with Producer("PG", namesrv.address, auto_batch=auto_batch) as producer:
        await producer.send(Message("Ordered", b"warm-up"))  # the topic now exists on both brokers
        await asyncio.sleep(0.2)
        results = [
            await producer.send(Message("Ordered", f"order-7:{i}".encode()), sharding_key="order-7")
            for i in range(10)
        ]
        queues = await producer.write_queues("Ordered", refresh=True)
    assert len({(r.broker_name, r.queue_id) for r in results}) == 1
    expected = queues[sharding_queue("order-7", len(queues))]
    assert (results[0].broker_name, results[0].queue_id) == (expected.broker_name, expected.queue_id)
    running = next(b for b in brokers if b.broker.settings.broker_name == expected.broker_name)
    bodies = [
        m.body for m in await pull_all(running, "Ordered", expected.queue_id) if m.body.startswith(b"order-7")
    ]
    assert bodies == [f"order-7:{i}".encode() for i in range(10)]


async def test_batch_async_callback_and_oneway(cluster, auto_batch) -> None:  # type: ignore[no-untyped-def]
    namesrv, brokers = cluster
    async with Producer("PG", namesrv.address, auto_batch=auto_batch) as producer:
        batch = await producer.send_batch([Message("Batch", f"b{i}".encode()) for i in range(5)])
        seen: list[object] = []
        future = producer.send_async(
            Message("Batch", b"async"), lambda result, error: seen.append(result or error)
        )
        result = await future
        producer.send_oneway(Message("Batch", b"oneway"))
    assert seen == [result] and result.status is SendStatus.SEND_OK
    running = next(b for b in brokers if b.broker.settings.broker_name == batch.broker_name)
    stored = [m.body for m in await pull_all(running, "Batch", batch.queue_id)]
    assert stored[batch.queue_offset : batch.queue_offset + 5] == [f"b{i}".encode() for i in range(5)]
    everything = [m.body for b in brokers for q in range(4) for m in await pull_all(b, "Batch", q)]
    assert b"oneway" in everything  # close() waited for it


async def test_retries_on_another_broker_when_one_is_down(cluster, auto_batch) -> None:  # type: ignore[no-untyped-def]
    namesrv, brokers = cluster
    async with Producer("PG", namesrv.address, auto_batch=auto_batch, send_timeout_ms=1000) as producer:
        for i in range(4):
            await producer.send(Message("Resilient", f"before-{i}".encode()))
        await stop_broker(brokers[0])  # broker-a goes away; routes still name it for a while
        results = [await producer.send(Message("Resilient", f"after-{i}".encode())) for i in range(8)]
    assert {r.broker_name for r in results} == {"broker-b"}


async def test_bad_input_is_refused_clearly(cluster, auto_batch) -> None:  # type: ignore[no-untyped-def]
    namesrv, _ = cluster
    async with Producer("PG", namesrv.address, auto_batch=auto_batch) as producer:
        with pytest.raises(ValueError, match="'bad topic'"):
            await producer.send(Message("bad topic", b"x"))
        with pytest.raises(TypeError, match="must be bytes"):
            await producer.send(Message("T", "text"))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="delay level 40"):
            await producer.send(Message("T", b"x", delay_level=40))
        for name in ("UNIQ_KEY", "DELAY", "TAGS", "KEYS", "TIMER_DELAY_MS", "__STARTDELIVERTIME", "PGROUP"):
            # System names are not user properties: UNIQ_KEY=myid became the msg_id, DELAY=2
            # delayed the message, TAGS=x set its tag.
            with pytest.raises(SystemPropertyError, match=f"property '{name}' is reserved for the system"):
                await producer.send(Message("T", b"x", properties={"region": "eu", name: "2"}))
        with pytest.raises(RpcFailure) as caught:
            await producer.send(Message("T", b"x" * (256 * 1024 + 1)))
        assert caught.value.reason == ErrorReason.MESSAGE_ILLEGAL


async def test_transactions_commit_rollback_and_check_back(cluster) -> None:  # type: ignore[no-untyped-def]
    namesrv, brokers = cluster
    decided: dict[str, TransactionResolution] = {}
    checked: list[str] = []

    def local(message: Message, arg: object) -> TransactionResolution:
        decided[message.body.decode()] = arg  # type: ignore[assignment]
        return arg  # type: ignore[return-value]

    async def check(message: StoredMessage) -> TransactionResolution:
        checked.append(message.body.decode())
        return TransactionResolution.COMMIT

    producer = TransactionProducer("TPG", namesrv.address, local_transaction=local, check=check)
    async with producer:
        for body, outcome in (
            ("commit", TransactionResolution.COMMIT),
            ("rollback", TransactionResolution.ROLLBACK),
            ("unknown", TransactionResolution.UNKNOWN),
        ):
            await producer.send_in_transaction(Message("Tx", body.encode()), outcome)
        for _ in range(60):
            if checked:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.3)
    assert checked == ["unknown"]
    visible = sorted([m.body for b in brokers for q in range(4) for m in await pull_all(b, "Tx", q)])
    assert visible == [b"commit", b"unknown"]


async def test_produce_cli(cluster) -> None:  # type: ignore[no-untyped-def]
    import json

    from click.testing import CliRunner

    from orbitmq.cli.main import main

    namesrv, brokers = cluster
    args = [
        "produce",
        "--namesrv",
        namesrv.address,
        "--topic",
        "CliOut",
        "--count",
        "5",
        "--body",
        "hello {i}",
        "--key",
        "k{i}",
        "--tag",
        "T",
        "--json",
    ]
    result = await asyncio.to_thread(CliRunner().invoke, main, args, catch_exceptions=False)
    *lines, summary = [json.loads(line) for line in result.output.splitlines()]
    assert len(lines) == 5 and {line["status"] for line in lines} == {"SEND_OK"}
    assert summary["summary"]["sent"] == 5 and summary["summary"]["failed"] == 0
    assert summary["summary"]["statuses"] == {"SEND_OK": 5} and summary["summary"]["rate_per_s"] > 0
    assert set(lines[0]) == {"status", "msg_id", "offset_msg_id", "broker", "queue", "queue_offset"}
    stored = sorted(
        [m for b in brokers for q in range(4) for m in await pull_all(b, "CliOut", q)], key=lambda m: m.body
    )
    assert [m.body for m in stored] == [f"hello {i}".encode() for i in range(5)]
    assert [m.keys for m in stored] == [(f"k{i}",) for i in range(5)] and {m.tags for m in stored} == {"T"}
    batch = await asyncio.to_thread(
        CliRunner().invoke,
        main,
        [
            "produce",
            "--namesrv",
            namesrv.address,
            "--topic",
            "CliOut",
            "--count",
            "6",
            "--batch",
            "3",
            "--json",
        ],
    )
    assert len(batch.output.splitlines()) == 2 + 1  # two sends of three, the summary
    bad = await asyncio.to_thread(
        CliRunner().invoke, main, ["produce", "--namesrv", namesrv.address, "--topic", "no good", "--json"]
    )
    assert bad.exit_code == 1 and "'no good'" in bad.output


async def test_produce_cli_properties_reach_sql92_filters(cluster) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from orbitmq.cli.main import main

    namesrv, brokers = cluster
    for region, a in (("eu", "1"), ("us", "5")):
        args = ["produce", "--namesrv", namesrv.address, "--topic", "Props", "--body", region]
        args += ["--property", f"region={region}", "--property", f"a={a}"]
        result = await asyncio.to_thread(CliRunner().invoke, main, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert "sent 1 of 1 message(s)" in result.output and "0 failed" in result.output
    stored = [m for b in brokers for q in range(4) for m in await pull_all(b, "Props", q)]
    assert sorted((m.body, m.properties["region"], m.properties["a"]) for m in stored) == [
        (b"eu", "eu", "1"),
        (b"us", "us", "5"),
    ]
    bad = await asyncio.to_thread(
        CliRunner().invoke, main, ["produce", "--namesrv", namesrv.address, "--topic", "P", "--property", "x"]
    )
    assert bad.exit_code == 2 and "'x' must be KEY=VALUE" in bad.output
    for name in ("UNIQ_KEY", "DELAY", "TAGS"):
        args = ["produce", "--namesrv", namesrv.address, "--topic", "Props", "--property", f"{name}=2"]
        system = await asyncio.to_thread(CliRunner().invoke, main, args)
        assert system.exit_code == 2, system.output
        assert f"property '{name}' is reserved for the system" in system.output, system.output
    stored = [m for b in brokers for q in range(4) for m in await pull_all(b, "Props", q)]
    assert len(stored) == 2  # nothing more was sent


async def test_final_send_failure_is_one_line(tmp_path: Path) -> None:
    """A name server whose only broker is gone (it died without unregistering): the CLI retries
    for its send timeout, then says what failed in one line and exits 1 — no gRPC dump."""
    import json
    import os
    import socket
    import subprocess

    import grpc

    from orbitmq.v1 import common_pb2, nameserver_pb2, nameserver_pb2_grpc

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{probe.getsockname()[1]}"
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None))
    await namesrv.start()
    try:
        async with grpc.aio.insecure_channel(namesrv.address) as channel:
            await nameserver_pb2_grpc.NameServerStub(channel).RegisterBroker(
                nameserver_pb2.RegisterBrokerRequest(
                    cluster="DefaultCluster",
                    broker_name="broker-gone",
                    broker_addr=dead,
                    broker_id=0,
                    topic_configs={
                        "Orders": common_pb2.TopicConfig(
                            topic_name="Orders", read_queue_nums=2, write_queue_nums=2, perm=6
                        )
                    },
                    data_version=common_pb2.DataVersion(timestamp_ms=1, counter=1),
                )
            )
        command = [sys.executable, "-m", "orbitmq.cli.main", "produce", "--namesrv", namesrv.address]
        command += ["--topic", "Orders", "--count", "3", "--send-timeout-ms", "1500"]
        runs = [
            await asyncio.to_thread(
                subprocess.run, command + extra, capture_output=True, text=True, timeout=60, env=os.environ
            )
            for extra in ([], ["--json"])
        ]
    finally:
        await namesrv.close()
    for run in runs:
        assert run.returncode == 1, run.stderr
        assert "Traceback" not in run.stderr and "AioRpcError" not in run.stderr, run.stderr
    text, as_json = runs
    error, summary = text.stderr.splitlines()
    assert error.startswith(f"orbitmq produce: send to topic Orders failed on broker broker-gone ({dead}): ")
    assert "UNAVAILABLE" in error and "s of retries" in error, error
    assert summary.startswith("orbitmq produce: sent 0 of 3 message(s)") and "1 failed" in summary
    assert text.stdout == ""
    [json_error] = as_json.stderr.splitlines()
    assert json_error.startswith("orbitmq produce: send to topic Orders failed on broker broker-gone")
    assert json.loads(as_json.stdout)["summary"]["failed"] == 1
