"""One of three name servers hung (a SIGSTOPped process: it accepts connections and never
answers): brokers answer their clients without waiting for it, clients and the CLI pass it over
within a fraction of a second, and new topics and groups work as fast as without it.

Before the fix a broker awaited re-registration with every name server (5 s timeout) inside
topic create and inside the heartbeat that creates a group's retry topic, and a client whose
first name server hung waited out the whole timeout: a new group's first message took 35 s.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from clusterkit import FAST, Collector, eventually, start_broker, stop_broker

from orbitmq.client.admin import Admin
from orbitmq.client.consumer import PushConsumer
from orbitmq.client.consumer_types import ConsumeFromWhere, ConsumeStatus
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.v1 import nameserver_pb2, nameserver_pb2_grpc

pytestmark = pytest.mark.timeout(120)


@dataclass
class HungCluster:
    root: Path
    hung: str
    live: list[str]
    processes: list[asyncio.subprocess.Process]

    @property
    def hung_first(self) -> str:
        return ";".join([self.hung, *self.live])

    @property
    def live_only(self) -> str:
        return ";".join(self.live)


async def namesrv_process() -> tuple[asyncio.subprocess.Process, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "orbitmq.cli.main",
        "namesrv",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdout is not None
    line = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
    assert line.startswith("namesrv listening on "), line
    return process, line.split()[3]


@pytest.fixture
async def hung_cluster(tmp_path: Path) -> AsyncIterator[HungCluster]:
    """Three name server processes and a broker registered with all of them (the hung one
    first in its list); then the first name server is SIGSTOPped."""
    started = await asyncio.gather(*(namesrv_process() for _ in range(3)))
    processes = [process for process, _ in started]
    addresses = [address for _, address in started]
    running = None
    try:
        running = await start_broker(tmp_path / "broker-a", namesrv=";".join(addresses))
        async with Admin(addresses) as admin:
            await admin.create_topic("Hung", read_queue_nums=2, write_queue_nums=2)
        async with Producer("HungP", ";".join(addresses)) as producer:
            await producer.send(Message("Hung", b"first"))
        processes[0].send_signal(signal.SIGSTOP)
        yield HungCluster(tmp_path, addresses[0], addresses[1:], processes)
    finally:
        processes[0].send_signal(signal.SIGCONT)
        if running is not None:
            await stop_broker(running)
        for process in processes:
            process.kill()
            await process.wait()


async def route_known(address: str, topic: str) -> bool:
    async with grpc.aio.insecure_channel(address) as channel:
        try:
            await nameserver_pb2_grpc.NameServerStub(channel).QueryRoute(
                nameserver_pb2.QueryRouteRequest(topic=topic), timeout=2
            )
        except grpc.aio.AioRpcError:
            return False
    return True


async def test_topic_create_and_a_new_groups_first_message_do_not_wait_for_it(
    hung_cluster: HungCluster,
) -> None:
    # the broker answers at once, and the live name servers route the topic when create returns
    async with Admin(hung_cluster.live_only) as admin:
        started = time.monotonic()
        await admin.create_topic("HungNew", read_queue_nums=2, write_queue_nums=2)
        took = time.monotonic() - started
    assert took < 1.5, f"topic create took {took:.2f} s with a hung name server"
    for address in hung_cluster.live:
        assert await route_known(address, "HungNew"), f"{address} does not route HungNew yet"

    # a new group (its retry topic made by its first heartbeat), the hung server first in its list
    collector = Collector()
    consumer = PushConsumer(
        "HungNewGroup",
        hung_cluster.hung_first,
        listener=collector.listener("c", ConsumeStatus.CONSUME_SUCCESS),
        settings=FAST,
        consume_from=ConsumeFromWhere.FIRST_OFFSET,
    )
    consumer.subscribe("Hung")
    started = time.monotonic()
    await consumer.start()
    try:
        within = max(0.0, 3 - (time.monotonic() - started))
        await eventually(lambda: bool(collector.deliveries), within, lambda: "no message within 3 s")
        took = time.monotonic() - started
    finally:
        await consumer.close()
    assert [d.message.body for d in collector.deliveries] == [b"first"]
    print(f"new group's first message after {took:.2f} s")


def cli(namesrv: str, *args: str, home: Path) -> tuple[float, int, str]:
    import subprocess

    started = time.monotonic()
    process = subprocess.run(
        [sys.executable, "-m", "orbitmq.cli.main", *args],
        env={**os.environ, "ORBITMQ_NAMESRV": namesrv, "HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    return time.monotonic() - started, process.returncode, process.stdout + process.stderr


async def test_the_cli_with_the_hung_server_first_is_as_quick_as_without(hung_cluster: HungCluster) -> None:
    home = hung_cluster.root
    create = ("admin", "topic", "create", "--topic")
    healthy, code, out = await asyncio.to_thread(cli, hung_cluster.live_only, *create, "HungCli1", home=home)
    assert code == 0, out
    hung, code, out = await asyncio.to_thread(cli, hung_cluster.hung_first, *create, "HungCli2", home=home)
    assert code == 0, out
    print(f"topic create: {healthy:.2f} s healthy, {hung:.2f} s with the hung name server first")
    assert hung < healthy + 2, f"topic create: {hung:.2f} s against {healthy:.2f} s without the hung server"
    for address in hung_cluster.live:
        assert await route_known(address, "HungCli2")
