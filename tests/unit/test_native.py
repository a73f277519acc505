"""The C send path's own contract: its checksum, what its scanner takes and leaves to Python,
and that no bytes at all can crash it."""

from __future__ import annotations

import os
import random
import types
from itertools import accumulate
from pathlib import Path
from typing import BinaryIO

import pytest
from crc32c import crc32c

from nativekit import needs_native, why_no_native
from orbitmq import native
from orbitmq.native import NATIVE, scan_send
from orbitmq.store.consume_queue import UNIT
from orbitmq.store.record import tags_code
from orbitmq.v1 import broker_pb2, common_pb2

DETOUR = (b"DELAY", b"TRAN_MSG")
pytestmark = needs_native


def _request(*messages: common_pb2.Message, topic: str = "TopicA") -> bytes:
    return broker_pb2.SendMessageRequest(topic=topic, queue_id=2, messages=messages).SerializeToString()


def _message(body: bytes = b"body", flag: int = 0, topic: str = "", **properties: str) -> common_pb2.Message:
    return common_pb2.Message(topic=topic, body=body, properties=properties, flag=flag)


def _write(
    data: bytes, scanned: native.Scanned, file: BinaryIO, physical: int = 0
) -> tuple[list[int], bytes]:
    """Write a scan's records at the start of ``file``: (sizes, consume-queue units)."""
    assert NATIVE is not None
    return NATIVE.write(
        data, scanned.columns.layout, file.fileno(), 0, b"TopicA", bytes(72), 2, 0, 1, physical
    )


def _units_of(sizes: list[int], tags: list[str | None], physical: int = 0) -> bytes:
    """The units the writer must return for records of ``sizes`` starting at ``physical``."""
    offsets = list(accumulate(sizes, initial=physical))[:-1]
    return b"".join(map(UNIT.pack, offsets, sizes, map(tags_code, tags)))


def test_the_extension_is_built_where_a_c_compiler_is() -> None:
    """The install builds it optionally; on a machine with a compiler a missing build is a bug."""
    if NATIVE is None:
        reason = why_no_native()
        assert reason is not None, (
            "orbitmq._native did not build though a C compiler is here: see pip's output"
        )
        pytest.skip(reason)


def test_a_stale_build_is_not_used() -> None:
    assert NATIVE is not None
    assert native._agrees(NATIVE) is None
    stale = types.SimpleNamespace(**{name: getattr(NATIVE, name) for name in dir(NATIVE)})
    stale.MESSAGE_BODY = 7
    assert native._agrees(stale) == "MESSAGE_BODY is 7 in the extension, 2 here"  # type: ignore[arg-type]
    stale.MESSAGE_BODY = 2
    stale.SendHeader = types.SimpleNamespace(__match_args__=native.SendHeader._fields[:-1])
    assert "SendHeader has fields" in str(native._agrees(stale))  # type: ignore[arg-type]


