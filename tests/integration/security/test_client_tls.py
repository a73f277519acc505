"""The client library's TLS: ``tls=`` on every client (the environment not needed), a broker
that refuses the handshake ending a send or a pull at once with the cause, the sidecar's sends
reaching a TLS cluster, and a client CA bundle replaced on disk taken by the next client."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from brokerkit import TEST_SETTINGS
from tlskit import Pki, TlsCluster, start_tls_cluster

from orbitmq.broker.server import Broker
from orbitmq.broker.settings import BrokerSettings
from orbitmq.client.admin import Admin
from orbitmq.client.blocking import BlockingAdmin, BlockingPullConsumer
from orbitmq.client.consumer import PushConsumer
from orbitmq.client.consumer_types import ConsumeFromWhere, ConsumerSettings, ConsumeStatus
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.client.pull_consumer import PullConsumer
from orbitmq.client.retry import SendFailed
from orbitmq.common.tls import ClientTls, TlsError
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.sidecar.client import SidecarClient
from orbitmq.sidecar.server import Sidecar
from orbitmq.sidecar.settings import SidecarSettings
from orbitmq.store.record import StoredMessage
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(120)

FAST_S = 2.0
"""The most a refused handshake may take to end a send (its budget here is 10 s)."""


@pytest.fixture(autouse=True)
def _no_tls_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing here may work by way of ``ORBITMQ_TLS_*``: each client gets ``tls=``."""
    for name in ("ORBITMQ_TLS_CA", "ORBITMQ_TLS_CERT", "ORBITMQ_TLS_KEY", "ORBITMQ_TLS_SERVER_NAME"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
async def mutual(tmp_path: Path) -> AsyncIterator[TlsCluster]:
    running = await start_tls_cluster(tmp_path, mutual=True)
    yield running
    await running.close()


async def test_every_client_takes_tls_as_a_keyword(mutual: TlsCluster) -> None:
    """Mutual TLS, so a client that ignored ``tls=`` (plaintext, or TLS without a certificate)
    would be refused."""
    issued = mutual.pki.issue("app", ("app",))
    tls = ClientTls(tls_ca=mutual.pki.ca, tls_cert=issued.cert, tls_key=issued.key)
    address = mutual.address
    async with Admin(address, tls=tls) as admin:
        await admin.create_topic("KeywordTls", read_queue_nums=2, write_queue_nums=2)
    async with Producer("kw-producer", address, tls=tls) as producer:
        for index in range(4):
            await producer.send(Message("KeywordTls", f"kw {index}".encode()))
    pulled: list[bytes] = []
    async with PullConsumer("kw-puller", address, tls=tls) as puller:
        for queue in await puller.queues("KeywordTls"):
            pulled += [m.body for m in (await puller.pull(queue, 0)).messages]
    assert sorted(pulled) == [f"kw {index}".encode() for index in range(4)]

    consumed: list[bytes] = []
    done = asyncio.Event()

    async def listener(messages: list[StoredMessage]) -> ConsumeStatus:
        consumed.extend(m.body for m in messages)
        if len(consumed) >= 4:
            done.set()
        return ConsumeStatus.CONSUME_SUCCESS

    consumer = PushConsumer(
        "kw-consumer", address, listener=listener, consume_from=ConsumeFromWhere.FIRST_OFFSET, tls=tls
    )
    consumer.subscribe("KeywordTls")
    await consumer.start()
    try:
        await asyncio.wait_for(done.wait(), 30)
    finally:
        await consumer.close()
    assert sorted(consumed) == sorted(pulled)

    # the blocking facades pass it on too (run off this loop, which serves the cluster)
    with BlockingAdmin(address, tls=tls) as admin:
        assert [b.broker_name for b in await asyncio.to_thread(admin.brokers)] == ["broker-a"]
    with BlockingPullConsumer("kw-blocking", address, tls=tls) as blocking:
        queues = await asyncio.to_thread(blocking.queues, "KeywordTls")
    assert len(queues) == 2

    # the same clients without a certificate are refused by the mutual-TLS name server, at once
    with pytest.raises(TlsError, match="requires a client certificate"):
        async with Admin(address, tls=ClientTls(tls_ca=mutual.pki.ca)) as admin:
            await admin.create_topic("Refused")


@pytest.fixture
async def expired_broker(tmp_path: Path) -> AsyncIterator[tuple[NameServer, Pki]]:
    """A sound TLS name server whose one broker holds topic ``Expired`` and then takes an
    expired certificate (its files replaced): routes come back, and every new connection to
    the broker fails its handshake."""
    pki = Pki(tmp_path / "pki")
    server, own = pki.issue("server"), pki.issue("broker")
    namesrv = NameServer(
        NameServerSettings(
            listen="127.0.0.1:0", metrics_listen=None, tls_cert=server.cert, tls_key=server.key
        )
    )
    await namesrv.start()
    broker = Broker(
        BrokerSettings(
            data_dir=tmp_path / "broker",
            namesrv=namesrv.address,
            tls_cert=own.cert,
            tls_key=own.key,
            tls_ca=pki.ca,
            **TEST_SETTINGS,
        )
    )
    await broker.start()
    try:
        async with Admin(namesrv.address, tls=ClientTls(tls_ca=pki.ca)) as admin:
            await admin.create_topic("Expired", read_queue_nums=2, write_queue_nums=2)
        stale = pki.issue("stale", expired=True)
        own.key.write_bytes(stale.key.read_bytes())
        own.cert.write_bytes(stale.cert.read_bytes())
        yield namesrv, pki
    finally:
        await broker.close()
        await namesrv.close()


@pytest.mark.parametrize("auto_batch", [True, False], ids=["coalesced", "one-call-each"])
async def test_a_send_to_a_broker_refusing_the_handshake_fails_at_once(
    expired_broker: tuple[NameServer, Pki], auto_batch: bool
) -> None:
    namesrv, pki = expired_broker
    tls = ClientTls(tls_ca=pki.ca)
    async with Producer("expired", namesrv.address, tls=tls, auto_batch=auto_batch) as producer:
        started = time.monotonic()
        results = await asyncio.gather(
            *(producer.send(Message("Expired", b"x")) for _ in range(5)), return_exceptions=True
        )
        took = time.monotonic() - started
        with pytest.raises(SendFailed) as batch:
            await producer.send_batch([Message("Expired", b"a"), Message("Expired", b"b")])
    assert took < FAST_S, f"{took:.1f} s: the send retried instead of naming the cause"
    for failed in [*results, batch.value]:
        assert isinstance(failed, SendFailed), failed
        assert failed.reason == ErrorReason.NO_PERMISSION and not failed.retriable
        assert "TLS connection to" in str(failed) and "has expired" in str(failed)
        assert failed.attempts == 1


async def test_a_pull_from_a_broker_refusing_the_handshake_names_the_cause(
    expired_broker: tuple[NameServer, Pki],
) -> None:
    namesrv, pki = expired_broker
    tls = ClientTls(tls_ca=pki.ca)
    async with PullConsumer("expired-reader", namesrv.address, tls=tls) as puller:
        queue = (await puller.queues("Expired"))[0]  # the route, from the name server
        started = time.monotonic()
        with pytest.raises(TlsError, match="has expired"):
            await puller.pull(queue, 0)
    assert time.monotonic() - started < FAST_S


async def test_a_push_consumer_logs_why_a_broker_refuses_the_handshake_once(
    expired_broker: tuple[NameServer, Pki], caplog: pytest.LogCaptureFixture
) -> None:
    """Its rebalances and pulls are retried in the background: the log names the cause, once
    per broker."""
    namesrv, pki = expired_broker
    consumer = PushConsumer(
        "expired-consumer",
        namesrv.address,
        listener=lambda messages: ConsumeStatus.CONSUME_SUCCESS,
        settings=ConsumerSettings(exception_delay_ms=100),
        tls=ClientTls(tls_ca=pki.ca),
    )
    consumer.subscribe("Expired")
    with caplog.at_level(logging.WARNING, logger="orbitmq.client.consumer"):
        await consumer.start()
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not _refusals(caplog):  # noqa: ASYNC110 - bounded
                await asyncio.sleep(0.05)
            await asyncio.sleep(1)  # a few more failed pulls of each queue
        finally:
            await consumer.close()
    refusals = _refusals(caplog)
    assert len(refusals) == 1, refusals
    assert "cannot read from" in refusals[0] and "has expired" in refusals[0]


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "TLS connection to" in r.getMessage()]


