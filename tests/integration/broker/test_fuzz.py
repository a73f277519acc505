"""Fuzz every Broker RPC with random and mutated payloads; the broker must stay healthy and
every message stored before the storm must still read back intact."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from brokerkit import start_broker, stop_broker
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2, health_pb2_grpc
from test_send_pull import pull_request, send_request

from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2
from orbitmq.v1.broker_pb2 import PullStatus

pytestmark = pytest.mark.timeout(300)

CALLS = 10_500
KEEP_TOPIC = "FuzzKeep"
STRINGS = [
    "",
    "T",
    "Orders",
    "bad topic!",
    "%RETRY%g",
    "%DLQ%g",
    "a" * 300,
    "ü∂",
    "x@y",
    "CG",
    "SCHEDULE_TOPIC_XXXX",
    "0A000001000027110000000000000000",
    "127.0.0.1:1",
    "*",
    "A || B",
    "a BETWEEN 1 AND",
    "TagA",
]
INTS = [0, 1, -1, 2, 3, 31, 32, 1024, 65_536, 2**31 - 1, -(2**31), 2**62, -(2**62)]


def random_message(descriptor: Descriptor, rng: random.Random, depth: int = 0) -> dict[str, object]:
    values: dict[str, object] = {}
    for field in descriptor.fields:
        if rng.random() < 0.35:
            continue
        if field.containing_oneof is not None and any(
            f.name in values for f in field.containing_oneof.fields
        ):
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            values[field.name] = {
                _scalar(field.message_type.fields_by_name["key"], rng): _scalar(
                    field.message_type.fields_by_name["value"], rng
                )
                for _ in range(rng.randint(0, 3))
            }
            continue
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            nested = field.message_type

            def make(nested: Descriptor = nested) -> dict[str, object]:
                return random_message(nested, rng, depth + 1) if depth < 3 else {}

            value: object = [make() for _ in range(rng.randint(0, 3))] if _repeated(field) else make()
        else:
            value = (
                [_scalar(field, rng) for _ in range(rng.randint(0, 3))]
                if _repeated(field)
                else _scalar(field, rng)
            )
        values[field.name] = value
    return values


def _repeated(field: FieldDescriptor) -> bool:
    return bool(field.is_repeated)


def _scalar(field: FieldDescriptor, rng: random.Random) -> object:
    kind = field.type
    if kind == FieldDescriptor.TYPE_STRING:
        return rng.choice(STRINGS)
    if kind == FieldDescriptor.TYPE_BYTES:
        return rng.randbytes(rng.choice([0, 1, 16, 200]))
    if kind == FieldDescriptor.TYPE_BOOL:
        return rng.random() < 0.5
    if kind == FieldDescriptor.TYPE_ENUM:
        return rng.choice([v.number for v in field.enum_type.values])
    if kind in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
        return rng.choice([i for i in INTS if -(2**31) <= i < 2**31])
    return rng.choice(INTS)


def mutate(payload: bytes, rng: random.Random) -> bytes:
    data = bytearray(payload)
    for _ in range(rng.randint(1, 4)):
        action = rng.random()
        if action < 0.4 and data:
            data[rng.randrange(len(data))] = rng.randrange(256)
        elif action < 0.6 and data:
            del data[rng.randrange(len(data)) :]
        elif action < 0.8:
            data[rng.randrange(len(data) + 1) : 0] = rng.randbytes(rng.randint(1, 8))
        else:
            data = bytearray(rng.randbytes(rng.randint(0, 64)))
    return bytes(data)


async def test_fuzz_every_rpc(tmp_path: Path) -> None:
    running = await start_broker(tmp_path / "b", max_suspend_ms=20, transaction_check_interval_ms=50)
    rng = random.Random(1121)
    try:
        kept = [
            await running.stub.SendMessage(
                send_request(KEEP_TOPIC, f"keep-{i}".encode(), queue_id=0, KEYS=f"k{i}")
            )
            for i in range(20)
        ]
        service = broker_pb2.DESCRIPTOR.services_by_name["Broker"]
        methods = [m for m in service.methods if not m.client_streaming]
        calls: list[tuple[str, bytes]] = []
        for _ in range(CALLS):
            method = rng.choice(methods)
            request: Message = getattr(broker_pb2, method.input_type.name)()
            with contextlib.suppress(TypeError, ValueError):  # an impossible combination: send it empty
                request = type(request)(**random_message(method.input_type, rng))
            for field in ("topic",):  # never aim deletes at the topic the test checks afterwards
                if getattr(request, field, None) == KEEP_TOPIC:
                    setattr(request, field, "Other")
            payload = request.SerializeToString()
            if rng.random() < 0.4:
                payload = mutate(payload, rng)
            calls.append((f"/orbitmq.v1.Broker/{method.name}", payload))
        outcomes: dict[str, int] = {}

        async def call(path: str, payload: bytes) -> None:
            invoke = running.channel.unary_unary(path)
            try:
                await invoke(payload, timeout=10)
                outcomes["OK"] = outcomes.get("OK", 0) + 1
            except grpc.aio.AioRpcError as error:
                assert error.code() is not grpc.StatusCode.DEADLINE_EXCEEDED, path
                outcomes[error.code().name] = outcomes.get(error.code().name, 0) + 1

        for start in range(0, len(calls), 64):
            await asyncio.gather(*(call(p, b) for p, b in calls[start : start + 64]))
        await _fuzz_sessions(running.channel, rng)
        print(f"fuzz outcomes over {len(calls)} calls: {dict(sorted(outcomes.items()))}")
        assert "UNKNOWN" not in outcomes, "an unexpected exception escaped a handler"

        health = health_pb2_grpc.HealthStub(running.channel)
        status = (await health.Check(health_pb2.HealthCheckRequest(service=""))).status
        assert status == health_pb2.HealthCheckResponse.SERVING
        # A group the storm never named: "CG" may have been created with consuming disabled.
        check = pull_request(KEEP_TOPIC, 0, 0)
        check.consumer_group = "FuzzCheck"
        reply = await running.stub.PullMessage(check)
        assert reply.status == PullStatus.FOUND
        assert [decode(r).body for r in reply.records] == [f"keep-{i}".encode() for i in range(20)]
        assert [decode(r).msg_id for r in reply.records] == [k.msg_ids[0] for k in kept]
    finally:
        await stop_broker(running)


async def _fuzz_sessions(channel: grpc.aio.Channel, rng: random.Random) -> None:
    """Random frames on the bidirectional session stream."""
    path = "/orbitmq.v1.Broker/Session"
    for _ in range(50):
        frames = [
            mutate(b"\x0a\x04\x0a\x02c1", rng) if rng.random() < 0.5 else rng.randbytes(12) for _ in range(3)
        ]

        async def requests(chunks: list[bytes] = frames) -> AsyncIterator[bytes]:
            for chunk in chunks:
                yield chunk

        stream = channel.stream_stream(path)(requests())
        try:
            async with asyncio.timeout(0.5):
                async for _ in stream:
                    pass
        except (grpc.aio.AioRpcError, TimeoutError):
            pass
        finally:
            stream.cancel()
