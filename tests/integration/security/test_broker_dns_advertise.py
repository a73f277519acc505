"""A broker advertising a DNS name (a Kubernetes broker under TLS advertises its pod's stable
name, the only kind of name its certificate can hold in advance) with ``store_host`` its IP:
clients that trust the CA reach it by that name with no server-name override, and the offset
message ids it hands out still hold an IP address, as RocketMQ's storeHost must."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from brokerkit import TEST_SETTINGS
from tlskit import Pki

from orbitmq.broker.server import Broker
from orbitmq.broker.settings import BrokerSettings
from orbitmq.client import Message, Producer
from orbitmq.common.tls import ClientTls
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.store.message_id import read_msg_id

pytestmark = pytest.mark.timeout(60)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_broker_reached_by_its_name_writes_its_ip_into_message_ids(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    server = pki.issue("server", ("localhost",))  # a name only: no IP address in the certificate
    tls = {"tls_cert": server.cert, "tls_key": server.key, "tls_ca": pki.ca}
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None, **tls))
    await namesrv.start()
    port = _free_port()
    settings = BrokerSettings(
        data_dir=tmp_path / "broker",
        namesrv=f"localhost:{namesrv.grpc.port}",
        **{**TEST_SETTINGS, **tls, "listen": f"127.0.0.1:{port}"},
        advertise_addr=f"localhost:{port}",
        store_host=f"127.0.0.1:{port}",
        auto_create_topic=True,
    )
    broker = Broker(settings)
    await broker.start()
    try:
        assert broker.address == f"localhost:{port}", "registered under its name"
        client_tls = ClientTls(tls_ca=pki.ca)  # the CA alone: the names match
        async with Producer("DnsAdvertised", f"localhost:{namesrv.grpc.port}", tls=client_tls) as producer:
            result = await producer.send(Message("Named", b"hello"))
        assert result.offset_msg_id
        reading = read_msg_id(result.offset_msg_id)
        assert reading.offset is not None and reading.offset[0] == f"127.0.0.1:{port}", reading
    finally:
        await broker.close()
        await namesrv.close()


def test_store_host_must_be_an_address() -> None:
    with pytest.raises(ValueError, match="store_host"):
        BrokerSettings(store_host="nohost")
