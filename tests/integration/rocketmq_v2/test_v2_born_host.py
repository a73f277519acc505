"""A message sent through ``orbitmq proxy`` is born at its sending client, not at the proxy.

Two official producers send at once, so the proxy's producer coalesces their sends while a
call is in flight, and one sends a transactional message: every stored message's born host
must be its own client's connection to the proxy (the address the proxy's client registry
holds for that client id, and a local port of a socket of this process connected to the
proxy), seen alike by orbitmq's own pull consumer (the record, as ``orbitmq admin message``
prints it) and by the official SimpleConsumer (``system_properties.born_host``). Before, each
was the proxy's own connection to the broker.

Sends of different clients share broker calls (a call mixing born hosts names each message's
own): four clients sending one message at a time need fewer calls than messages, NORMAL and
FIFO alike, and each message is still stored with its own client's born host.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from orbitmq.client import Message as OrbitMessage
from orbitmq.client import Producer
from orbitmq.client.retry import SendFailed
from orbitmq.v1.broker_pb2 import ErrorReason

sys.path.insert(0, str(Path(__file__).parent))
from v2kit import (
    Checker,
    TransactionResolution,
    V2Cluster,
    call,
    message,
    official_producer,
    official_simple_consumer,
    v2_cluster,
)

pytestmark = pytest.mark.timeout(120)

TOPIC = "V2BornHost"
GROUP = "v2-born-host"
PER_PRODUCER = 12


def local_ports_connected_to(port: int) -> set[int]:
    """Local ports of established TCP connections to 127.0.0.1:``port`` (``/proc/net/tcp``,
    IPv4 and IPv4-mapped IPv6): the client ends of connections to the proxy."""
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, state = fields[1], fields[2], fields[3]
            if state == "01" and int(remote.rsplit(":", 1)[1], 16) == port:
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


async def send_many(producer: Any, name: str) -> dict[str, str]:
    """``PER_PRODUCER`` sends of ``producer`` outstanding at once (``send_async`` in one thread:
    a blocking send per thread would take the loop's default executor); message id → body."""
    bodies = [f"{name}-{i}" for i in range(PER_PRODUCER)]

    def send_all() -> list[Any]:
        futures = [producer.send_async(message(TOPIC, b.encode())) for b in bodies]
        return [f.result() for f in futures]

    receipts = await call(send_all)
    return {r.message_id: b for r, b in zip(receipts, bodies, strict=True)}


async def test_each_message_is_born_at_its_own_client_through_coalescing_and_transactions(
    tmp_path: Path,
) -> None:
    async with v2_cluster(tmp_path) as cluster:
        proxy_port = int(cluster.endpoint.rsplit(":", 1)[1])
        async with (
            official_producer(cluster.endpoint, [TOPIC], Checker(TransactionResolution.ROLLBACK)) as a,
            official_producer(cluster.endpoint, [TOPIC]) as b,
        ):
            await asyncio.gather(
                call(a.send, message(TOPIC, b"warm-up")), call(b.send, message(TOPIC, b"b-w"))
            )
            calls_before = cluster.broker.broker.metrics.send_latency.count
            sent_a, sent_b = await asyncio.gather(send_many(a, "a"), send_many(b, "b"))
            calls = cluster.broker.broker.metrics.send_latency.count - calls_before
            assert calls < 2 * PER_PRODUCER, f"{calls} broker calls: the sends were not coalesced"
            transaction = await call(a.begin_transaction)
            await call(a.send, message(TOPIC, b"a-tx"), transaction)
            await call(transaction.commit)
            hosts = {
                "a": cluster.proxy.clients.get(a.client_id).address,  # type: ignore[union-attr]
                "b": cluster.proxy.clients.get(b.client_id).address,  # type: ignore[union-attr]
            }
            client_ports = local_ports_connected_to(proxy_port)

        assert hosts["a"] != hosts["b"]
        for host in hosts.values():
            address, _, port = host.rpartition(":")
            assert address == "127.0.0.1" and int(port) in client_ports, (host, client_ports)
        bodies = ["warm-up", "b-w", *sent_a.values(), *sent_b.values(), "a-tx"]
        expected = {body: hosts["a" if body == "warm-up" else body[0]] for body in bodies}

        stored = await cluster.receive(TOPIC, len(expected))
        assert {m.body.decode(): m.born_host for m in stored} == expected

        async with official_simple_consumer(cluster.endpoint, GROUP, [TOPIC]) as consumer:
            received: dict[str, str] = {}
            for _ in range(40):
                for m in await call(consumer.receive, 32, 30):
                    received[m.body.decode()] = m.born_host
                    await call(consumer.ack, m)
                if len(received) >= len(expected):
                    break
        assert received == expected


async def test_the_broker_stores_a_named_born_host_and_refuses_one_it_cannot_store(tmp_path: Path) -> None:
    """What the proxy relies on, with orbitmq's own producer: a send naming its born host is
    stored with it, coalesced or alone (a timed message goes alone), and one that is not an IP
    address and a port is refused as MESSAGE_ILLEGAL naming it (the record has no room for a
    name)."""
    async with v2_cluster(tmp_path) as cluster, Producer("born-host", cluster.namesrv.address) as producer:
        await producer.send(OrbitMessage("BornHostNamed", b"coalesced", born_host="10.1.2.3:4567"))
        await producer.send(OrbitMessage("BornHostNamed", b"timed", born_host="[2001:db8::7]:99", delay_ms=1))
        await producer.send(OrbitMessage("BornHostNamed", b"own"))
        stored = {m.body: m.born_host for m in await cluster.receive("BornHostNamed", 3)}
        assert stored[b"coalesced"] == "10.1.2.3:4567"
        assert stored[b"timed"] == "[2001:db8::7]:99"
        assert stored[b"own"].startswith("127.0.0.1:") and stored[b"own"] != "127.0.0.1:0"

        with pytest.raises(SendFailed) as refused:
            await producer.send(OrbitMessage("BornHostNamed", b"named", born_host="app-host-1:4567"))
        assert refused.value.reason == ErrorReason.MESSAGE_ILLEGAL
        assert "app-host-1:4567" in str(refused.value)


def broker_calls(cluster: V2Cluster) -> int:
    """SendMessage calls the broker has answered."""
    return cluster.broker.broker.metrics.send_latency.count


async def test_sends_of_different_clients_share_broker_calls_each_born_at_its_client(tmp_path: Path) -> None:
    """Four clients, each one send at a time (so a lane per client would make a call of every
    message): NORMAL sends, then FIFO sends of one message group, take fewer broker calls than
    messages, the calls mixing clients go by the broker's Python path, and every message is
    born at its own client (FIFO: each client's messages in its own send order)."""
    clients, per_client = 4, 10
    async with v2_cluster(tmp_path) as cluster:
        async with contextlib.AsyncExitStack() as stack:
            producers = [
                await stack.enter_async_context(official_producer(cluster.endpoint, [TOPIC]))
                for _ in range(clients)
            ]
            await asyncio.gather(*(call(p.send, message(TOPIC, b"warm-up")) for p in producers))
            hosts = [cluster.proxy.clients.get(p.client_id).address for p in producers]  # type: ignore[union-attr]
            assert len(set(hosts)) == clients

            def send_each(fifo: bool) -> None:
                def send_one_at_a_time(n: int) -> None:
                    for i in range(per_client):
                        sent = message(TOPIC, f"{'f' if fifo else 'n'}{n}-{i}".encode())
                        if fifo:
                            sent.message_group = "shared"
                        producers[n].send(sent)

                with ThreadPoolExecutor(clients) as pool:
                    list(pool.map(send_one_at_a_time, range(clients)))

            calls: dict[bool, int] = {}
            python_path_before = cluster.broker.broker.servicer.python_path_sends
            for fifo in (False, True):
                before = broker_calls(cluster)
                await call(send_each, fifo)
                calls[fifo] = broker_calls(cluster) - before
            mixed = cluster.broker.broker.servicer.python_path_sends - python_path_before

        sent = clients * per_client
        assert calls[False] < sent and calls[True] < sent, f"broker calls for {sent} sends each: {calls}"
        assert mixed > 0, "no broker call mixed the clients' messages"
        stored = await cluster.receive(TOPIC, clients + 2 * sent)
        assert len(stored) == clients + 2 * sent
        for m in stored:
            body = m.body.decode()
            if body != "warm-up":
                assert m.born_host == hosts[int(body[1:].split("-")[0])], (body, m.born_host, hosts)
        assert sorted(m.born_host for m in stored if m.body == b"warm-up") == sorted(hosts)
        fifo_stored = [m.body.decode() for m in stored if m.body.startswith(b"f")]
        assert len({m.queue_id for m in stored if m.body.startswith(b"f")}) == 1
        for n in range(clients):
            assert [b for b in fifo_stored if b.startswith(f"f{n}-")] == [
                f"f{n}-{i}" for i in range(per_client)
            ]
