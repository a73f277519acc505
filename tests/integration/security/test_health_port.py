"""The metrics port's plaintext ``/health``: what Kubernetes probes ask a server whose gRPC port
serves TLS only (the kubelet's gRPC probe speaks plaintext). It must follow the gRPC health
service: 200 while serving, 503 from the start of a graceful stop."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tlskit import Pki

from orbitmq.common.server import HEALTH_PATH
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings

pytestmark = pytest.mark.timeout(30)


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def test_health_follows_the_grpc_health_service_on_the_metrics_port(tmp_path: Path) -> None:
    pki = Pki(tmp_path / "pki")
    issued = pki.issue("server")
    settings = NameServerSettings(
        listen="127.0.0.1:0",
        metrics_listen="127.0.0.1:0",
        grace_ms=200,
        tls_cert=issued.cert,
        tls_key=issued.key,
        tls_ca=pki.ca,
    )
    server = NameServer(settings)
    await server.start()
    try:
        grpc_server = server.grpc
        assert grpc_server.metrics_url is not None
        health_url = grpc_server.metrics_url.removesuffix("/metrics") + HEALTH_PATH
        assert await asyncio.to_thread(_get, health_url) == (200, "SERVING\n")
        status, body = await asyncio.to_thread(_get, grpc_server.metrics_url)
        assert status == 200 and "# TYPE" in body, "the metrics are still served beside it"

        credentials = grpc.ssl_channel_credentials(root_certificates=pki.ca.read_bytes())
        async with grpc.aio.secure_channel(grpc_server.address, credentials) as channel:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=5
            )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING

        await grpc_server.set_serving(False)  # what a graceful stop does first
        assert await asyncio.to_thread(_get, health_url) == (503, "NOT_SERVING\n")
        await grpc_server.set_serving(True)
        assert (await asyncio.to_thread(_get, health_url))[0] == 200
    finally:
        await server.close()