async def test_sidecar_sends_and_consumes_through_a_tls_cluster(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sidecar → broker: its producer and its consumer reach the cluster with ``ORBITMQ_TLS_*``
    (docs/operations/security.md: the sidecar reaches the cluster as clients do)."""
    cluster = await start_tls_cluster(tmp_path)
    monkeypatch.setenv("ORBITMQ_TLS_CA", str(cluster.pki.ca))
    sidecar = Sidecar(
        SidecarSettings(
            namesrv=cluster.address,
            group="tls-side",
            subscriptions=["SideTls"],
            consume_from="first",
            listen="127.0.0.1:0",
            metrics_listen=None,
        )
    )
    try:
        await sidecar.start()
        async with SidecarClient(sidecar.address) as client:
            for index in range(3):
                await client.send("SideTls", f"side {index}".encode())
            received: list[str] = []

            async def read() -> None:
                async for delivery in client.deliveries(app_id="tls-side"):
                    received.append(delivery.body.decode())
                    await delivery.ack()
                    if len(received) == 3:
                        return

            await asyncio.wait_for(read(), 30)
        assert sorted(received) == ["side 0", "side 1", "side 2"]
    finally:
        await sidecar.drain()
        await cluster.close()


async def test_a_replaced_ca_bundle_is_read_by_the_next_client(tmp_path: Path) -> None:
    """A client's CA file is read when a channel opens: after the servers move to a new CA and
    the file becomes a bundle of both (a rotated Secret), new clients connect; nothing restarts."""
    old, new = Pki(tmp_path / "old", "old"), Pki(tmp_path / "new", "new")
    served = old.issue("server")
    namesrv = NameServer(
        NameServerSettings(
            listen="127.0.0.1:0", metrics_listen=None, tls_cert=served.cert, tls_key=served.key
        )
    )
    await namesrv.start()
    bundle = tmp_path / "client-ca.pem"
    bundle.write_bytes(old.ca.read_bytes())
    tls = ClientTls(tls_ca=bundle)
    try:
        async with Admin(namesrv.address, tls=tls) as admin:
            assert await admin.brokers() == []
        renewed = new.issue("renewed")  # the server's files change in place
        served.cert.write_bytes(renewed.cert.read_bytes())
        served.key.write_bytes(renewed.key.read_bytes())
        with pytest.raises(TlsError, match="not signed by a CA"):
            async with Admin(namesrv.address, tls=tls) as admin:
                await admin.brokers()
        bundle.write_bytes(old.ca.read_bytes() + new.ca.read_bytes())
        async with Admin(namesrv.address, tls=tls) as admin:
            assert await admin.brokers() == []
    finally:
        await namesrv.close()


async def test_a_long_lived_client_takes_a_rotated_ca_bundle_when_it_reconnects(tmp_path: Path) -> None:
    """The servers move to a new CA and the client's bundle file gets both; a producer and a
    pull consumer made before the rotation keep working once the broker restarts (their
    channels reconnect, and are opened again with the bundle, not refused with the old CA)."""
    old, new = Pki(tmp_path / "old", "old"), Pki(tmp_path / "new", "new")
    served = old.issue("server")
    servers_trust = tmp_path / "servers-ca.pem"  # the broker's own calls trust either CA
    servers_trust.write_bytes(old.ca.read_bytes() + new.ca.read_bytes())
    bundle = tmp_path / "client-ca.pem"
    bundle.write_bytes(old.ca.read_bytes())
    pem = {"tls_cert": served.cert, "tls_key": served.key}
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None, **pem))
    await namesrv.start()

    def broker_settings(listen: str) -> BrokerSettings:
        return BrokerSettings(
            data_dir=tmp_path / "broker",
            namesrv=namesrv.address,
            tls_ca=servers_trust,
            **{**TEST_SETTINGS, "listen": listen},
            **pem,
        )

    broker = Broker(broker_settings("127.0.0.1:0"))
    await broker.start()
    tls = ClientTls(tls_ca=bundle)
    producer = Producer("rotating", namesrv.address, tls=tls)
    puller = PullConsumer("rotating-reader", namesrv.address, tls=tls)
    try:
        await producer.start()
        async with Admin(namesrv.address, tls=tls) as admin:
            await admin.create_topic("Rotating", read_queue_nums=1, write_queue_nums=1)
        await producer.send(Message("Rotating", b"before"))
        queue = (await puller.queues("Rotating"))[0]
        assert [m.body for m in (await puller.pull(queue, 0)).messages] == [b"before"]

        renewed = new.issue("renewed")  # the rotation: servers' files in place, the client's bundle
        served.key.write_bytes(renewed.key.read_bytes())
        served.cert.write_bytes(renewed.cert.read_bytes())
        bundle.write_bytes(old.ca.read_bytes() + new.ca.read_bytes())
        address = broker.grpc.address
        await broker.close()  # the clients' connections to it drop; they reconnect to the new one
        broker = Broker(broker_settings(address))
        await broker.start()

        result = await producer.send(Message("Rotating", b"after"))
        assert result.queue_offset == 1
        assert [m.body for m in (await puller.pull(queue, 0)).messages] == [b"before", b"after"]
    finally:
        await puller.close()
        await producer.close()
        await broker.close()
        await namesrv.close()
