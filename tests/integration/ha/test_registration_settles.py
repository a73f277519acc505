"""Registration at start-up does not wait a whole heartbeat interval for what is starting beside
it (the pods of a new cluster start together, in any order): a slave that registered before its
master learns the master within seconds, and a broker that started before its name server is
registered within seconds of the name server's start, with a 30 s heartbeat in both cases."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import eventually, start_cluster

sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
from brokerkit import start_broker, stop_broker

from orbitmq.client import Admin
from orbitmq.common.rpc import RpcFailure
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings

pytestmark = pytest.mark.timeout(60)
HEARTBEAT = {"register_interval_ms": 30_000}
SETTLED_WITHIN_S = 5.0


async def test_a_slave_registered_before_its_master_learns_it_within_seconds(tmp_path: Path) -> None:
    cluster = await start_cluster(tmp_path, brokers=())
    try:
        slave = await cluster.start_broker(
            "a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **HEARTBEAT
        )
        assert slave.broker.known_master_addr == ""
        master = await cluster.start_broker(
            "a-master", broker_name="broker-a", broker_role="SYNC_MASTER", **HEARTBEAT
        )
        started = time.monotonic()
        await eventually(
            lambda: slave.broker.known_master_addr == master.broker.address,
            SETTLED_WITHIN_S,
            lambda: "the slave did not learn its master before the next heartbeat",
        )
        await eventually(
            lambda: len(master.broker.ha_state().slaves) == 1,
            SETTLED_WITHIN_S,
            lambda: "the SYNC_MASTER has no slave streaming from it (sends would be SLAVE_NOT_AVAILABLE)",
        )
        print(f"slave following its master {time.monotonic() - started:.1f} s after the master started")
    finally:
        await cluster.close()


async def test_a_broker_started_before_its_name_server_registers_within_seconds(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = f"127.0.0.1:{port}"
    broker = await start_broker(tmp_path / "broker-a", namesrv=address, broker_name="broker-a", **HEARTBEAT)
    namesrv = NameServer(NameServerSettings(listen=address, metrics_listen=None))
    try:
        await namesrv.start()
        started = time.monotonic()
        async with Admin(address) as admin:

            async def registered() -> bool:
                try:
                    return "broker-a" in (await admin.cluster_info()).broker_addr_table
                except RpcFailure:  # in this process gRPC shares the broker's backed-off connection
                    return False

            await eventually(registered, SETTLED_WITHIN_S, lambda: "not registered before the next heartbeat")
        print(f"registered {time.monotonic() - started:.1f} s after the name server started")
    finally:
        await stop_broker(broker)
        await namesrv.close()
