from __future__ import annotations

import pytest

from orbitmq.store.message_id import decode_offset_msg_id, encode_offset_msg_id
from orbitmq.store.record import (
    HEADER_BYTES,
    InboundMessage,
    RecordError,
    decode,
    decode_properties,
    encode,
    encode_host,
    encode_properties,
    tags_code,
)


def _record(body: bytes = b"payload", **properties: str) -> bytes:
    message = InboundMessage(
        topic="TopicA",
        body=body,
        queue_id=3,
        properties=properties,
        flag=7,
        born_timestamp_ms=1234,
        born_host="10.1.2.3:5555",
        reconsume_times=2,
    )
    return encode(
        message,
        properties_raw=encode_properties(properties),
        topic_raw=b"TopicA",
        queue_offset=42,
        physical_offset=4096,
        store_timestamp_ms=5678,
        store_host=encode_host("192.168.0.9:10911"),
    )


def test_round_trip_keeps_every_field() -> None:
    raw = _record(b"x" * 1000, TAGS="TagA", KEYS="k1 k2")
    message = decode(raw)
    assert message.body == b"x" * 1000
    assert (message.topic, message.queue_id, message.queue_offset, message.physical_offset) == (
        "TopicA",
        3,
        42,
        4096,
    )
    assert message.properties == {"TAGS": "TagA", "KEYS": "k1 k2"}
    assert message.keys == ("k1", "k2")
    assert (message.flag, message.reconsume_times) == (7, 2)
    assert (message.born_timestamp_ms, message.store_timestamp_ms) == (1234, 5678)
    assert message.born_host == "10.1.2.3:5555"
    assert message.store_host == "192.168.0.9:10911"
    assert message.size == len(raw)


def test_a_flipped_body_byte_fails_the_crc() -> None:
    raw = bytearray(_record(b"abcdef"))
    raw[HEADER_BYTES + 2] ^= 0xFF
    with pytest.raises(RecordError, match="CRC"):
        decode(bytes(raw))


def test_a_truncated_record_is_rejected() -> None:
    raw = _record(b"abcdef", TAGS="T")
    with pytest.raises(RecordError):
        decode(raw[:-3])


def test_properties_round_trip_and_empty() -> None:
    assert decode_properties(encode_properties({"a": "1", "b": ""})) == {"a": "1", "b": ""}
    assert decode_properties(encode_properties({})) == {}


def test_tags_code_is_zero_without_tag_and_stable() -> None:
    assert tags_code(None) == 0
    assert tags_code("TagA") == tags_code("TagA") != tags_code("TagB")


def test_offset_message_id_is_32_hex_characters_for_ipv4() -> None:
    msg_id = encode_offset_msg_id("192.168.0.9:10911", 123456789)
    assert len(msg_id) == 32
    assert decode_offset_msg_id(msg_id) == ("192.168.0.9:10911", 123456789)


def test_offset_message_id_for_ipv6() -> None:
    msg_id = encode_offset_msg_id("[fd00::5]:10911", 77)
    assert decode_offset_msg_id(msg_id) == ("[fd00::5]:10911", 77)


@pytest.mark.parametrize("bad", ["xyz", "ABCD", "00" * 17])
def test_malformed_message_ids_name_themselves(bad: str) -> None:
    with pytest.raises(ValueError, match=repr(bad)):
        decode_offset_msg_id(bad)


@pytest.mark.parametrize("bad", ["nohost", "1.2.3.4:99999", "name.example:10911", ":80"])
def test_bad_hosts_are_rejected_with_the_value(bad: str) -> None:
    with pytest.raises(ValueError, match="host"):
        encode_host(bad)
