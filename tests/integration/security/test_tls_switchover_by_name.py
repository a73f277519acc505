"""A switchover under TLS as the operator runs it on Kubernetes: brokers advertise a DNS name
(the only kind of name their certificate can hold in advance) while the operator dials their IP
addresses and checks each for its name (``GroupMember.server_name``). The slave to promote is
recognised among the master's streaming slaves by its advertised name, and the demoted master is
told to follow the new one by that name, which its TLS check accepts."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from brokerkit import TEST_SETTINGS
from tlskit import Pki

from orbitmq.broker.server import Broker
from orbitmq.broker.settings import BrokerSettings
from orbitmq.common.tls import ClientTls
from orbitmq.ha import Policy
from orbitmq.ha.group import BrokerGroupFailover, GroupMember
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings

pytestmark = pytest.mark.timeout(90)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _eventually(check: Callable[[], object], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def test_switchover_dialling_ips_checking_names(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    server = pki.issue("server", ("localhost",))  # no IP address in it
    tls = {"tls_cert": server.cert, "tls_key": server.key, "tls_ca": pki.ca}
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None, **tls))
    await namesrv.start()
    brokers: list[Broker] = []
    try:
        ports = [_free_port(), _free_port()]
        for broker_id, port in enumerate(ports):
            settings = BrokerSettings(
                data_dir=tmp_path / f"a-{broker_id}",
                namesrv=f"localhost:{namesrv.grpc.port}",
                **{**TEST_SETTINGS, **tls, "listen": f"127.0.0.1:{port}"},
                advertise_addr=f"localhost:{port}",
                store_host=f"127.0.0.1:{port}",
                broker_name="broker-a",
                broker_id=broker_id,
                broker_role="ASYNC_MASTER" if broker_id == 0 else "SLAVE",
                replica_config_interval_ms=200,
            )
            broker = Broker(settings)
            await broker.start()
            brokers.append(broker)
        master, slave = brokers
        await _eventually(
            lambda: master.replicas.connected, 15, "the slave never followed the master by name"
        )

        def member(name: str, port: int) -> GroupMember:
            return GroupMember(
                name, f"127.0.0.1:{port}", server_name="localhost", advertised=f"localhost:{port}"
            )

        members = [member("a-0", ports[0]), member("a-1", ports[1])]
        ca_only = ClientTls(tls_ca=pki.ca)
        group = BrokerGroupFailover(members, "ASYNC_MASTER", Policy(), tls=ca_only)
        decision = await group.switchover(int(time.time() * 1000))
        assert decision is not None and (decision.promote, decision.demote) == ("a-1", ("a-0",)), decision
        assert slave.ha_state().role == "ASYNC_MASTER"
        assert master.ha_state().role == "SLAVE"
        assert master.role.record.master_addr == f"localhost:{ports[1]}", "told to follow the name"
        await _eventually(lambda: slave.replicas.connected, 15, "the old master never followed the new one")

        # the IP alone does not pass the name check: the server name is what lets the operator in
        unnamed = BrokerGroupFailover(
            [GroupMember("a-0", f"127.0.0.1:{ports[0]}")], "ASYNC_MASTER", Policy(), tls=ca_only
        )
        assert await unnamed.step(int(time.time() * 1000)) is None, (
            "a member whose name does not match is not seen"
        )
    finally:
        for broker in reversed(brokers):
            await broker.close()
        await namesrv.close()
