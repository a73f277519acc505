"""``orbitmq proxy`` serving the RocketMQ 5 protocol over TLS in front of a TLS cluster: a v2
client with the CA sends through it, a plaintext one is refused at once naming the cause."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol import service_pb2_grpc
from tlskit import TlsCluster, start_tls_cluster

from orbitmq.client.pull_consumer import PullConsumer
from orbitmq.common.server import GRPC_OPTIONS
from orbitmq.common.tls import ClientTls, explain, open_channel
from orbitmq.proxy.server import Proxy
from orbitmq.proxy.settings import ProxySettings

pytestmark = pytest.mark.timeout(120)

CLIENT = (("x-mq-client-id", "tls-client@1"),)


@pytest.fixture
async def proxied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[TlsCluster, Proxy]]:
    cluster = await start_tls_cluster(tmp_path)
    monkeypatch.setenv("ORBITMQ_TLS_CA", str(cluster.pki.ca))  # the proxy's own calls to the cluster
    edge = cluster.pki.issue("proxy")
    proxy = Proxy(
        ProxySettings(
            listen="127.0.0.1:0",
            metrics_listen=None,
            namesrv=cluster.address,
            grace_ms=200,
            tls_cert=edge.cert,
            tls_key=edge.key,
        )
    )
    await proxy.start()
    try:
        yield cluster, proxy
    finally:
        await proxy.close()
        await cluster.close()


async def test_v2_send_through_a_tls_proxy(proxied: tuple[TlsCluster, Proxy]) -> None:
    cluster, proxy = proxied
    message = d.Message(topic=d.Resource(name="EdgeTls"), body=b"through the proxy")
    message.system_properties.message_id = "01TLS"
    message.system_properties.message_type = d.NORMAL
    async with open_channel(proxy.grpc.address, ClientTls(tls_ca=cluster.pki.ca), GRPC_OPTIONS) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        reply = await stub.SendMessage(s.SendMessageRequest(messages=[message]), metadata=CLIENT, timeout=10)
    assert reply.status.code == d.OK, reply.status
    async with PullConsumer("edge-reader", cluster.address) as consumer:
        bodies = [
            m.body for q in await consumer.queues("EdgeTls") for m in (await consumer.pull(q, 0)).messages
        ]
    assert bodies == [b"through the proxy"]


async def test_plaintext_v2_client_is_refused_at_once_naming_the_cause(
    proxied: tuple[TlsCluster, Proxy],
) -> None:
    _, proxy = proxied
    started = time.monotonic()
    async with grpc.aio.insecure_channel(proxy.grpc.address) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.QueryRoute(
                s.QueryRouteRequest(topic=d.Resource(name="EdgeTls")), metadata=CLIENT, timeout=10
            )
    refused = await explain(raised.value, proxy.grpc.address, None)
    assert time.monotonic() - started < 2
    assert refused is not None and "speaks TLS and this client plaintext" in str(refused)
