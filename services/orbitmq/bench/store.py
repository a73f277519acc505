"""``orbitmq bench store``: the storage engine against raw file I/O measured in the same run.

Figures (1 KiB bodies unless said otherwise):

* ``append_async`` — messages/s appended through :class:`StoreService` with ASYNC_FLUSH in
  puts of 32 messages, counted until the dispatcher has built consume queues and index for all
  of them and a final fsync is done. Baseline: ``os.write`` of the same records, one call per
  message, one final fsync; the ratio compares bytes/s. ``append_async_unbatched``: the same
  with one message per put.
* ``append_sync_group_commit`` — messages/s with SYNC_FLUSH and 16 concurrent writers, each
  waiting for its fsync; baseline as above.
* ``read_sequential`` — messages/s read through consume queues with ``get_message`` in batches
  of 32. Baseline: ``os.pread`` of the same records in order.
* ``open_rss_mb`` — resident memory of a fresh process right after opening a store holding
  ``--rss-gib`` GiB. Baseline: the same process before opening the store.
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from tqdm import tqdm

from orbitmq.bench.figures import Figure
from orbitmq.store.config import GIB, MIB, FlushMode, StoreConfig
from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import InboundMessage
from orbitmq.store.service import StoreService

TOPIC = "BenchTopic"
QUEUES = 4
BODY_BYTES = 1024


def _messages(count: int, body_bytes: int = BODY_BYTES) -> list[InboundMessage]:
    """Pre-built inputs, moved out of the garbage collector's view.

    A broker's messages live for one request; the benchmark's inputs live for the whole run,
    and without ``gc.freeze`` every collection would re-walk them, charging the store for the
    benchmark's own bookkeeping.
    """
    body = os.urandom(body_bytes)
    messages = [
        InboundMessage(topic=TOPIC, body=body, queue_id=i % QUEUES, properties={"TAGS": "TagA"})
        for i in range(count)
    ]
    gc.collect()
    gc.freeze()
    return messages


def _config(directory: Path, flush_mode: FlushMode, **overrides: object) -> StoreConfig:
    settings: dict[str, object] = {
        "data_dir": directory,
        "flush_mode": flush_mode,
        "segment_bytes": 256 * MIB,
        "index_slot_count": 500_000,
        "index_max_entries": 2_000_000,
    }
    settings.update(overrides)
    return StoreConfig(**settings)  # type: ignore[arg-type]


def raw_write_rate(directory: Path, record_bytes: int, count: int) -> float:
    """Bytes/s of os.write of ``count`` records of ``record_bytes``, one final fsync."""
    path = directory / "raw-write.bin"
    chunk = os.urandom(record_bytes)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        started = time.perf_counter()
        for _ in range(count):
            os.write(fd, chunk)
        os.fsync(fd)
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
    return record_bytes * count / elapsed


def raw_read_rate(path: Path, record_bytes: int, count: int) -> float:
    """Messages/s of sequential os.pread of ``count`` records of ``record_bytes`` (page cache warm)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        started = time.perf_counter()
        position = 0
        for _ in range(count):
            os.pread(fd, record_bytes, position)
            position += record_bytes
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
    return count / elapsed


async def _append_async(directory: Path, count: int, batch: int) -> tuple[float, int]:
    messages = _messages(count)
    async with StoreService(_config(directory, FlushMode.ASYNC_FLUSH)) as service:
        store = service.store
        started = time.perf_counter()
        if batch == 1:
            for message in messages:
                await service.put_message(message)
        else:
            for i in range(0, count, batch):
                await service.put_messages(messages[i : i + batch])
        while store.dispatcher.dispatched_offset < store.commitlog.max_offset:  # noqa: ASYNC110
            await asyncio.sleep(0.001)  # the dispatch task runs between these sleeps
        await asyncio.to_thread(store.flush_commitlog)
        elapsed = time.perf_counter() - started
        written = store.commitlog.max_offset
    return count / elapsed, written // count


async def _append_sync(directory: Path, count: int, writers: int) -> float:
    messages = _messages(count)
    async with StoreService(_config(directory, FlushMode.SYNC_FLUSH)) as service:

        async def writer(lane: int) -> None:
            for message in messages[lane::writers]:
                result = await service.put_message(message)
                if not result.ok:
                    raise RuntimeError(f"put failed: {result.status} {result.reason}")

        started = time.perf_counter()
        await asyncio.gather(*(writer(lane) for lane in range(writers)))
        return count / (time.perf_counter() - started)


