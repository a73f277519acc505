"""GrpcServer: health, error details on the wire, metrics port, graceful stop — over real sockets."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from prometheus_client import Counter

from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.common.server import GrpcServer, split_host_port
from orbitmq.v1 import nameserver_pb2, nameserver_pb2_grpc
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(30)


def _fetch(url: str | None) -> str:
    assert url is not None
    with urllib.request.urlopen(url, timeout=5) as reply:
        return reply.read().decode()


async def _reflected_services(channel: grpc.aio.Channel) -> set[str]:
    """The services server reflection lists, as grpcurl would ask for them."""
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    async for reply in stub.ServerReflectionInfo(iter([request])):
        return {service.name for service in reply.list_services_response.service}
    return set()


class FailingNameServer(nameserver_pb2_grpc.NameServerServicer):
    async def QueryRoute(self, request, context):  # type: ignore[no-untyped-def]
        raise RpcFailure(
            ErrorReason.TOPIC_NOT_EXIST, f"no route for topic {request.topic!r}", topic=request.topic
        )


@asynccontextmanager
async def _serving(server: GrpcServer) -> AsyncIterator[grpc.aio.Channel]:
    """``server`` with the failing name server, started, and a channel to it; stopped after."""
    servicer = FailingNameServer()
    server.add_service(
        "orbitmq.v1.NameServer", lambda s: nameserver_pb2_grpc.add_NameServerServicer_to_server(servicer, s)
    )
    await server.start()
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            yield channel
    finally:
        await server.stop(0.5)


async def test_health_errors_metrics_and_stop() -> None:
    server = GrpcServer("test", "127.0.0.1:0", metrics_listen="127.0.0.1:0")
    Counter("orbitmq_test_events_total", "test", registry=server.registry).inc(3)
    async with _serving(server) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(service="orbitmq.v1.NameServer"))
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        stub = nameserver_pb2_grpc.NameServerStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.QueryRoute(nameserver_pb2.QueryRouteRequest(topic="Nope"))
        assert caught.value.code() is grpc.StatusCode.NOT_FOUND
        failure = failure_of(caught.value)
        assert failure is not None and failure.reason == ErrorReason.TOPIC_NOT_EXIST
        assert failure.metadata == {"topic": "Nope"} and "'Nope'" in failure.message
        listed = await _reflected_services(channel)
        assert {"orbitmq.v1.NameServer", "grpc.health.v1.Health"} <= listed
        metrics = await asyncio.to_thread(_fetch, server.metrics_url)
        assert "orbitmq_test_events_total 3.0" in metrics
        await server.set_serving(False)
        reply = await health.Check(health_pb2.HealthCheckRequest(service=""))
        assert reply.status == health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.mark.parametrize("bad", ["9876", "host:", "host:70000", ":1"])
def test_bad_listen_addresses_are_named(bad: str) -> None:
    with pytest.raises(ValueError, match=repr(bad)):
        split_host_port(bad)


async def test_a_call_waits_on_one_request_whatever_the_services(monkeypatch: pytest.MonkeyPatch) -> None:
    """Handlers go in as generic handlers only. For each registered method grpc.aio keeps a
    pending request and, on every call, waits on all of them at once: the Broker service's
    methods made each send wait on 37 futures, about a fifth of a send's CPU."""
    fan_in: list[int] = []
    wait = asyncio.wait

    async def recording_wait(futures, *args, **kwargs):  # type: ignore[no-untyped-def]
        fan_in.append(len(futures))
        return await wait(futures, *args, **kwargs)

    monkeypatch.setattr(asyncio, "wait", recording_wait)
    async with _serving(GrpcServer("test", "127.0.0.1:0")) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for _ in range(5):
            await health.Check(health_pb2.HealthCheckRequest(service=""))
        with pytest.raises(grpc.aio.AioRpcError):
            await nameserver_pb2_grpc.NameServerStub(channel).QueryRoute(
                nameserver_pb2.QueryRouteRequest(topic="Nope")
            )
    assert fan_in, "grpc.aio no longer waits per call: this test has nothing left to check"
    assert max(fan_in) <= 2, f"a call waited on {max(fan_in)} pending requests"
