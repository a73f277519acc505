"""Consume queues and the dispatcher: units, files, growth hook, visibility, idempotent replay."""

from __future__ import annotations

import threading
from collections.abc import Callable

from storekit import message

from orbitmq.store.consume_queue import UNIT_BYTES
from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import decode

StoreFactory = Callable[..., MessageStore]


def test_units_are_20_bytes_and_files_hold_the_configured_count(open_store: StoreFactory) -> None:
    store = open_store(consume_queue_units_per_file=50)
    results = [store.put_message(message(body=b"m", TAGS="A")) for _ in range(120)]
    store.dispatch_pending()
    directory = store.root / "consumequeue" / "TopicA" / "0"
    files = sorted(p.name for p in directory.iterdir())
    assert files == [f"{i * 50 * UNIT_BYTES:020d}" for i in range(3)]
    assert all((directory / f).stat().st_size == 50 * UNIT_BYTES for f in files)
    queue = store.consume_queue("TopicA", 0)
    assert queue is not None and queue.max_offset == 120
    physical, size, _ = queue.unit_at(77)  # type: ignore[misc]
    assert (physical, size) == (results[77].first.physical_offset, results[77].first.size)


def test_queues_are_invisible_until_dispatched(open_store: StoreFactory) -> None:
    store = open_store()
    store.put_message(message(queue_id=2))
    assert store.max_offset_in_queue("TopicA", 2) == 0
    store.dispatch_pending()
    assert store.max_offset_in_queue("TopicA", 2) == 1


def test_growth_hook_fires_once_per_queue_per_pass_with_the_new_max(open_store: StoreFactory) -> None:
    store = open_store()
    seen: list[tuple[str, int, int]] = []
    store.dispatcher.add_listener(lambda topic, queue, max_offset: seen.append((topic, queue, max_offset)))
    for i in range(6):
        store.put_message(message(queue_id=i % 2))
    store.put_message(message(topic="Other", queue_id=5))
    store.dispatch_pending()
    assert sorted(seen) == [("Other", 5, 1), ("TopicA", 0, 3), ("TopicA", 1, 3)]


def test_replay_of_already_dispatched_records_adds_nothing(open_store: StoreFactory) -> None:
    store = open_store()
    for i in range(30):
        store.put_message(message(body=f"{i}".encode(), KEYS=f"key{i}"))
    store.dispatch_pending()
    store.dispatcher.dispatched_offset = 0
    store.dispatch_pending()
    assert store.max_offset_in_queue("TopicA", 0) == 30
    assert len(store.query_by_key("TopicA", "key7")) == 1


def test_prepared_and_rollback_transaction_messages_get_no_unit(open_store: StoreFactory) -> None:
    store = open_store()
    half = message(body=b"half")
    half.sys_flag = 0x1 << 2
    store.put_message(half)
    store.put_message(message(body=b"normal"))
    store.dispatch_pending()
    records = store.get_message("g", "TopicA", 0, 0, 32).records
    assert [decode(r).body for r in records] == [b"normal"]


def test_concurrent_reader_never_sees_an_incomplete_record(open_store: StoreFactory) -> None:
    """A writer thread appends and dispatches while a reader polls: every record read is whole."""
    store = open_store(segment_bytes=256 * 1024)
    stop = threading.Event()
    problems: list[str] = []
    read = 0

    def reader() -> None:
        nonlocal read
        offset = 0
        while not stop.is_set() or offset < store.max_offset_in_queue("TopicA", 0):
            result = store.get_message("g", "TopicA", 0, offset, 32)
            for raw in result.records:
                try:
                    decoded = decode(raw)
                except ValueError as error:
                    problems.append(str(error))
                    return
                if decoded.queue_offset != read:
                    problems.append(f"queue offset {decoded.queue_offset} read as message {read}")
                read += 1
            offset = result.next_begin_offset if result.records else offset

    thread = threading.Thread(target=reader)
    thread.start()
    for i in range(3000):
        store.put_message(message(body=bytes([i % 251]) * (100 + i % 900)))
        if i % 7 == 0:
            store.dispatch_pending()
    store.dispatch_pending()
    stop.set()
    thread.join(timeout=30)
    assert not problems
    assert read == 3000
