"""The C record loop of a pull returns exactly what the Python rule returns, unit for unit."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from storekit import message

from nativekit import needs_native
from orbitmq.common.clock import ManualClock
from orbitmq.store import pull_read
from orbitmq.store.message_store import MessageStore
from orbitmq.store.results import GetStatus

StoreFactory = Callable[..., MessageStore]
pytestmark = needs_native
HOUR_MS = 3_600_000


def test_c_and_python_reads_agree_across_segments_limits_and_deleted_data(
    open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch, clock: ManualClock
) -> None:
    assert pull_read.NATIVE is not None
    # 64 KiB segments: a pull often spans two; some bodies alone exceed a pull's bytes.
    store = open_store(max_transfer_bytes=9000, file_reserved_time_ms=HOUR_MS)
    rng = random.Random(5)
    for i in range(400):
        if i == 60:
            clock.advance(2 * HOUR_MS)  # the first segment's messages expire, later ones do not
        body = rng.randbytes(rng.choice([10, 700, 3000, 9500]))
        assert store.put_message(message(body=body, queue_id=i % 2, KEYS=f"k{i}")).ok
    store.dispatch_pending()
    store.commitlog.flush()
    assert store.delete_expired() >= 1 and len(store.commitlog.segments) > 5
    for queue_id in (0, 1):  # units over deleted records, as a pull racing retention sees them
        store.consume_queue("TopicA", queue_id)._min_offset = 0  # type: ignore[union-attr]
    cases = [(q, offset, count) for q in (0, 1) for offset in range(0, 205, 3) for count in (1, 2, 7, 32)]

    def reads() -> list[tuple[object, ...]]:
        results = []
        for queue_id, offset, count in cases:
            result = store.get_message("g", "TopicA", queue_id, offset, count)
            results.append((result.status, result.next_begin_offset, tuple(result.records)))
        return results

    by_c = reads()
    monkeypatch.setattr(pull_read, "NATIVE", None)
    by_python = reads()
    assert by_c == by_python
    assert sum(len(records) for *_, records in by_c) > 500
    status, next_offset, records = by_c[0]  # queue 0 from offset 0: its first units lost their records
    assert status is GetStatus.FOUND and next_offset > 2 and len(records) == 1
