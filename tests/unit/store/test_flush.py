"""Flushing: SYNC_FLUSH waits for fsync, group commit shares it, the event loop never blocks on it."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path

import pytest
from storekit import message, tiny_config

from orbitmq.store.config import FlushMode
from orbitmq.store.results import PutStatus
from orbitmq.store.service import StoreService

pytestmark = pytest.mark.timeout(60)


class RecordingFsync:
    """A real fsync that also records which thread called it, optionally on a slow disk."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.delay_s = delay_s
        self.calls = 0
        self.threads: set[int] = set()
        self._lock = threading.Lock()

    def __call__(self, fd: int) -> None:
        with self._lock:
            self.calls += 1
            self.threads.add(threading.get_ident())
        if self.delay_s:
            time.sleep(self.delay_s)
        os.fdatasync(fd)


async def test_sync_flush_acknowledges_only_flushed_messages(tmp_path: Path) -> None:
    fsync = RecordingFsync()
    async with StoreService(tiny_config(tmp_path, flush_mode=FlushMode.SYNC_FLUSH), fsync=fsync) as service:
        for i in range(20):
            result = await service.put_message(message(body=f"{i}".encode()))
            assert result.status is PutStatus.PUT_OK
            assert service.store.commitlog.flushed_offset >= result.end_offset


async def test_group_commit_shares_fsyncs_between_concurrent_writers(tmp_path: Path) -> None:
    fsync = RecordingFsync(delay_s=0.002)
    config = tiny_config(tmp_path, flush_mode=FlushMode.SYNC_FLUSH, segment_bytes=1 << 22)
    async with StoreService(config, fsync=fsync) as service:

        async def writer(n: int) -> None:
            for i in range(50):
                result = await service.put_message(message(body=f"{n}-{i}".encode()))
                assert result.ok

        before = fsync.calls
        await asyncio.gather(*(writer(n) for n in range(16)))
        commitlog_fsyncs = fsync.calls - before
    assert commitlog_fsyncs < 800 / 4, f"{commitlog_fsyncs} fsyncs for 800 acknowledged messages"


async def test_slow_disk_gives_flush_disk_timeout_but_keeps_the_message(tmp_path: Path) -> None:
    fsync = RecordingFsync(delay_s=0.5)
    config = tiny_config(tmp_path, flush_mode=FlushMode.SYNC_FLUSH, sync_flush_timeout_ms=100)
    async with StoreService(config, fsync=fsync) as service:
        result = await service.put_message(message(body=b"late"))
        assert result.status is PutStatus.FLUSH_DISK_TIMEOUT
        assert service.store.message_at(result.first.physical_offset).body == b"late"  # type: ignore[union-attr]


async def test_fsync_never_blocks_the_event_loop(tmp_path: Path) -> None:
    fsync = RecordingFsync(delay_s=0.2)
    config = tiny_config(tmp_path, flush_mode=FlushMode.SYNC_FLUSH, consume_queue_flush_interval_ms=50)
    loop_thread = threading.get_ident()
    gaps: list[float] = []
    async with StoreService(config, fsync=fsync) as service:
        stop = asyncio.Event()

        async def ticker() -> None:
            last = time.perf_counter()
            while not stop.is_set():
                await asyncio.sleep(0.01)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        results = await asyncio.gather(*(service.put_message(message(body=bytes(i))) for i in range(30)))
        await asyncio.sleep(0.3)
        stop.set()
        await tick
    assert all(r.ok for r in results)
    assert fsync.calls > 0 and loop_thread not in fsync.threads
    assert max(gaps) < 0.15, f"event loop stalled for {max(gaps):.3f} s"


async def test_async_flush_acknowledges_at_once_and_flushes_within_the_interval(tmp_path: Path) -> None:
    fsync = RecordingFsync(delay_s=0.05)
    config = tiny_config(tmp_path, flush_mode=FlushMode.ASYNC_FLUSH, flush_interval_ms=100)
    async with StoreService(config, fsync=fsync) as service:
        result = await service.put_message(message())
        assert result.ok and service.store.commitlog.flushed_offset < result.end_offset
        for _ in range(50):
            await asyncio.sleep(0.05)
            if service.store.commitlog.flushed_offset >= result.end_offset:
                break
        assert service.store.commitlog.flushed_offset >= result.end_offset
