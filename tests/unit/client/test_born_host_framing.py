"""A coalesced call whose messages were born at different hosts names each message's own
(``send_wire.with_born_host``): the re-framed message reads back as the one framed before,
with that born host, whether it was framed in C or by protobuf, and at every length where the
frame's length prefix grows a byte."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from orbitmq.client import send_wire
from orbitmq.client.message import Message
from orbitmq.v1 import broker_pb2, common_pb2

KEY = "0A1B2C3D4E5F60718293A4B5C6D7E8F9"
HOST = "10.1.2.3:4567"


@pytest.mark.parametrize("framer", [send_wire.frame, send_wire.frame_by_protobuf])
def test_a_reframed_message_reads_back_with_its_born_host(framer: Callable[[Message, str], bytes]) -> None:
    grown = 0
    for body_size in [*range(200), *range(16_250, 16_400), 70_000]:
        message = Message("Orders", b"b" * body_size, tags="TagA", properties={"region": "eu"})
        framed = framer(message, KEY)
        reframed = send_wire.with_born_host(framed, HOST)
        request = broker_pb2.SendMessageRequest.FromString(reframed)
        expected = message.to_proto(KEY)
        expected.born_host = HOST
        assert list(request.messages) == [expected], body_size
        grown += len(reframed) - len(framed) > len(HOST) + 2  # the length prefix grew a byte
    assert grown > 0


def test_a_request_mixing_born_hosts_carries_each_one() -> None:
    """What the accumulator sends for a batch born at two clients: the head names none, each
    message its own; the bodies, properties and order are those of the sends."""
    messages = [Message("Orders", f"m{i}".encode(), keys=[f"k{i}"]) for i in range(4)]
    hosts = ["10.0.0.1:1001", "10.0.0.2:2002", "10.0.0.1:1001", "[2001:db8::7]:99"]
    head = send_wire.request_head("PG", "Orders", -1, 1_700_000_000_000, 4)
    frames = [send_wire.frame(m, f"{KEY[:-1]}{i}") for i, m in enumerate(messages)]
    request = broker_pb2.SendMessageRequest.FromString(
        head + b"".join(send_wire.with_born_host(f, h) for f, h in zip(frames, hosts, strict=True))
    )
    assert request.born_host == "" and request.topic == "Orders"
    assert [m.born_host for m in request.messages] == hosts
    assert [m.body for m in request.messages] == [b"m0", b"m1", b"m2", b"m3"]
    assert [m.properties["KEYS"] for m in request.messages] == ["k0", "k1", "k2", "k3"]


def test_what_is_not_one_framed_message_is_refused() -> None:
    framed = send_wire.frame(Message("T", b"body"), KEY)
    with pytest.raises(ValueError, match="not a framed message"):
        send_wire.with_born_host(common_pb2.Message(body=b"x").SerializeToString(), HOST)
    with pytest.raises(ValueError, match="has"):
        send_wire.with_born_host(framed + framed, HOST)
    with pytest.raises(ValueError, match="varint"):
        send_wire.with_born_host(b"\x22\x80", HOST)