@pytest.mark.parametrize("length", [0, 1, 7, 8, 9, 63, 64, 1000, 4099])
def test_crc32c_is_the_record_checksum(length: int) -> None:
    assert NATIVE is not None
    data = random.Random(length).randbytes(length)
    assert NATIVE.crc32c(data) == crc32c(data)
    assert NATIVE.crc32c(data[length // 2 :], NATIVE.crc32c(data[: length // 2])) == crc32c(data)


def test_scan_reads_every_column(tmp_path: Path) -> None:
    data = _request(
        _message(b"a" * 10, 3, TAGS="TagA", KEYS="k1 k2"),
        _message(b"", -5, topic="TopicA"),
        _message(b"b" * 20, 0, TAGS="é", UNIQ_KEY="U2", X="y"),
    )
    scanned = scan_send(data, DETOUR)
    assert scanned is not None
    assert scanned.columns.count == 3
    assert scanned.columns.body_max == 20
    assert scanned.columns.payload_bytes == 30 + len("TAGS\x01TagA\x02KEYS\x01k1 k2\x02") + len(
        "TAGS\x01é\x02UNIQ_KEY\x01U2\x02X\x01y\x02".encode()
    )
    assert scanned.columns.properties_max == len("TAGS\x01é\x02UNIQ_KEY\x01U2\x02X\x01y\x02".encode())
    assert scanned.columns.indexed == [(0, "k1 k2", None), (2, None, "U2")]
    with open(tmp_path / "records", "wb+", buffering=0) as file:
        sizes, units = _write(data, scanned, file, physical=1000)
    assert units == _units_of(sizes, ["TagA", None, "é"], physical=1000)


def test_the_request_fields_read_as_protobuf_reads_them() -> None:
    request = broker_pb2.SendMessageRequest(
        producer_group="Producers-é",
        topic="TopicA",
        queue_id=-1,
        messages=[_message()],
        born_timestamp_ms=(1 << 62) + 5,
        born_host="10.0.0.1:7",
        sys_flag=8,
        reconsume_times=3,
        default_topic_queue_nums=16,
    )
    data = request.SerializeToString()
    # A field repeated on the wire: protobuf keeps the last one; so must the scanner.
    data += broker_pb2.SendMessageRequest(queue_id=2, born_host="10.0.0.2:8").SerializeToString()
    scanned = scan_send(data, DETOUR)
    parsed = broker_pb2.SendMessageRequest.FromString(data)
    assert scanned is not None
    assert scanned.header == tuple(getattr(parsed, name) for name in native.SendHeader._fields)
    assert (scanned.header.queue_id, scanned.header.born_host) == (2, "10.0.0.2:8")


def _utf8_cases() -> list[bytes]:
    rng = random.Random(8)
    fixed = [
        b"plain",
        "é€𝄞".encode(),
        b"\xc0\xaf",  # overlong /
        b"\xe0\x80\xaf",  # overlong
        b"\xed\xa0\x80",  # a surrogate
        b"\xf4\x90\x80\x80",  # above U+10FFFF
        b"\xf0\x9f\x98",  # cut short
        b"\x80",
        b"abcdefgh\xffijkl",
        "ascii then é".encode() * 3,
    ]
    return fixed + [
        rng.randbytes(rng.randrange(1, 12)).replace(b"\x01", b"a").replace(b"\x02", b"b") for _ in range(3000)
    ]


def test_strings_must_be_utf8_exactly_as_python_decodes_them() -> None:
    """The scanner checks UTF-8 itself (no protobuf parse on the C path): it must take a value
    exactly when it is valid UTF-8, in the topic, the born host and property names and values."""
    for raw in _utf8_cases():
        try:
            raw.decode("utf-8")
            valid = True
        except UnicodeDecodeError:
            valid = False
        value = common_pb2.Message(body=b"x").SerializeToString() + b"\x1a" + bytes([len(raw) + 5])
        value += b"\x0a\x01X\x12" + bytes([len(raw)]) + raw  # properties entry {"X": raw}
        data = broker_pb2.SendMessageRequest(topic="TopicA").SerializeToString()
        data += b"\x22" + bytes([len(value)]) + value
        assert (scan_send(data, DETOUR) is not None) == valid, raw
        host = broker_pb2.SendMessageRequest(messages=[_message()]).SerializeToString()
        host += b"\x32" + bytes([len(raw)]) + raw  # born_host = raw
        assert (scan_send(host, DETOUR) is not None) == valid, raw


def test_tag_codes_are_the_consume_queue_hash(tmp_path: Path) -> None:
    """The writer's units carry record.tags_code of each tag: ASCII, any Unicode, empty, none."""
    rng = random.Random(5)
    alphabet = "aZ09_-é€𝄞ﬀ "
    tags: list[str | None] = [None, "", "TagA", "é", "𝄞" * 40]
    tags += ["".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 30))) for _ in range(200)]
    messages = [_message(b"x") if tag is None else _message(b"x", TAGS=tag) for tag in tags]
    data = _request(*messages)
    scanned = scan_send(data, DETOUR)
    assert scanned is not None
    with open(tmp_path / "records", "wb+", buffering=0) as file:
        sizes, units = _write(data, scanned, file)
    assert units == _units_of(sizes, tags)


def _duplicate_key_message() -> bytes:
    """One Message with the map key A twice on the wire (protobuf keeps the last)."""
    first = _message(A="1").SerializeToString()
    second = common_pb2.Message(properties={"A": "2"}).SerializeToString()
    return first + second


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (_request(_message(DELAY="3")), "a delayed message detours through the schedule topic"),
        (_request(_message(), _message(TRAN_MSG="true")), "a prepared message detours"),
        (_request(_message(X="a\x01b")), "a separator inside a value"),
        (_request(_message(**{"\x02X": "v"})), "a separator inside a name"),
        (_request(_message(**{"": "v"})), "an empty name"),
        (_request(_message(topic="TopicB")), "a message for another topic"),
        (_request(), "no message at all"),
        (_request(_message(**{f"P{i}": "v" for i in range(65)})), "more properties than the scanner holds"),
        (
            broker_pb2.SendMessageRequest(topic="TopicA").SerializeToString()
            + b"\x22"
            + bytes([len(_duplicate_key_message())])
            + _duplicate_key_message(),
            "a duplicate map key",
        ),
        (_request(_message()) + b"\x22\x05\x12\x09abc", "a body longer than its message"),
        (_request(_message()) + b"\x23", "a group wire type"),
        (
            _request(_message(), common_pb2.Message(body=b"x", born_host="10.0.0.7:4321")),
            "a message's own born host (the records here take the request's)",
        ),
    ],
)
def test_what_the_scanner_leaves_to_the_python_path(data: bytes, why: str) -> None:
    assert scan_send(data, DETOUR) is None, why


def test_unknown_fields_are_skipped_as_protobuf_skips_them() -> None:
    message = _message(b"xyz", TAGS="T").SerializeToString()
    extra = b"\x30\x96\x01" + b"\x39" + bytes(8) + b"\x45" + bytes(4) + b"\x4a\x02hi"  # fields 6..9
    data = broker_pb2.SendMessageRequest(topic="TopicA").SerializeToString()
    data += b"\x22" + bytes([len(message + extra)]) + message + extra + b"\x50\x01"  # and field 10
    scanned = scan_send(data, DETOUR)
    assert scanned is not None and scanned.columns.payload_bytes == 3 + len("TAGS\x01T\x02")
    assert common_pb2.Message.FromString(message + extra).body == b"xyz"


