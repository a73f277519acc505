"""A name server and a broker serving TLS: the client library and the CLI produce and consume
through them, the broker registers over TLS, and mutual TLS refuses a client without a
certificate at once."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tlskit import TlsCluster, start_tls_cluster

from orbitmq.client.message import Message
from orbitmq.client.producer import Producer
from orbitmq.client.pull_consumer import PullConsumer
from orbitmq.common.tls import TlsError

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[TlsCluster]:
    running = await start_tls_cluster(tmp_path)
    yield running
    await running.close()


@pytest.fixture
async def mutual_cluster(tmp_path: Path) -> AsyncIterator[TlsCluster]:
    running = await start_tls_cluster(tmp_path, mutual=True)
    yield running
    await running.close()


async def _produce_and_pull(namesrv: str, topic: str, count: int) -> list[str]:
    async with Producer("tls-producer", namesrv) as producer:
        for index in range(count):
            await producer.send(Message(topic, f"secret {index}".encode()))
    bodies: list[str] = []
    async with PullConsumer("tls-reader", namesrv) as consumer:
        for queue in await consumer.queues(topic):
            result = await consumer.pull(queue, 0, max_nums=32)
            bodies += [message.body.decode() for message in result.messages]
    return sorted(bodies)


async def test_library_produces_and_pulls_over_tls(
    cluster: TlsCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORBITMQ_TLS_CA", str(cluster.pki.ca))
    assert cluster.namesrv.grpc.tls_reloader is not None and cluster.broker.grpc.tls_reloader is not None
    bodies = await _produce_and_pull(cluster.address, "Secured", 6)
    assert bodies == sorted(f"secret {index}" for index in range(6))


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ORBITMQ_TLS_")}
    return subprocess.run(
        [sys.executable, "-m", "orbitmq.cli.main", *args],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_cli_produces_and_consumes_over_tls(cluster: TlsCluster) -> None:
    ca = str(cluster.pki.ca)
    produced = await asyncio.to_thread(
        _cli,
        "produce",
        "--namesrv",
        cluster.address,
        "--tls-ca",
        ca,
        "--topic",
        "CliSecured",
        "--body",
        "over tls",
        "--count",
        "3",
    )
    assert produced.returncode == 0, produced.stderr
    consumed = await asyncio.to_thread(
        _cli,
        "consume",
        "--namesrv",
        cluster.address,
        "--topic",
        "CliSecured",
        "--group",
        "cli-tls",
        "--from",
        "first",
        "--count",
        "3",
        "--json",
        env={"ORBITMQ_TLS_CA": ca},
    )
    assert consumed.returncode == 0, consumed.stderr
    lines = [json.loads(line) for line in consumed.stdout.splitlines()]
    assert [line["body"] for line in lines if "body" in line] == ["over tls"] * 3


async def test_mutual_tls_takes_a_client_certificate_and_refuses_none_at_once(
    mutual_cluster: TlsCluster, tmp_path: Path
) -> None:
    from orbitmq.client.channels import Channels
    from orbitmq.common.tls import ClientTls

    client = mutual_cluster.pki.issue("client", ("orbitmq-client",), into=tmp_path / "client")
    with_cert = ClientTls(tls_ca=mutual_cluster.pki.ca, tls_cert=client.cert, tls_key=client.key)
    channels = Channels(mutual_cluster.address, tls=with_cert)
    try:
        from orbitmq.v1 import nameserver_pb2

        info = await channels.namesrv_call("GetClusterInfo", nameserver_pb2.GetClusterInfoRequest())
        assert "broker-a" in str(info)  # the broker registered over mutual TLS too
    finally:
        await channels.close()

    started = time.monotonic()
    without = Channels(mutual_cluster.address, tls=ClientTls(tls_ca=mutual_cluster.pki.ca))
    try:
        with pytest.raises(TlsError, match="requires a client certificate"):
            await without.namesrv_call("GetClusterInfo", nameserver_pb2.GetClusterInfoRequest())
    finally:
        await without.close()
    assert time.monotonic() - started < 2
