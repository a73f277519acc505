"""The commit log times its fsyncs (``CommitLog.flush_latency``, exported by the broker as
``orbitmq_commitlog_flush_seconds``): once per group commit under SYNC_FLUSH, once per periodic
flush under ASYNC_FLUSH, never for a flush with nothing new to write, and with the time the
disk really took."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from storekit import message, tiny_config

from orbitmq.common.tally import LatencyTally
from orbitmq.store.commitlog import FLUSH_LATENCY_BUCKETS
from orbitmq.store.config import FlushMode
from orbitmq.store.message_store import MessageStore
from orbitmq.store.service import StoreService

pytestmark = pytest.mark.timeout(60)

SLOW_FSYNC_S = 0.02


def slow_fsync(fd: int) -> None:
    """A real fsync on a disk that takes at least ``SLOW_FSYNC_S``."""
    time.sleep(SLOW_FSYNC_S)
    os.fdatasync(fd)


def at_or_below(tally: LatencyTally, bound: float) -> int:
    return tally.cumulative()[tally.bounds.index(bound)]


async def test_sync_flush_times_one_fsync_per_group_commit(tmp_path: Path) -> None:
    config = tiny_config(tmp_path, flush_mode=FlushMode.SYNC_FLUSH)
    async with StoreService(config, fsync=slow_fsync) as service:
        tally = service.store.commitlog.flush_latency
        assert tally.count == 0
        for i in range(5):  # one after another: each waits for a group commit of its own
            assert (await service.put_message(message(body=f"{i}".encode()))).ok
        assert tally.count == 5
    assert tally.count == 5, "the closing flush had nothing new and counted"
    assert at_or_below(tally, 0.01) == 0, "a 20 ms fsync counted as faster than 10 ms"
    assert tally.total_seconds >= 5 * SLOW_FSYNC_S
    assert tally.cumulative()[-1] == tally.count


async def test_async_flush_times_each_periodic_flush(tmp_path: Path) -> None:
    config = tiny_config(tmp_path, flush_mode=FlushMode.ASYNC_FLUSH, flush_interval_ms=50)
    async with StoreService(config, fsync=slow_fsync) as service:
        commitlog = service.store.commitlog
        results = [await service.put_message(message(body=f"{i}".encode())) for i in range(20)]
        assert all(r.ok for r in results)
        end = results[-1].end_offset
        for _ in range(100):
            if commitlog.flushed_offset >= end:
                break
            await asyncio.sleep(0.02)
        assert commitlog.flushed_offset >= end
        flushes = commitlog.flush_latency.count
        # Twenty puts with no wait in between: the flusher's next pass covers them all (one
        # more if a pass was already under way), not one fsync each.
        assert 1 <= flushes <= 2, flushes
        assert commitlog.flush_latency.total_seconds >= flushes * SLOW_FSYNC_S


def test_a_flush_with_nothing_new_is_not_counted(tmp_path: Path) -> None:
    store = MessageStore(tiny_config(tmp_path))
    store.open()
    try:
        tally = store.commitlog.flush_latency
        store.flush_commitlog()
        assert tally.count == 0
        assert store.put_message(message()).ok
        store.flush_commitlog()
        store.flush_commitlog()
        assert tally.count == 1
    finally:
        store.close()


def test_the_flush_buckets_span_a_fast_disk_to_a_failing_one() -> None:
    tally = LatencyTally(FLUSH_LATENCY_BUCKETS)
    for seconds in (0.00005, 0.0001, 0.3, 60.0):  # below every bound, on one, between, above all
        tally.observe(seconds)
    assert tally.bounds[0] <= 0.0001 and tally.bounds[-1] >= 5  # the SYNC_FLUSH timeout's default
    assert at_or_below(tally, 0.0001) == 2
    assert at_or_below(tally, 0.5) == 3
    assert tally.cumulative()[-1] == 4


@pytest.mark.parametrize("bounds", [(), (0.0, 1.0), (-1.0,), (0.1, 0.1), (1.0, 0.5)])
def test_bad_bucket_bounds_are_refused_naming_them(bounds: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="positive and strictly increasing") as error:
        LatencyTally(bounds)
    assert str(bounds) in str(error.value)
