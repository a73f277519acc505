"""Slave -> master replication over mutual TLS: a SYNC_MASTER's sends are acknowledged only
once its slave, connected with its certificate, holds them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from brokerkit import TEST_SETTINGS
from clusterkit import eventually
from tlskit import Pki

from orbitmq.broker.server import Broker
from orbitmq.broker.settings import BrokerSettings
from orbitmq.client import Message, Producer, SendStatus
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings

pytestmark = pytest.mark.timeout(120)


async def test_sync_master_and_slave_replicate_over_mutual_tls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pki = Pki(tmp_path / "pki")
    server = pki.issue("server")
    client = pki.issue("client", ("orbitmq-client",))
    tls: dict[str, Any] = {
        "tls_cert": server.cert,
        "tls_key": server.key,
        "tls_ca": pki.ca,
        "tls_require_client_cert": True,
    }
    monkeypatch.setenv("ORBITMQ_TLS_CA", str(pki.ca))
    monkeypatch.setenv("ORBITMQ_TLS_CERT", str(client.cert))
    monkeypatch.setenv("ORBITMQ_TLS_KEY", str(client.key))
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None, **tls))
    await namesrv.start()
    common = {**TEST_SETTINGS, **tls, "namesrv": namesrv.address, "broker_name": "broker-a"}
    common["replica_config_interval_ms"] = 100
    master = Broker(BrokerSettings(data_dir=tmp_path / "master", broker_role="SYNC_MASTER", **common))
    slave = Broker(BrokerSettings(data_dir=tmp_path / "slave", broker_role="SLAVE", broker_id=1, **common))
    await master.start()
    await slave.start()
    try:
        assert slave.replication is not None
        await eventually(slave.replication.connected.is_set, 20, lambda: "the slave never reached its master")
        async with Producer("tls-ha", namesrv.address) as producer:
            statuses = [
                (await producer.send(Message("Replicated", f"{i}".encode()))).status for i in range(5)
            ]
        assert statuses == [SendStatus.SEND_OK] * 5
        assert slave.store.commitlog.max_offset == master.store.commitlog.max_offset > 0
    finally:
        await slave.close()
        await master.close()
        await namesrv.close()