def _read_sequential(directory: Path, count: int) -> float:
    store = MessageStore(_config(directory, FlushMode.ASYNC_FLUSH))
    store.open()
    try:
        read = 0
        started = time.perf_counter()
        for queue_id in range(QUEUES):
            offset = 0
            while True:
                result = store.get_message("bench", TOPIC, queue_id, offset, 32)
                if not result.records:
                    break
                read += len(result.records)
                offset = result.next_begin_offset
        elapsed = time.perf_counter() - started
    finally:
        store.close()
    if read != count:
        raise RuntimeError(f"read {read} messages back, expected {count}")
    return read / elapsed


def _fill_store(directory: Path, total_bytes: int, progress: bool) -> None:
    body_bytes = 256 * 1024
    count = total_bytes // body_bytes + 1
    store = MessageStore(
        _config(directory, FlushMode.ASYNC_FLUSH, segment_bytes=1 * GIB, max_message_bytes=4 * MIB)
    )
    store.open()
    try:
        body = os.urandom(body_bytes)
        batch = [InboundMessage(topic=TOPIC, body=body, queue_id=q % QUEUES) for q in range(8)]
        with tqdm(
            total=total_bytes, unit="B", unit_scale=True, desc="fill store", disable=not progress
        ) as bar:
            for _ in range(0, count, len(batch)):
                store.put_messages(batch)
                store.dispatch_pending(1 << 40)
                bar.update(body_bytes * len(batch))
    finally:
        store.close()


RSS_PROBE = """
import sys
from pathlib import Path
def rss_mb():
    for line in open('/proc/self/status'):
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) / 1024
from orbitmq.store.message_store import MessageStore
from orbitmq.bench.store import _config
from orbitmq.store.config import GIB, MIB, FlushMode
before = rss_mb()
config = _config(Path(sys.argv[1]), FlushMode.ASYNC_FLUSH, segment_bytes=1 * GIB, max_message_bytes=4 * MIB)
store = MessageStore(config)
store.open()
after = rss_mb()
print(before, after, store.commitlog.max_offset)
store.close()
"""


def _open_rss(directory: Path) -> tuple[float, float, int]:
    out = subprocess.run(
        [sys.executable, "-c", RSS_PROBE, str(directory)], check=True, capture_output=True, text=True
    ).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def run(
    emit: Callable[[Figure], None],
    *,
    messages: int,
    sync_messages: int,
    rss_gib: float,
    work_dir: Path | None,
    progress: bool,
) -> None:
    root = Path(tempfile.mkdtemp(prefix="orbitmq-bench-", dir=work_dir))
    try:
        async_dir, sync_dir = root / "async", root / "sync"
        os.sync()
        rate, record_bytes = asyncio.run(_append_async(async_dir, messages, 32))
        baseline = raw_write_rate(root, record_bytes, messages)
        emit(
            Figure(
                "append_async",
                rate,
                "msg/s",
                baseline / record_bytes,
                "os.write per record + final fsync, msg/s (ratio = bytes/s ratio); puts of 32 messages",
                ">= 150000 msg/s, ratio >= 0.5",
            )
        )
        single_rate, _ = asyncio.run(_append_async(root / "async-single", messages, 1))
        emit(
            Figure("append_async_unbatched", single_rate, "msg/s", baseline / record_bytes, "same raw write")
        )
        shutil.rmtree(root / "async-single")

        os.sync()  # earlier figures' page-cache writeback must not compete with these fsyncs
        sync_rate = asyncio.run(_append_sync(sync_dir, sync_messages, 16))
        emit(
            Figure(
                "append_sync_group_commit",
                sync_rate,
                "msg/s",
                baseline / record_bytes,
                "same raw write",
                ">= 20000 msg/s with 16 writers",
            )
        )
        shutil.rmtree(sync_dir)

        read_rate = _read_sequential(async_dir, messages)
        segment = sorted((async_dir / "commitlog").iterdir())[0]
        read_baseline = raw_read_rate(segment, record_bytes, messages)
        emit(
            Figure(
                "read_sequential",
                read_rate,
                "msg/s",
                read_baseline,
                "os.pread per record in log order, msg/s",
                ">= 200000 msg/s",
            )
        )
        shutil.rmtree(async_dir)

        if rss_gib > 0:
            big = root / "big"
            _fill_store(big, int(rss_gib * GIB), progress)
            before, after, stored = _open_rss(big)
            emit(
                Figure(
                    "open_rss_mb",
                    after,
                    "MB",
                    before,
                    f"same process before open; store holds {stored / GIB:.2f} GiB",
                    "<= 200 MB",
                )
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
