"""What ``admin message by-id`` makes of an id: an offset id names a broker and an offset, a
producer's unique key (32 hex from orbitmq's and RocketMQ 4's clients, 34 from RocketMQ 5's)
is looked up in the index, and anything else is refused naming the rule."""

from __future__ import annotations

import pytest

from orbitmq.store.message_id import encode_offset_msg_id, read_msg_id

V5_ID = "0102FC000000011B260B19BE7700000000"
"""A RocketMQ 5 Python client's message id: version 01, MAC, pid, seconds since 2021, sequence."""


def test_a_rocketmq_5_id_is_a_unique_key_naming_no_broker() -> None:
    reading = read_msg_id(V5_ID)
    assert (reading.offset, reading.unique_key) == (None, V5_ID)


def test_a_32_character_id_may_be_either_kind() -> None:
    offset_id = encode_offset_msg_id("10.0.0.7:10911", 4096)
    reading = read_msg_id(offset_id)
    assert (reading.offset, reading.unique_key) == (("10.0.0.7:10911", 4096), offset_id)


def test_an_ipv6_offset_id_is_only_an_offset() -> None:
    offset_id = encode_offset_msg_id("[2001:db8::1]:10911", 7)
    reading = read_msg_id(offset_id)
    assert len(offset_id) == 56 and (reading.offset, reading.unique_key) == (("[2001:db8::1]:10911", 7), None)


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        ("02" + V5_ID[2:], "has 34 characters but begins '02'"),
        (V5_ID[:-1], "has 33 characters"),
        (V5_ID + "0", "has 35 characters"),
    ],
)
def test_other_lengths_and_versions_are_refused_with_the_rule(bad: str, said: str) -> None:
    with pytest.raises(ValueError, match="has 32, or 34 beginning 01 \\(RocketMQ 5 clients\\)") as error:
        read_msg_id(bad)
    assert said in str(error.value)
