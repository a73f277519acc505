"""Bad input gets a result with a reason naming the value and the rule; nothing partial is stored."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError
from storekit import message

from orbitmq.store.config import MIB, StoreConfig
from orbitmq.store.message_store import MessageStore, StoreLockedError
from orbitmq.store.record import InboundMessage
from orbitmq.store.results import PutStatus

StoreFactory = Callable[..., MessageStore]


@pytest.mark.parametrize(
    ("bad", "status", "reason"),
    [
        (message(body=bytes(16 * 1024 + 1)), PutStatus.MESSAGE_ILLEGAL, "16385 bytes exceeds the maximum"),
        (message(topic="bad topic!"), PutStatus.MESSAGE_ILLEGAL, "invalid topic name 'bad topic!'"),
        (message(topic="T" * 128), PutStatus.MESSAGE_ILLEGAL, "longer than 127"),
        (message(topic=""), PutStatus.MESSAGE_ILLEGAL, "must not be empty"),
        (message(queue_id=-1), PutStatus.MESSAGE_ILLEGAL, "queue id -1"),
        (message(queue_id=70_000), PutStatus.MESSAGE_ILLEGAL, "queue id 70000"),
        (message(X="v" * 40_000), PutStatus.PROPERTIES_SIZE_EXCEEDED, "exceed the limit of 32767"),
        (message(X="a\x01b"), PutStatus.MESSAGE_ILLEGAL, "must not contain"),
        (InboundMessage(topic="T", body="text"), PutStatus.MESSAGE_ILLEGAL, "body must be bytes"),  # type: ignore[arg-type]
        (InboundMessage(topic="T", body=b"", born_host="nowhere"), PutStatus.MESSAGE_ILLEGAL, "'nowhere'"),
        (InboundMessage(topic="T", body=b"", reconsume_times=-2), PutStatus.MESSAGE_ILLEGAL, "-2"),
    ],
)
def test_bad_messages_are_refused_with_a_reason(
    open_store: StoreFactory, bad: InboundMessage, status: PutStatus, reason: str
) -> None:
    store = open_store()
    result = store.put_message(bad)
    assert result.status is status
    assert result.reason is not None and reason in result.reason
    assert store.commitlog.max_offset == 0


def test_default_limit_refuses_bodies_over_4_mib(tmp_path: Path) -> None:
    # The default body limit, in a segment of 8 MiB rather than the default 1 GiB reservation.
    config = StoreConfig(data_dir=tmp_path, segment_bytes=8 * MIB, index_slot_count=16, index_max_entries=16)
    assert config.max_message_bytes == 4 * MIB
    store = MessageStore(config)
    store.open()
    try:
        assert store.put_message(message(body=bytes(4 * 1024 * 1024))).ok
        result = store.put_message(message(body=bytes(4 * 1024 * 1024 + 1)))
        assert result.status is PutStatus.MESSAGE_ILLEGAL and "4194305 bytes" in (result.reason or "")
    finally:
        store.close()


def test_one_bad_message_refuses_the_whole_batch(open_store: StoreFactory) -> None:
    store = open_store()
    result = store.put_messages([message(body=b"ok"), message(topic="no way"), message(body=b"ok")])
    assert result.status is PutStatus.MESSAGE_ILLEGAL
    assert store.commitlog.max_offset == 0
    store.dispatch_pending()
    assert store.max_offset_in_queue("TopicA", 0) == 0


def test_batch_larger_than_a_segment_is_refused(open_store: StoreFactory) -> None:
    store = open_store()
    result = store.put_messages([message(body=bytes(10_000)) for _ in range(10)])
    assert result.status is PutStatus.MESSAGE_ILLEGAL and "do not fit in one commit-log segment" in (
        result.reason or ""
    )


def test_empty_batch_and_closed_store(open_store: StoreFactory) -> None:
    store = open_store()
    assert store.put_messages([]).status is PutStatus.MESSAGE_ILLEGAL
    store.close()
    assert store.put_message(message()).status is PutStatus.SERVICE_NOT_AVAILABLE


def test_absurd_offsets_and_ids_are_answered_not_crashed(open_store: StoreFactory) -> None:
    store = open_store()
    store.put_message(message())
    store.dispatch_pending()
    assert store.message_at(-1) is None
    assert store.message_at(2**62) is None
    assert store.get_message("g", "TopicA", 0, 2**62, 32).next_begin_offset == 0
    with pytest.raises(ValueError, match="'not-an-id' contains 'n', not hexadecimal"):
        store.message_by_id("not-an-id")


def test_a_second_process_cannot_open_the_same_directory(open_store: StoreFactory, tmp_path: Path) -> None:
    open_store()
    with pytest.raises(StoreLockedError, match="in use"):
        MessageStore(
            StoreConfig(data_dir=tmp_path / "store", segment_bytes=64 * 1024, max_message_bytes=1024)
        ).open()


@pytest.mark.parametrize(
    ("overrides", "text"),
    [
        ({"segment_bytes": 100}, "segment_bytes"),
        ({"segment_bytes": 64 * 1024, "max_message_bytes": 1024 * 1024}, "must hold a record"),
        ({"flush_mode": "SOMETIMES"}, "flush_mode"),
        ({"store_host": "localhost"}, "store_host"),
        ({"delay_levels": "1s 5x"}, "'5x'"),
        ({"unknown_setting": 1}, "unknown_setting"),
    ],
)
def test_bad_configuration_names_the_setting(tmp_path: Path, overrides: dict[str, object], text: str) -> None:
    with pytest.raises(ValidationError, match=text):
        StoreConfig(data_dir=tmp_path, **overrides)  # type: ignore[arg-type]
