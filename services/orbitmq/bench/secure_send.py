"""``orbitmq bench send --secure``: a broker with TLS, authentication and authorization against
the same broker without, in one run, rounds alternating (see :mod:`orbitmq.bench.secure`).

Both brokers are child processes on stores of their own; this process drives them with the same
request bytes and concurrency as ``bench send`` (1 KiB bodies, serialized once up front). The
secure side's calls go over TLS and are signed as the normal user on every call (the signing is
the client's real cost, charged to the secure side); the broker verifies each signature and
decides ``Pub`` on the topic.

* ``secure_send_unbatched`` — one message per call, 16 in flight; baseline the plain broker.
* ``secure_send_batched_128`` — 128 messages per call, 4 in flight; baseline the plain broker.
* ``tls_connect_ms`` — a new connection's first answer, TLS against plaintext.
* ``auth_sign_us``, ``auth_check_send_us``, ``auth_check_pull_us``, ``auth_decide_uncached_us``
  — the checks' CPU.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from orbitmq.bench.broker import QUEUES, ROUNDS, TOPIC, Process, _drive, _send_request, broker_process
from orbitmq.bench.figures import Figure
from orbitmq.bench.secure import (
    SecureSetup,
    alternate,
    app_channel,
    check_figures,
    grant,
    handshake_figure,
    make_setup,
    spread,
)
from orbitmq.common.server import GRPC_OPTIONS
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2

_SEND = "/orbitmq.v1.Broker/SendMessage"


def _sender(channel: Any) -> Any:
    return channel.unary_unary(_SEND, response_deserializer=broker_pb2.SendMessageResponse.FromString)


async def _measure(
    plain: str, secure: str, setup: SecureSetup, emit: Callable[[Figure], None], messages: int
) -> None:
    body = os.urandom(1024)
    await grant(setup, secure, QUEUES)
    async with (
        grpc.aio.insecure_channel(plain, options=GRPC_OPTIONS) as plain_channel,
        app_channel(setup, secure) as secure_channel,
    ):
        config = common_pb2.TopicConfig(topic_name=TOPIC, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        await broker_pb2_grpc.BrokerStub(plain_channel).CreateTopic(
            broker_pb2.CreateTopicRequest(topic=config)
        )
        plain_send, secure_send = _sender(plain_channel), _sender(secure_channel)

        single = _send_request(1, body).SerializeToString()
        await _drive(lambda: secure_send(single), 500, 16)  # warm up both paths (and the handshakes)
        await _drive(lambda: plain_send(single), 500, 16)
        per_round = max(500, messages // 10)
        secure_rates, plain_rates = await alternate(
            lambda: _rate(lambda: secure_send(single), per_round, 16, per_round),
            lambda: _rate(lambda: plain_send(single), per_round, 16, per_round),
            3 * ROUNDS,
        )
        emit(
            _ratio_figure("secure_send_unbatched", secure_rates, plain_rates, "16 in flight", "ratio >= 0.6")
        )

        batch = _send_request(128, body).SerializeToString()
        batches = max(200, messages // 20)
        secure_rates, plain_rates = await alternate(
            lambda: _rate(lambda: secure_send(batch), batches, 4, batches * 128),
            lambda: _rate(lambda: plain_send(batch), batches, 4, batches * 128),
            ROUNDS,
        )
        emit(
            _ratio_figure(
                "secure_send_batched_128",
                secure_rates,
                plain_rates,
                "128 a call, 4 in flight",
                "ratio >= 0.8",
            )
        )
    emit(await handshake_figure(plain, secure, setup))
    for figure in check_figures():
        emit(figure)


async def _rate(call: Callable[[], object], calls: int, concurrency: int, messages: int) -> float:
    return messages / await _drive(call, calls, concurrency)


def _ratio_figure(name: str, secure: list[float], plain: list[float], how: str, target: str) -> Figure:
    return Figure(
        name,
        statistics.median(secure),
        "msg/s",
        statistics.median(plain),
        f"plaintext broker without auth, same run, {how} (rounds: secure {spread(secure)}, "
        f"plain {spread(plain)})",
        target,
    )


def run(emit: Callable[[Figure], None], *, messages: int, work_dir: Path | None) -> None:
    root = Path(tempfile.mkdtemp(prefix="orbitmq-bench-secure-", dir=work_dir))
    setup = make_setup(root / "pki", (TOPIC,))
    started: list[Process] = []
    try:
        started.append(broker_process(root / "plain"))
        started.append(broker_process(root / "secure", *setup.server_flags("broker"), env=setup.server_env()))
        asyncio.run(_measure(started[0].address, started[1].address, setup, emit, messages))
    finally:
        for process in started:
            process.stop()
        shutil.rmtree(root, ignore_errors=True)
