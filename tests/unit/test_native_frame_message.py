"""The producer's C encoder (``_native.frame_message``): each message of a coalesced send reads
back as the ``Message`` protobuf builds (:meth:`Message.to_proto`), refuses what protobuf
refuses, and a request made of such frames is one the broker's C scanner takes."""

from __future__ import annotations

import random

import pytest

from nativekit import needs_native
from orbitmq.client import send_wire
from orbitmq.client.message import Message
from orbitmq.common.properties import SystemPropertyError
from orbitmq.native import NATIVE, scan_send
from orbitmq.v1 import broker_pb2, common_pb2

pytestmark = needs_native

KEY = "0A1B2C3D4E5F60718293A4B5C6D7E8F9"


def _read_back(framed: bytes) -> common_pb2.Message:
    """The one Message of a request made of ``framed`` alone."""
    request = broker_pb2.SendMessageRequest.FromString(framed)
    assert len(request.messages) == 1
    return request.messages[0]


def _random_text(rng: random.Random, longest: int) -> str:
    alphabet = "abcXYZ019 _-.:/%|" + "éß中文😀"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(longest + 1)))


def _random_message(rng: random.Random) -> Message:
    body_size = rng.choice([0, 1, 127, 128, 300, 16_383, 16_384, 70_000])
    return Message(
        topic=rng.choice(["T", "Orders", "%RETRY%g", "x" * 127]),
        body=rng.randbytes(body_size),
        tags=rng.choice([None, "", "TagA", _random_text(rng, 20)]),
        keys=rng.choice([None, "", "k1", ["k1", "k2"], [_random_text(rng, 8) for _ in range(3)]]),
        properties={_random_text(rng, 12) + f"p{i}": _random_text(rng, 200) for i in range(rng.randrange(6))},
        flag=rng.choice([0, 1, -1, 2**31 - 1, -(2**31)]),
    )


def test_frames_read_back_as_protobuf_builds_them() -> None:
    rng = random.Random(24)
    for _ in range(500):
        message = _random_message(rng)
        framed = send_wire.frame(message, KEY)
        assert _read_back(framed) == message.to_proto(KEY), message
        assert _read_back(send_wire.frame_by_protobuf(message, KEY)) == message.to_proto(KEY)


def test_bytearray_body_and_empty_fields() -> None:
    framed = send_wire.frame(Message("T", bytearray(b"body"), tags="", keys=[]), KEY)
    assert _read_back(framed) == common_pb2.Message(topic="T", body=b"body", properties={"UNIQ_KEY": KEY})


def test_what_protobuf_refuses_is_refused() -> None:
    assert NATIVE is not None
    with pytest.raises(TypeError, match="must be str"):
        NATIVE.frame_message("T", b"", 0, {"a": 1}, None, None, KEY)
    with pytest.raises(TypeError, match="must be str"):
        NATIVE.frame_message("T", b"", 0, {2: "b"}, None, None, KEY)
    with pytest.raises(ValueError, match="int32"):
        NATIVE.frame_message("T", b"", 2**31, None, None, None, KEY)
    with pytest.raises(TypeError):
        NATIVE.frame_message("T", "text", 0, None, None, None, KEY)
    with pytest.raises(UnicodeEncodeError):
        NATIVE.frame_message("T", b"", 0, {"a": "\ud800"}, None, None, KEY)
    with pytest.raises(SystemPropertyError, match="'UNIQ_KEY' is reserved"):
        send_wire.frame(Message("T", b"x", properties={"UNIQ_KEY": "mine"}), KEY)


def test_the_broker_scanner_takes_a_request_of_frames() -> None:
    rng = random.Random(7)
    messages = [
        Message("Orders", rng.randbytes(100), tags="TagA", keys=["k"], properties={"region": "eu"})
        for _ in range(5)
    ]
    head = send_wire.request_head("PG", "Orders", 3, 1_700_000_000_000, 4)
    request = head + b"".join(send_wire.frame(m, f"{KEY[:-1]}{i}") for i, m in enumerate(messages))
    scanned = scan_send(request, (b"DELAY", b"TRAN_MSG"))
    assert scanned is not None
    assert scanned.columns.count == 5
    assert (scanned.header.topic, scanned.header.queue_id, scanned.header.producer_group) == (
        "Orders",
        3,
        "PG",
    )
    parsed = broker_pb2.SendMessageRequest.FromString(request)
    assert [m.body for m in parsed.messages] == [m.body for m in messages]
    assert parsed.default_topic_queue_nums == 4 and parsed.born_timestamp_ms == 1_700_000_000_000
