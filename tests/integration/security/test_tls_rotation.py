"""A server re-reads its certificate files when they change: new connections get the new
certificate without a restart, while a long-poll pull held on a connection made before keeps
working (its handshake is done)."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest
from brokerkit import TEST_SETTINGS
from tlskit import Issued, Pki, served_serial

from orbitmq.broker.server import Broker
from orbitmq.broker.settings import BrokerSettings
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.client.pull_consumer import PullConsumer
from orbitmq.common.tls import ServerTls
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings

pytestmark = pytest.mark.timeout(120)


def install(issued: Issued, secret: Path) -> None:
    """Put a certificate and key in place as a Secret's update would: each file replaced whole."""
    for source, name in ((issued.key, "tls.key"), (issued.cert, "tls.crt")):
        staged = secret / f".{name}.new"
        shutil.copyfile(source, staged)
        os.replace(staged, secret / name)


async def test_rotated_certificate_is_served_to_new_connections_and_old_streams_keep_going(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pki = Pki(tmp_path / "pki")
    first, second = pki.issue("first"), pki.issue("second")
    secret = tmp_path / "secret"
    secret.mkdir()
    install(first, secret)
    tls = {"tls_cert": secret / "tls.crt", "tls_key": secret / "tls.key", "tls_ca": pki.ca}
    monkeypatch.setenv("ORBITMQ_TLS_CA", str(pki.ca))
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None, **tls))
    await namesrv.start()
    broker = Broker(
        BrokerSettings(data_dir=tmp_path / "broker", namesrv=namesrv.address, **{**TEST_SETTINGS, **tls})
    )
    await broker.start()
    try:
        assert await asyncio.to_thread(served_serial, broker.address, pki.ca) == first.serial
        async with (
            Producer("rotation", namesrv.address) as producer,
            PullConsumer("rotation", namesrv.address) as consumer,
        ):
            await producer.send(Message("Rotated", b"before"))
            queues = await consumer.queues("Rotated")
            ends = {q: (await consumer.pull(q, 0)).next_begin_offset for q in queues}
            # long polls held on the connection made with the first certificate
            polls = {q: asyncio.ensure_future(consumer.pull(q, ends[q], wait_ms=20_000)) for q in queues}
            await asyncio.sleep(0.3)
            install(second, secret)

            assert await asyncio.to_thread(served_serial, broker.address, pki.ca) == second.serial
            assert await asyncio.to_thread(served_serial, namesrv.address, pki.ca) == second.serial
            assert broker.grpc.tls_reloader is not None and broker.grpc.tls_reloader.reloads == 1

            await producer.send(Message("Rotated", b"after"))
            done, _ = await asyncio.wait(polls.values(), timeout=10, return_when=asyncio.FIRST_COMPLETED)
            assert [m.body for task in done for m in task.result().messages] == [b"after"]
            for task in polls.values():
                task.cancel()
            await asyncio.gather(*polls.values(), return_exceptions=True)

        # a new client (new connections) works against the rotated certificate
        async with Producer("rotation-new", namesrv.address) as fresh:
            await fresh.send(Message("Rotated", b"fresh"))
    finally:
        await broker.close()
        await namesrv.close()


def test_a_half_rotated_pair_is_ignored_until_it_matches(tmp_path: Path) -> None:
    """A key replaced before its certificate (two writes, not one swap) keeps the old pair in
    service; the next handshake after the certificate arrives takes the new one."""
    from orbitmq.common.tls import CertificateReloader

    pki = Pki(tmp_path / "pki")
    first, second = pki.issue("first"), pki.issue("second")
    secret = tmp_path / "secret"
    secret.mkdir()
    install(first, secret)
    reloader = CertificateReloader(ServerTls(tls_cert=secret / "tls.crt", tls_key=secret / "tls.key"))
    assert reloader() is None  # unchanged: gRPC keeps what it has
    staged = secret / ".key"
    shutil.copyfile(second.key, staged)
    os.replace(staged, secret / "tls.key")
    assert reloader() is None and reloader.reloads == 0  # key of the second, certificate of the first
    staged = secret / ".crt"
    shutil.copyfile(second.cert, staged)
    os.replace(staged, secret / "tls.crt")
    assert reloader() is not None and reloader.reloads == 1
    assert reloader() is None
