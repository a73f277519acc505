"""Several name servers, some of them down: every client path tries each one before giving up
and keeps using the one that answered (RocketMQ clients rotate the same way)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from clusterkit import Cluster, eventually, start_broker, start_cluster, stop_broker

from orbitmq.client.admin import Admin
from orbitmq.client.channels import HEDGE_DELAY_S, Channels
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.common.rpc import RpcFailure
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.v1 import nameserver_pb2

pytestmark = pytest.mark.timeout(90)


def closed_port() -> int:
    """A port nothing listens on: connections are refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def black_hole() -> Iterator[str]:
    """A port that accepts TCP connections and never answers: a hung or firewalled name server."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path)
    async with Admin(running.address) as admin:
        await admin.create_topic("Fallback", read_queue_nums=2, write_queue_nums=2)
    yield running
    await running.close()


async def cluster_info(channels: Channels, timeout_s: float = 5) -> object:
    return await channels.namesrv_call("GetClusterInfo", nameserver_pb2.GetClusterInfoRequest(), timeout_s)


async def test_a_dead_first_name_server_is_passed_over_every_time(cluster: Cluster) -> None:
    for dead_first in (True, False):
        dead = f"127.0.0.1:{closed_port()}"
        addresses = f"{dead};{cluster.address}" if dead_first else f"{cluster.address};{dead}"
        channels = Channels(addresses)
        try:
            for _ in range(6):
                info = await cluster_info(channels)
                assert "broker-a" in info.broker_addr_table  # type: ignore[attr-defined]
        finally:
            await channels.close()


async def test_the_name_server_that_answered_is_asked_first_next_time(
    cluster: Cluster, black_hole: str
) -> None:
    """A hung first name server costs the first call the hedge delay, not the timeout (it
    waited out the whole 5 s timeout in every new process before)."""
    channels = Channels(f"{black_hole};{cluster.address}")
    try:
        started = time.monotonic()
        await cluster_info(channels, timeout_s=5)
        took = time.monotonic() - started
        assert HEDGE_DELAY_S <= took < 2, (
            f"first call {took:.2f} s: the next name server is asked after the delay"
        )
        assert channels.unanswered == {black_hole}
        started = time.monotonic()
        for _ in range(5):
            await cluster_info(channels, timeout_s=1)
        assert time.monotonic() - started < 1, "later calls went straight to the live name server"
    finally:
        await channels.close()


async def test_all_down_names_every_address_in_one_error() -> None:
    dead = [f"127.0.0.1:{closed_port()}" for _ in range(3)]
    channels = Channels(";".join(dead))
    try:
        with pytest.raises(RpcFailure) as raised:
            await cluster_info(channels, timeout_s=1)
    finally:
        await channels.close()
    message = str(raised.value)
    assert all(address in message for address in dead), message
    assert "ORBITMQ_NAMESRV" in message


async def test_any_subset_down_while_one_is_up(tmp_path: Path) -> None:
    """Name servers go down and come back one at a time; a client (and a broker registering
    with all of them) keeps working through each step."""
    ports = [closed_port(), closed_port()]
    addresses = ";".join(f"127.0.0.1:{port}" for port in ports)

    async def start(port: int) -> NameServer:
        server = NameServer(NameServerSettings(listen=f"127.0.0.1:{port}", metrics_listen=None))
        await server.start()
        return server

    servers = {port: await start(port) for port in ports}
    # the heartbeat is what tells a restarted name server about the broker: shortened here
    running = await start_broker(tmp_path / "broker-a", namesrv=addresses, register_interval_ms=300)
    channels = Channels(addresses)

    async def broker_visible() -> bool:
        try:
            info = await cluster_info(channels, timeout_s=1)
        except RpcFailure:
            return False
        return "broker-a" in info.broker_addr_table  # type: ignore[attr-defined]

    try:
        assert await broker_visible()
        for down, up in ((ports[0], ports[1]), (ports[1], ports[0])):
            await servers.pop(down).close()
            if up not in servers:
                servers[up] = await start(up)
            step = f"name server {up} up, {down} down"
            await eventually(broker_visible, 10, lambda step=step: step)
    finally:
        await channels.close()
        await stop_broker(running)
        for server in servers.values():
            await server.close()


def cli(namesrv: str, *args: str, home: Path) -> tuple[int, str, str]:
    import subprocess

    process = subprocess.run(
        [sys.executable, "-m", "orbitmq.cli.main", *args],
        env={**os.environ, "ORBITMQ_NAMESRV": namesrv, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return process.returncode, process.stdout, process.stderr


async def test_the_cli_works_with_a_dead_first_name_server(cluster: Cluster) -> None:
    namesrv = f"127.0.0.1:{closed_port()};{cluster.address}"
    home = cluster.root

    code, out, err = await asyncio.to_thread(cli, namesrv, "admin", "cluster", "list", "--json", home=home)
    assert code == 0, err
    assert "broker-a" in out
    code, out, err = await asyncio.to_thread(
        cli, namesrv, "admin", "topic", "route", "--topic", "Fallback", "--json", home=home
    )
    assert code == 0, err
    code, out, err = await asyncio.to_thread(
        cli, namesrv, "produce", "--topic", "Fallback", "--count", "5", "--body", "m{i}", "--json", home=home
    )
    assert code == 0, err
    code, out, err = await asyncio.to_thread(
        cli,
        namesrv,
        "consume",
        "--group",
        "FallbackG",
        "--topic",
        "Fallback",
        "--from",
        "first",
        "--count",
        "5",
        "--json",
        home=home,
    )
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    bodies = sorted(r["body"] for r in records if "summary" not in r)
    assert bodies == [f"m{i}" for i in range(5)]


async def test_library_producer_and_admin_with_a_dead_first_name_server(cluster: Cluster) -> None:
    namesrv = f"127.0.0.1:{closed_port()};{cluster.address}"
    async with Producer("FallbackP", namesrv) as producer:
        for i in range(5):
            await producer.send(Message("Fallback", f"p{i}".encode()))
    async with Admin(namesrv) as admin:
        assert "Fallback" in await admin.topic_list()


async def test_the_cli_takes_a_comma_separated_list_and_names_a_bad_entry(cluster: Cluster) -> None:
    """``--namesrv "a:1,b:2"`` was taken as one address ``a:1,b`` port 2 and failed with a
    connection error; both separators work, and a malformed entry is a usage error naming it."""
    home = cluster.root
    listed = f"127.0.0.1:{closed_port()},{cluster.address}"
    code, out, err = await asyncio.to_thread(
        cli, "", "admin", "cluster", "list", "--json", "--namesrv", listed, home=home
    )
    assert code == 0, err
    assert "broker-a" in out
    code, out, err = await asyncio.to_thread(
        cli, "", "admin", "cluster", "list", "--namesrv", f"{cluster.address},localhost", home=home
    )
    assert code == 2, (out, err)
    assert "entry 'localhost' has no ':port'" in err and "separated by ';' or ','" in err, err


async def test_a_hung_name_server_holds_up_neither_the_start_nor_the_others(
    tmp_path: Path, black_hole: str
) -> None:
    """The broker starts about a second after a live name server answered, not after the hung
    one's 5 s timeout; a live name server restarted empty learns the broker at the next round,
    while every registration to the hung one still waits for its timeout (before, each round
    waited for every name server: a round took 5 s)."""
    port = closed_port()
    live = f"127.0.0.1:{port}"

    async def start_namesrv() -> NameServer:
        server = NameServer(NameServerSettings(listen=live, metrics_listen=None))
        await server.start()
        return server

    server = await start_namesrv()
    started = time.monotonic()
    running = await start_broker(
        tmp_path / "broker-a", namesrv=f"{black_hole};{live}", register_interval_ms=300
    )
    took = time.monotonic() - started
    channels = Channels(live)

    async def broker_visible() -> bool:
        info = await cluster_info(channels, timeout_s=1)
        return "broker-a" in info.broker_addr_table  # type: ignore[attr-defined]

    try:
        assert took < 3, f"the broker took {took:.2f} s to start with a hung name server"
        assert await broker_visible(), "registered with the live name server before it said it was up"
        for _ in range(2):  # the second time a registration to the hung one is under way
            await server.close()
            server = await start_namesrv()  # an empty route table on the same address
            restarted = time.monotonic()
            await eventually(broker_visible, 3, lambda: "the restarted name server never learnt the broker")
            print(f"start {took:.2f} s, re-registration {time.monotonic() - restarted:.2f} s")
    finally:
        await channels.close()
        await stop_broker(running)
        await server.close()
