"""The name server over real sockets: in-process servers on port 0, and the real command."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from orbitmq.common.rpc import failure_of
from orbitmq.local.supervisor import READY_LINE
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.v1 import common_pb2, nameserver_pb2, nameserver_pb2_grpc
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(30)

BROKER_ADDR = "127.0.0.1:10911"


@dataclass
class RunningNameServer:
    server: NameServer
    stub: nameserver_pb2_grpc.NameServerStub


@pytest.fixture
async def namesrv() -> AsyncIterator[RunningNameServer]:
    settings = NameServerSettings(
        listen="127.0.0.1:0", metrics_listen="127.0.0.1:0", scan_interval_ms=50, grace_ms=200
    )
    server = NameServer(settings)
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            yield RunningNameServer(server, nameserver_pb2_grpc.NameServerStub(channel))
    finally:
        await server.close()


def _register_request(**overrides: object) -> nameserver_pb2.RegisterBrokerRequest:
    values: dict[str, object] = {
        "cluster": "DefaultCluster",
        "broker_name": "broker-a",
        "broker_addr": BROKER_ADDR,
        "broker_id": 0,
        "ha_addr": "127.0.0.1:10912",
        "topic_configs": {
            "Orders": common_pb2.TopicConfig(
                topic_name="Orders", read_queue_nums=4, write_queue_nums=4, perm=6, order=True
            )
        },
        "data_version": common_pb2.DataVersion(timestamp_ms=1, counter=1),
    }
    return nameserver_pb2.RegisterBrokerRequest(**{**values, **overrides})  # type: ignore[arg-type]


def _fetch(url: str | None) -> str:
    assert url is not None
    with urllib.request.urlopen(url, timeout=5) as reply:
        return reply.read().decode()


async def test_register_then_query_route(namesrv: RunningNameServer) -> None:
    stub = namesrv.stub
    reply = await stub.RegisterBroker(_register_request())
    assert (reply.master_addr, reply.ha_server_addr) == (BROKER_ADDR, "127.0.0.1:10912")
    await stub.RegisterBroker(
        _register_request(broker_addr="127.0.0.1:20911", broker_id=1, ha_addr="", topic_configs={})
    )
    route = await stub.QueryRoute(nameserver_pb2.QueryRouteRequest(topic="Orders"))
    assert route.topic == "Orders" and route.order_topic
    assert [(q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm) for q in route.queue_datas] == [
        ("broker-a", 4, 4, 6)
    ]
    assert [(d.cluster, d.broker_name, dict(d.broker_addrs)) for d in route.broker_datas] == [
        ("DefaultCluster", "broker-a", {0: BROKER_ADDR, 1: "127.0.0.1:20911"})
    ]
    info = await stub.GetClusterInfo(nameserver_pb2.GetClusterInfoRequest())
    assert list(info.cluster_addr_table["DefaultCluster"].broker_names) == ["broker-a"]
    assert info.live_brokers[BROKER_ADDR].data_version.counter == 1
    topics = await stub.GetTopicList(nameserver_pb2.GetTopicListRequest())
    assert list(topics.topics) == ["Orders"]

    await stub.DeleteTopic(nameserver_pb2.DeleteTopicInNameServerRequest(topic="Orders"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.QueryRoute(nameserver_pb2.QueryRouteRequest(topic="Orders"))
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND

    await stub.UnregisterBroker(
        nameserver_pb2.UnregisterBrokerRequest(
            cluster="DefaultCluster", broker_name="broker-a", broker_addr=BROKER_ADDR, broker_id=0
        )
    )
    info = await stub.GetClusterInfo(nameserver_pb2.GetClusterInfoRequest())
    assert dict(info.broker_addr_table["broker-a"].broker_addrs) == {1: "127.0.0.1:20911"}


async def test_silent_broker_expires_and_its_route_is_gone(namesrv: RunningNameServer) -> None:
    stub = namesrv.stub
    await stub.RegisterBroker(_register_request(heartbeat_timeout_ms=300))
    registered_at = time.monotonic()
    assert (await stub.QueryRoute(nameserver_pb2.QueryRouteRequest(topic="Orders"))).queue_datas
    while (await stub.GetClusterInfo(nameserver_pb2.GetClusterInfoRequest())).live_brokers:
        assert time.monotonic() - registered_at < 5, "broker not expired by the scan loop"
        await asyncio.sleep(0.05)
    assert time.monotonic() - registered_at >= 0.3
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.QueryRoute(nameserver_pb2.QueryRouteRequest(topic="Orders"))
    assert caught.value.code() is grpc.StatusCode.NOT_FOUND
    failure = failure_of(caught.value)
    assert failure is not None and failure.reason == ErrorReason.TOPIC_NOT_EXIST
    assert failure.message == "no route for topic 'Orders': no live broker serves it"
    assert failure.metadata == {"topic": "Orders"}
    assert list((await stub.GetTopicList(nameserver_pb2.GetTopicListRequest())).topics) == []
    metrics = await asyncio.to_thread(_fetch, namesrv.server.metrics_url)
    assert "orbitmq_nameserver_brokers_expired_total 1.0" in metrics
    assert "orbitmq_nameserver_brokers{" not in metrics


@pytest.mark.parametrize(
    ("overrides", "reason", "named"),
    [
        ({"broker_addr": "nohost"}, ErrorReason.INVALID_ARGUMENT, "'nohost'"),
        ({"broker_addr": "127.0.0.1:0"}, ErrorReason.INVALID_ARGUMENT, "'127.0.0.1:0'"),
        ({"ha_addr": "ha:99999"}, ErrorReason.INVALID_ARGUMENT, "'ha:99999'"),
        ({"broker_name": "bad name"}, ErrorReason.INVALID_NAME, "'bad name'"),
        ({"cluster": ""}, ErrorReason.INVALID_NAME, "cluster ''"),
        ({"broker_id": -1}, ErrorReason.INVALID_ARGUMENT, "broker_id -1"),
        ({"heartbeat_timeout_ms": -5}, ErrorReason.INVALID_ARGUMENT, "heartbeat_timeout_ms -5"),
        (
            {"topic_configs": {"bad topic": common_pb2.TopicConfig(read_queue_nums=1)}},
            ErrorReason.INVALID_NAME,
            "'bad topic'",
        ),
        (
            {"topic_configs": {"T": common_pb2.TopicConfig(read_queue_nums=-1)}},
            ErrorReason.INVALID_ARGUMENT,
            "read_queue_nums -1",
        ),
        ({"topic_configs": {"T": common_pb2.TopicConfig(perm=9)}}, ErrorReason.INVALID_ARGUMENT, "perm 9"),
    ],
)
async def test_invalid_registration_is_refused_naming_the_value(
    namesrv: RunningNameServer, overrides: dict[str, object], reason: int, named: str
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await namesrv.stub.RegisterBroker(_register_request(**overrides))
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    failure = failure_of(caught.value)
    assert failure is not None and failure.reason == reason
    assert named in failure.message
    info = await namesrv.stub.GetClusterInfo(nameserver_pb2.GetClusterInfoRequest())
    assert not info.live_brokers


async def test_invalid_topic_and_stale_epoch_are_refused(namesrv: RunningNameServer) -> None:
    stub = namesrv.stub
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.QueryRoute(nameserver_pb2.QueryRouteRequest(topic="no spaces!"))
    assert caught.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    failure = failure_of(caught.value)
    assert failure is not None and failure.reason == ErrorReason.INVALID_NAME
    assert "'no spaces!'" in failure.message

    await stub.RegisterBroker(_register_request(broker_addr="127.0.0.1:20911", epoch=2))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.RegisterBroker(_register_request(epoch=1))
    failure = failure_of(caught.value)
    assert failure is not None and failure.reason == ErrorReason.INVALID_ARGUMENT
    assert "epoch 1" in failure.message and "epoch 2" in failure.message


async def test_metrics_families(namesrv: RunningNameServer) -> None:
    stub = namesrv.stub
    await stub.RegisterBroker(_register_request())
    await stub.RegisterBroker(_register_request())
    await stub.QueryRoute(nameserver_pb2.QueryRouteRequest(topic="Orders"))
    with pytest.raises(grpc.aio.AioRpcError):
        await stub.QueryRoute(nameserver_pb2.QueryRouteRequest(topic="Nope"))
    metrics = await asyncio.to_thread(_fetch, namesrv.server.metrics_url)
    assert (
        'orbitmq_nameserver_brokers{broker_id="0",broker_name="broker-a",cluster="DefaultCluster"} 1.0'
        in metrics
    )
    assert "orbitmq_nameserver_registrations_total 2.0" in metrics
    assert "orbitmq_nameserver_brokers_expired_total 0.0" in metrics
    assert 'orbitmq_nameserver_route_queries_total{outcome="found"} 1.0' in metrics
    assert 'orbitmq_nameserver_route_queries_total{outcome="not_found"} 1.0' in metrics


# -- the real command ------------------------------------------------------------------------


def _namesrv_command() -> list[str]:
    """``orbitmq namesrv`` once registered with the main CLI; the command module until then."""
    from orbitmq.cli.main import main

    if "namesrv" in main.commands:
        return [sys.executable, "-m", "orbitmq.cli.main", "namesrv"]
    return [sys.executable, "-m", "orbitmq.cli.namesrv"]


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORBITMQ_NAMESRV_")}
    return {**env, **extra}


@pytest.fixture
async def spawn() -> AsyncIterator[object]:
    """Starts the command as a child process; kills whatever is left at the end."""
    processes: list[asyncio.subprocess.Process] = []

    async def start(*args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
        process = await asyncio.create_subprocess_exec(
            *_namesrv_command(),
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env or _clean_env(),
        )
        processes.append(process)
        return process

    yield start
    for process in processes:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_command_serves_health_and_stops_on_sigterm(spawn) -> None:  # type: ignore[no-untyped-def]
    process = await spawn("--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0")
    line = (await asyncio.wait_for(process.stdout.readline(), 20)).decode()
    match = READY_LINE.search(line)
    assert match, f"no startup line, got {line!r}"
    assert line.startswith("namesrv listening on 127.0.0.1:")
    address = match["address"]
    async with grpc.aio.insecure_channel(address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(service="orbitmq.v1.NameServer"), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert "orbitmq_nameserver_registrations_total" in await asyncio.to_thread(_fetch, match["metrics"])
    process.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(process.wait(), 10) == 0
    stderr = (await process.stderr.read()).decode()
    assert "Traceback" not in stderr


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (["--broker-expiry-ms", "-1"], {}, ["broker_expiry_ms", "-1", "--broker-expiry-ms"]),
        ([], {"ORBITMQ_NAMESRV_LISTEN": "nonsense"}, ["listen", "'nonsense'", "ORBITMQ_NAMESRV_LISTEN"]),
    ],
)
async def test_command_refuses_bad_settings(  # type: ignore[no-untyped-def]
    spawn, args: list[str], env: dict[str, str], named: list[str]
) -> None:
    process = await spawn(*args, env=_clean_env(**env))
    code = await asyncio.wait_for(process.wait(), 20)
    stderr = (await process.stderr.read()).decode()
    assert code == 2, stderr
    assert "Traceback" not in stderr
    for text in named:
        assert text in stderr
