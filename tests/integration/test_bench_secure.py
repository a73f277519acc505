"""``orbitmq bench send|e2e --secure``: the figures come out of the real commands, and the
secure side really is TLS with auth on and a user granted exactly the bench's topic."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from orbitmq.bench.broker import broker_process
from orbitmq.bench.secure import app_channel, grant, make_setup
from orbitmq.common.server import GRPC_OPTIONS
from orbitmq.common.tls import open_channel
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2

pytestmark = pytest.mark.timeout(240)


def _bench(*args: str) -> dict[str, dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-m", "orbitmq.cli.main", "bench", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=230,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {f["figure"]: f for f in map(json.loads, done.stdout.splitlines()) if f.get("figure")}


def test_send_figures(tmp_path: Path) -> None:
    figures = _bench("send", "--secure", "--messages", "1000", "--dir", str(tmp_path))
    assert set(figures) == {
        "secure_send_unbatched",
        "secure_send_batched_128",
        "tls_connect_ms",
        "auth_sign_us",
        "auth_check_send_us",
        "auth_check_pull_us",
        "auth_decide_uncached_us",
    }
    for name in ("secure_send_unbatched", "secure_send_batched_128", "tls_connect_ms"):
        assert figures[name]["value"] > 0 and figures[name]["baseline"] > 0, figures[name]  # type: ignore[operator]
    for name in ("auth_sign_us", "auth_check_send_us", "auth_check_pull_us", "auth_decide_uncached_us"):
        assert 0 < figures[name]["value"] < 1000, figures[name]  # type: ignore[operator]
    assert list(tmp_path.iterdir()) == []  # stores, certificates and secrets removed


def test_e2e_figures(tmp_path: Path) -> None:
    flags = ("--messages", "1000", "--latency-seconds", "1", "--dir", str(tmp_path))
    figures = _bench("e2e", "--secure", *flags)
    assert set(figures) == {
        "secure_e2e_produce_batched",
        "secure_e2e_consume",
        "secure_send_p50_us",
        "secure_send_p99_us",
        "secure_e2e_latency_p99_ms",
    }
    for figure in figures.values():
        assert figure["value"] > 0 and figure["baseline"] > 0, figure  # type: ignore[operator]
    assert list(tmp_path.iterdir()) == []


async def test_the_secure_broker_takes_only_tls_signed_calls_of_the_granted_topic(tmp_path: Path) -> None:
    setup = make_setup(tmp_path / "pki", ("BenchTopic",))
    broker = broker_process(tmp_path / "broker", *setup.server_flags("broker"), env=setup.server_env())
    try:
        await grant(setup, broker.address, 2)

        async def call(channel: grpc.aio.Channel, topic: str) -> grpc.StatusCode:
            message = common_pb2.Message(topic=topic, body=b"x")
            request = broker_pb2.SendMessageRequest(producer_group="bench", topic=topic, messages=[message])
            try:
                await broker_pb2_grpc.BrokerStub(channel).SendMessage(request, timeout=5)
            except grpc.aio.AioRpcError as error:
                return error.code()
            return grpc.StatusCode.OK

        async with grpc.aio.insecure_channel(broker.address, options=GRPC_OPTIONS) as plaintext:
            assert await call(plaintext, "BenchTopic") is grpc.StatusCode.UNAVAILABLE
        async with open_channel(broker.address, setup.tls, GRPC_OPTIONS) as unsigned:
            assert await call(unsigned, "BenchTopic") is grpc.StatusCode.UNAUTHENTICATED
        async with app_channel(setup, broker.address) as user:
            assert await call(user, "BenchTopic") is grpc.StatusCode.OK
            assert await call(user, "OtherTopic") is grpc.StatusCode.PERMISSION_DENIED
    finally:
        broker.stop()
    assert (tmp_path / "pki" / "tls.key").stat().st_mode & 0o077 == 0