def test_no_bytes_crash_the_scanner_or_the_writer(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """20 000 random and mutated requests: the scanner answers each with None or a scan, and
    every scan it gives writes records that decode back to what protobuf parses."""
    from orbitmq.store.record import decode

    assert NATIVE is not None
    rng = random.Random(20261121)
    seeds = [
        _request(_message(rng.randbytes(rng.randrange(50)), rng.randrange(-9, 9), TAGS="T", KEYS="a b"))
        for _ in range(5)
    ] + [_request(*(_message(UNIQ_KEY=str(i)) for i in range(4)))]
    target = tmp_path / "records"
    taken = 0
    with open(target, "wb+", buffering=0) as file:
        for i in range(20_000):
            data = bytearray(rng.choice(seeds))
            for _ in range(rng.randrange(1, 4)):
                mutation = rng.randrange(3)
                at = rng.randrange(len(data) + 1)
                if mutation == 0 and data:
                    data[min(at, len(data) - 1)] = rng.randrange(256)
                elif mutation == 1:
                    data[at:at] = rng.randbytes(rng.randrange(1, 4))
                else:
                    del data[at : at + rng.randrange(1, 4)]
            if i % 10 == 0:
                data = bytearray(rng.randbytes(rng.randrange(64)))
            scanned = scan_send(bytes(data), DETOUR)
            if scanned is None:
                continue
            # What the scanner takes, protobuf takes too, and reads the same way.
            expected = broker_pb2.SendMessageRequest.FromString(bytes(data))
            assert scanned.header == tuple(getattr(expected, name) for name in native.SendHeader._fields)
            taken += 1
            sizes, units = _write(bytes(data), scanned, file)
            assert units == _units_of(sizes, [m.properties.get("TAGS") for m in expected.messages])
            written = os.pread(file.fileno(), sum(sizes), 0)
            at = 0
            for size, message in zip(sizes, expected.messages, strict=True):
                record = decode(written[at : at + size])
                assert record.body == message.body
                assert record.flag == message.flag
                assert dict(record.properties) == dict(message.properties)
                at += size
    assert taken > 1000


def test_the_send_reply_is_what_protobuf_serializes() -> None:
    """send_reply() encodes a SendMessageResponse itself: byte for byte what protobuf gives,
    zero fields left out, negative numbers in ten bytes, ids for records laid back to back."""
    from orbitmq.store.commitlog import AppendedBatch
    from orbitmq.store.message_id import msg_id_prefix

    assert NATIVE is not None
    rng = random.Random(7)
    hosts = ["127.0.0.1:10911", "[::1]:0", "10.1.2.3:65535"]
    texts = ["", "broker-a", "é" * 40, "x" * 300]
    for _ in range(500):
        sizes = [rng.randrange(1, 1 << 20) for _ in range(rng.choice([0, 1, 1, 2, 128]))]
        first = rng.choice([0, 1, rng.randrange(1 << 40)])
        appended = AppendedBatch(first, sizes, [0] * len(sizes), 0, rng.choice(hosts), first + sum(sizes))
        fields = {
            "status": rng.choice([0, 1, 3]),
            "queue_id": rng.choice([0, 7, -1, 2**31 - 1, -(2**31)]),
            "queue_offset": rng.choice([0, 5, 2**62]),
            "broker_name": rng.choice(texts),
            "transaction_id": rng.choice(texts),
        }
        expected = broker_pb2.SendMessageResponse(
            msg_ids=appended.msg_ids(), commit_log_offset=first, **fields
        ).SerializeToString()
        reply = NATIVE.send_reply(
            fields["status"],
            msg_id_prefix(appended.store_host),
            first,
            sizes,
            fields["queue_id"],
            fields["queue_offset"],
            fields["broker_name"],
            fields["transaction_id"],
        )
        assert reply == expected, fields


def test_the_pull_reply_is_what_protobuf_serializes() -> None:
    """pull_reply() encodes a PullMessageResponse itself, byte for byte as protobuf does:
    zero numbers left out, every record kept (an empty one too), in order."""
    assert NATIVE is not None
    rng = random.Random(11)
    for _ in range(300):
        records = [
            rng.randbytes(rng.choice([0, 1, 127, 128, 1200, 70_000])) for _ in range(rng.choice([0, 1, 32]))
        ]
        numbers = [rng.choice([0, 1, 3, 2**40, -1]) for _ in range(5)]
        numbers[0] = rng.choice([0, 1, 2, 3])  # a PullStatus
        expected = broker_pb2.PullMessageResponse(
            status=numbers[0],
            next_begin_offset=numbers[1],
            min_offset=numbers[2],
            max_offset=numbers[3],
            suggest_which_broker_id=numbers[4],
            records=records,
        ).SerializeToString()
        assert NATIVE.pull_reply(*numbers, records) == expected, numbers
    with pytest.raises(TypeError, match="bytes"):
        NATIVE.pull_reply(0, 0, 0, 0, 0, [memoryview(b"x")])
