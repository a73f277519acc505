"""Sends coalesced while a call is in flight (``Producer(auto_batch=True)``, the default), against
a real name server and real in-process brokers: each caller gets its own result, order per key
and per queue holds under concurrency and across retries, and a refusal or a spent budget lands
on its own caller only."""

from __future__ import annotations

import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
from brokerkit import RunningBroker, start_broker, stop_broker

from orbitmq.client.message import Message, SendResult, SendStatus
from orbitmq.client.producer import Producer
from orbitmq.client.retry import SendFailed
from orbitmq.common.rpc import RpcFailure
from orbitmq.common.topics import Property
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.store.record import StoredMessage, decode
from orbitmq.v1 import broker_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(90)

MAX_BODY = 256 * 1024
"""The test brokers' largest body (brokerkit's settings)."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
async def namesrv() -> AsyncIterator[NameServer]:
    server = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None))
    await server.start()
    yield server
    await server.close()


@pytest.fixture
async def broker(namesrv: NameServer, tmp_path: Path) -> AsyncIterator[RunningBroker]:
    running = await start_broker(tmp_path / "a", namesrv=namesrv.address, broker_name="broker-a")
    yield running
    if not running.broker.closing:
        await stop_broker(running)


async def stored(running: RunningBroker, topic: str, queue_id: int, at_least: int = 0) -> list[StoredMessage]:
    """One queue's messages, once it holds ``at_least`` (the dispatcher builds queues a moment
    after a send's answer); pulled a reply's worth at a time."""
    messages: list[StoredMessage] = []
    for _ in range(200):
        reply = await running.stub.PullMessage(
            broker_pb2.PullMessageRequest(
                consumer_group="check",
                topic=topic,
                queue_id=queue_id,
                queue_offset=len(messages),
                max_msg_nums=1000,
                commit_offset=-1,
            )
        )
        messages.extend(decode(r) for r in reply.records)
        if not reply.records:
            if len(messages) >= at_least:
                break
            await asyncio.sleep(0.05)
    return messages


def calls(running: RunningBroker) -> int:
    """SendMessage calls the broker has answered."""
    return running.broker.metrics.send_latency.count


@pytest.mark.parametrize("auto_batch", [True, False], ids=["coalesced", "one-call-each"])
async def test_concurrent_sends_each_get_their_own_result(
    namesrv: NameServer, broker: RunningBroker, auto_batch: bool
) -> None:
    async with Producer("PG", namesrv.address, auto_batch=auto_batch) as producer:
        await producer.send(Message("Burst", b"warm-up"))
        before = calls(broker)
        results = await asyncio.gather(
            *(producer.send(Message("Burst", f"m{i}".encode(), tags="T", keys=[f"k{i}"])) for i in range(200))
        )
        used = calls(broker) - before
    if auto_batch:
        assert used < 50, f"200 concurrent sends took {used} calls"
    else:
        assert used == 200
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert len({r.msg_id for r in results}) == 200
    assert len({r.offset_msg_id for r in results}) == 200
    for i, result in enumerate(results):
        # Each result points at its own message: queue offset, offset id and unique key.
        queue = await stored(broker, "Burst", result.queue_id, result.queue_offset + 1)
        message = queue[result.queue_offset]
        assert message.body == f"m{i}".encode()
        assert message.properties[Property.UNIQ_KEY] == result.msg_id
        assert message.msg_id == result.offset_msg_id
        assert message.physical_offset == result.commit_log_offset
        assert message.tags == "T" and message.keys == (f"k{i}",)


async def test_send_async_futures_coalesce_and_callbacks_see_each_result(
    namesrv: NameServer, broker: RunningBroker
) -> None:
    seen: list[SendResult | BaseException | None] = []
    async with Producer("PG", namesrv.address) as producer:
        await producer.send(Message("Async", b"warm-up"))
        before = calls(broker)
        futures = [
            producer.send_async(Message("Async", f"a{i}".encode()), lambda r, e: seen.append(r or e))
            for i in range(100)
        ]
        futures.append(producer.send_async(Message("Async", "text")))  # type: ignore[arg-type]
        producer.send_oneway(Message("Async", b"oneway"))
        results = await asyncio.gather(*futures[:-1])
        with pytest.raises(TypeError, match="must be bytes"):
            await futures[-1]
    assert calls(broker) - before < 30
    assert sorted(r.msg_id for r in results) == sorted(r.msg_id for r in seen if isinstance(r, SendResult))
    bodies = [m.body for q in range(4) for m in await stored(broker, "Async", q)]
    assert b"oneway" in bodies and {f"a{i}".encode() for i in range(100)} <= set(bodies)


@pytest.mark.parametrize("auto_batch", [True, False], ids=["coalesced", "one-call-each"])
async def test_keys_keep_their_order_under_concurrency(
    namesrv: NameServer, broker: RunningBroker, auto_batch: bool
) -> None:
    """Sends called one after the other, without awaiting each, reach each key's queue in that
    order, from the first send of a new producer (no route known yet) on."""
    keys = [f"order-{k}" for k in range(6)]
    async with Producer("PG", namesrv.address, auto_batch=auto_batch) as producer:
        sends = [
            producer.send(Message("Keyed", f"{key}:{i}".encode()), sharding_key=key)
            for i in range(40)
            for key in keys
        ]
        results = await asyncio.gather(*sends)
    by_key: dict[str, set[tuple[str, int]]] = {}
    for result, i_key in zip(results, [(i, key) for i in range(40) for key in keys], strict=True):
        by_key.setdefault(i_key[1], set()).add((result.broker_name, result.queue_id))
    assert all(len(places) == 1 for places in by_key.values())
    for key in keys:
        ((_, queue_id),) = by_key[key]
        bodies = [
            m.body for m in await stored(broker, "Keyed", queue_id) if m.body.startswith(f"{key}:".encode())
        ]
        if auto_batch:
            assert bodies == [f"{key}:{i}".encode() for i in range(40)]
        else:
            # One call each, concurrently: a queue holds the key's messages in any order.
            assert sorted(bodies) == sorted(f"{key}:{i}".encode() for i in range(40))


async def test_sends_born_at_different_hosts_share_calls_and_keep_their_born_hosts(
    namesrv: NameServer, broker: RunningBroker
) -> None:
    """Messages born elsewhere (the RocketMQ 5 proxy's clients) coalesce with each other and with
    the producer's own, round robin and per key, and each is stored with its own born host; so
    does a batch of them."""
    hosts = [None, "10.0.0.1:1001", "10.0.0.2:2002", "[2001:db8::7]:99"]

    def born(i: int) -> str | None:
        return hosts[i % len(hosts)]

    async with Producer("PG", namesrv.address) as producer:
        await producer.send(Message("Born", b"warm-up"))
        await producer.send(Message("Born", b"warm-up"), sharding_key="key")
        before = calls(broker)
        await asyncio.gather(
            *(producer.send(Message("Born", f"r{i}".encode(), born_host=born(i))) for i in range(24))
        )
        round_robin = calls(broker) - before
        before = calls(broker)
        keyed = await asyncio.gather(
            *(
                producer.send(Message("Born", f"k{i}".encode(), born_host=born(i)), sharding_key="key")
                for i in range(24)
            )
        )
        by_key = calls(broker) - before
        await producer.send_batch([Message("Born", f"b{i}".encode(), born_host=born(i)) for i in range(4)])
    # One lane per topic (per queue): 24 concurrent sends of 4 born hosts need fewer calls than hosts.
    assert round_robin < len(hosts) and by_key < len(hosts), (round_robin, by_key)
    messages = [m for q in range(4) for m in await stored(broker, "Born", q) if m.body != b"warm-up"]
    expected = {
        f"{kind}{i}": born(i) for kind, count in (("r", 24), ("k", 24), ("b", 4)) for i in range(count)
    }
    assert sorted(m.body.decode() for m in messages) == sorted(expected)
    for m in messages:
        host = expected[m.body.decode()]
        if host is None:
            assert m.born_host.startswith("127.0.0.1:") and m.born_host != "127.0.0.1:0", m
        else:
            assert m.born_host == host, m
    in_key_queue = [
        m.body for m in await stored(broker, "Born", keyed[0].queue_id) if m.body.startswith(b"k")
    ]
    assert in_key_queue == [f"k{i}".encode() for i in range(24)]


async def test_refusal_lands_on_its_own_message(namesrv: NameServer, broker: RunningBroker) -> None:
    """A message the broker refuses travels in a coalesced call with others: they are stored,
    in order, and only its caller gets the refusal."""
    async with Producer("PG", namesrv.address) as producer:
        await producer.send(Message("Refused", b"warm-up"))
        sends = [
            producer.send(
                Message("Refused", b"x" * (MAX_BODY + 1) if i == 3 else f"r{i}".encode()), sharding_key="k"
            )
            for i in range(8)
        ]
        outcomes = await asyncio.gather(*sends, return_exceptions=True)
    refused = outcomes.pop(3)
    assert isinstance(refused, RpcFailure) and refused.reason == ErrorReason.MESSAGE_ILLEGAL
    assert all(isinstance(o, SendResult) for o in outcomes), outcomes
    queue_id = outcomes[0].queue_id  # type: ignore[union-attr]
    bodies = [m.body for m in await stored(broker, "Refused", queue_id) if m.body.startswith(b"r")]
    assert bodies == [f"r{i}".encode() for i in range(8) if i != 3]


async def test_order_and_budgets_across_a_broker_restart(namesrv: NameServer, tmp_path: Path) -> None:
    """The broker goes away while ordered sends are queued and in flight: sends with a short
    budget fail alone; the others are retried and stored in the order they were called."""
    listen = f"127.0.0.1:{_free_port()}"
    settings = {"namesrv": namesrv.address, "broker_name": "broker-a", "listen": listen}
    running = await start_broker(tmp_path / "a", **settings)
    async with Producer("PG", namesrv.address, send_timeout_ms=20_000) as producer:
        await producer.send(Message("Restart", b"warm-up"), sharding_key="k")
        first = [producer.send(Message("Restart", f"s{i}".encode()), sharding_key="k") for i in range(20)]
        first_done = asyncio.gather(*first)
        await asyncio.sleep(0)  # the first call is in flight
        await stop_broker(running)
        short = [
            producer.send(Message("Restart", b"short"), sharding_key="k", timeout_ms=300),
            producer.send(Message("Restart", b"short"), sharding_key="k", timeout_ms=300),
        ]
        second = [
            producer.send(Message("Restart", f"s{i}".encode()), sharding_key="k") for i in range(20, 40)
        ]
        pending = asyncio.gather(*short, *second, return_exceptions=True)
        await asyncio.sleep(1.5)
        running = await start_broker(tmp_path / "a", **settings)
        try:
            results = await first_done
            outcomes = await pending
            for outcome in outcomes[:2]:
                assert isinstance(outcome, SendFailed) and outcome.retriable, outcome
            assert all(isinstance(o, SendResult) for o in outcomes[2:]), outcomes
            queue_id = results[0].queue_id
            messages = await stored(running, "Restart", queue_id)
        finally:
            await stop_broker(running)
    seen: set[str] = set()
    bodies = []
    for message in messages:  # a call lost with the broker may have been stored: keep first copies
        key = message.properties[Property.UNIQ_KEY]
        if key not in seen and message.body.startswith(b"s"):
            seen.add(key)
            bodies.append(message.body)
    assert bodies == [f"s{i}".encode() for i in range(40)]


async def test_calls_keep_to_the_message_and_byte_limits(namesrv: NameServer, broker: RunningBroker) -> None:
    async with (
        Producer("PG", namesrv.address, auto_batch_max_messages=4) as by_count,
        Producer("PG", namesrv.address, auto_batch_max_bytes=3000) as by_bytes,
    ):
        for producer in (by_count, by_bytes):
            await producer.send(Message("Limits", b"warm-up"))
            before = calls(broker)
            results = await asyncio.gather(
                *(producer.send(Message("Limits", bytes(1024))) for _ in range(40))
            )
            assert all(r.status is SendStatus.SEND_OK for r in results)
            # 4 messages a call, or 2 of 1 KiB within 3000 bytes (40 sends: the first goes alone).
            least = 10 if producer is by_count else 20
            assert calls(broker) - before >= least


async def test_close_fails_the_sends_still_waiting(namesrv: NameServer, broker: RunningBroker) -> None:
    """Sends retrying against a broker that is gone end when the producer closes: they fail with
    a reason, none is left hanging."""
    producer = Producer("PG", namesrv.address, send_timeout_ms=60_000)
    await producer.start()
    await producer.send(Message("Closing", b"warm-up"), sharding_key="k")
    await stop_broker(broker)
    sends = [
        asyncio.ensure_future(producer.send(Message("Closing", b"m"), sharding_key="k")) for _ in range(5)
    ]
    await asyncio.sleep(0.5)
    assert not any(s.done() for s in sends)
    await asyncio.wait_for(producer.close(), 10)
    outcomes = await asyncio.wait_for(asyncio.gather(*sends, return_exceptions=True), 5)
    assert all(isinstance(o, RpcFailure) and "closed" in str(o) for o in outcomes), outcomes
