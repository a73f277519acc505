"""A message asks for one delivery time at most, sent as the property the broker's timer reads."""

from __future__ import annotations

import pytest

from orbitmq.client.message import Message


def test_delivery_time_and_delay_become_timer_properties() -> None:
    assert Message("T", b"", deliver_at_ms=1_700_000_000_123).to_proto("u").properties[
        "TIMER_DELIVER_MS"
    ] == ("1700000000123")
    assert Message("T", b"", delay_ms=3_700).to_proto("u").properties["TIMER_DELAY_MS"] == "3700"
    plain = Message("T", b"").to_proto("u").properties
    assert not {"TIMER_DELIVER_MS", "TIMER_DELAY_MS", "DELAY"} & set(plain)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"delay_level": 2, "delay_ms": 10}, "not delay_level, delay_ms"),
        ({"deliver_at_ms": 5, "delay_ms": 10}, "not deliver_at_ms, delay_ms"),
        ({"delay_ms": -1}, "delay_ms -1 must be a non-negative whole number"),
        ({"deliver_at_ms": 1.5}, "deliver_at_ms 1.5 must be a non-negative whole number"),
    ],
)
def test_bad_timing_is_refused_before_sending(fields: dict[str, object], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        Message("T", b"", **fields).to_proto("u")  # type: ignore[arg-type]
