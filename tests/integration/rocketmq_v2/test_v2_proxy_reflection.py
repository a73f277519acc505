"""Server reflection on ``orbitmq proxy`` (what ``grpcurl list`` / ``describe`` use): the v2
service, generated into a private descriptor pool, is listed and resolvable with all its
methods and messages, beside health and reflection, through grpcio-reflection's client-side
``ProtoReflectionDescriptorDatabase`` over a real channel.

The proxy runs as its own process: in this test process the official client's modules have
put the same names into protobuf's default pool, which would hide a proxy that only looks
there."""

from __future__ import annotations

import asyncio
import sys

import grpc
import pytest
from google.protobuf import descriptor_pool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings

pytestmark = pytest.mark.timeout(60)

SERVICE = "apache.rocketmq.v2.MessagingService"


def describe(endpoint: str) -> tuple[list[str], list[str], list[str]]:
    """Services listed, the v2 service's methods, and the fields of ReceiveMessageRequest."""
    with grpc.insecure_channel(endpoint) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        pool = descriptor_pool.DescriptorPool(database)
        service = pool.FindServiceByName(SERVICE)
        receive = pool.FindMessageTypeByName("apache.rocketmq.v2.ReceiveMessageRequest")
        pool.FindServiceByName("grpc.health.v1.Health")
        return (
            sorted(database.get_services()),
            [m.name for m in service.methods],
            [f.name for f in receive.fields],
        )


async def test_reflection_lists_and_describes_the_v2_service() -> None:
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None))
    await namesrv.start()
    proxy = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "orbitmq.cli.main",
        *("proxy", "--listen", "127.0.0.1:0", "--metrics-listen", "", "--namesrv", namesrv.address),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        assert proxy.stdout is not None
        line = (await asyncio.wait_for(proxy.stdout.readline(), 20)).decode()
        assert line.startswith("proxy listening on "), line
        services, methods, fields = await asyncio.to_thread(describe, line.split()[3])
    finally:
        proxy.kill()
        await proxy.wait()
        await namesrv.close()
    assert services == sorted([SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"])
    assert {"QueryRoute", "ReceiveMessage", "PullMessage", "QueryOffset", "Telemetry"} <= set(methods)
    assert {"group", "message_queue", "invisible_duration", "auto_renew"} <= set(fields)
