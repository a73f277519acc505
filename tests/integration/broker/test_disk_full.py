"""A full disk under a real broker: its store on a small tmpfs, filled by a ballast file or by sends.

Past ``disk_space_warning_level_ratio`` a producer's send fails at once with DISK_FULL (naming the
ratio, the path and the setting), while pulls and offset commits go on; deleting the ballast lets
sends through again with no restart. Past ``disk_space_clean_forcibly_ratio`` the oldest segments
go before their retention time and sends are never refused. With no ratio to stop it, a send
meets ENOSPC creating a segment: it is refused with DISK_FULL, and after a SIGKILL the store's
recovery scans the whole log clean and finds every acknowledged message.

Needs root (mount); skipped otherwise.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import grpc
import pytest
from brokerkit import TEST_SETTINGS, RunningBroker, broker_process, start_broker, stop_broker
from prometheus_client.parser import text_string_to_metric_families

from orbitmq.client.message import Message, SendStatus
from orbitmq.client.producer import Producer
from orbitmq.client.retry import SendFailed
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.store.config import StoreConfig
from orbitmq.store.disk import used_ratio
from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2, common_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("mount") is None, reason="mounting a tmpfs needs root"
    ),
]

DISK_BYTES = 16 * 1024 * 1024
SEGMENT_BYTES = 1024 * 1024
SMALL_STORE = {
    "segment_bytes": SEGMENT_BYTES,
    "max_message_bytes": 64 * 1024,
    "consume_queue_units_per_file": 4096,
    "disk_check_interval_ms": 100,
}
"""1 MiB segments and 80 KiB consume-queue files on a 16 MiB disk; the disk read every 100 ms."""


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs, unmounted (lazily, should a file still be open) at the end."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
async def namesrv() -> AsyncIterator[NameServer]:
    server = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None))
    await server.start()
    yield server
    await server.close()


def fill_to(disk: Path, ratio: float, name: str = "ballast") -> Path:
    """A ballast file taking the disk to just past ``ratio`` used (1.0: every free byte)."""
    stats = os.statvfs(disk)
    total, free = stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize
    wanted = min(free, int(total * ratio) + 64 * 1024 - (total - free))
    path = disk / name
    with path.open("wb") as ballast:
        os.posix_fallocate(ballast.fileno(), 0, max(wanted, 4096))
    return path


def scrape(url: str) -> dict[str, float]:
    """The broker's metrics: ``name`` → value (one broker, so one sample per name)."""
    with urllib.request.urlopen(url, timeout=5) as reply:
        text = reply.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


async def eventually_sends(producer: Producer, topic: str, within_s: float) -> float:
    """Seconds until a send succeeds again."""
    started = time.monotonic()
    while True:
        try:
            await producer.send(Message(topic, b"again"))
            return time.monotonic() - started
        except SendFailed:
            if time.monotonic() - started > within_s:
                raise
            await asyncio.sleep(0.1)


async def test_full_disk_refuses_sends_at_once_reads_and_commits_go_on_and_writes_resume(
    disk: Path, namesrv: NameServer
) -> None:
    running = await start_broker(
        disk / "store",
        namesrv=namesrv.address,
        broker_name="full-broker",
        **SMALL_STORE,
        disk_space_warning_level_ratio=0.8,
        disk_space_clean_forcibly_ratio=1.0,  # nothing expires or is deleted: only the ballast frees space
    )
    try:
        async with Producer("disk-producer", namesrv.address) as producer:
            sent = [await producer.send(Message("Full", f"m{i}".encode(), keys=[f"k{i}"])) for i in range(20)]
            assert all(r.status is SendStatus.SEND_OK for r in sent)
            ballast = fill_to(disk, 0.85)
            await asyncio.sleep(0.3)  # three disk checks

            started = time.monotonic()
            with pytest.raises(SendFailed) as refused:
                await producer.send(Message("Full", b"refused"))
            assert time.monotonic() - started < 5, (
                "a full disk is not a reason to retry for the send's budget"
            )
            assert refused.value.reason == ErrorReason.DISK_FULL
            text = str(refused.value)
            assert "disk_space_warning_level_ratio 80%" in text and str(disk / "store") in text, text

            # Reads and offset commits go on.
            first = sent[0]
            reply = await running.stub.PullMessage(
                broker_pb2.PullMessageRequest(
                    consumer_group="disk-readers",
                    topic="Full",
                    queue_id=first.queue_id,
                    queue_offset=0,
                    max_msg_nums=32,
                    commit_offset=-1,
                )
            )
            assert reply.status == broker_pb2.FOUND and reply.records
            await running.stub.UpdateConsumerOffset(
                broker_pb2.UpdateConsumerOffsetRequest(
                    consumer_group="disk-readers",
                    topic="Full",
                    queue_id=first.queue_id,
                    offset=len(reply.records),
                )
            )
            committed = await running.stub.QueryConsumerOffset(
                broker_pb2.QueryConsumerOffsetRequest(
                    consumer_group="disk-readers", topic="Full", queue_id=first.queue_id
                )
            )
            assert committed.offset == len(reply.records)

            # POP consumers too: handing a message out and acking it write the broker's own
            # records, which a disk past the warning ratio (with room left) still takes.
            popped = await running.stub.PopMessage(
                broker_pb2.PopMessageRequest(
                    consumer_group="disk-pop",
                    topic="Full",
                    queue_id=-1,
                    max_msg_nums=4,
                    invisible_time_ms=60_000,
                )
            )
            assert popped.messages
            acked = await running.stub.AckMessage(
                broker_pb2.AckMessageRequest(
                    consumer_group="disk-pop", topic="Full", receipt_handle=popped.messages[0].receipt_handle
                )
            )
            assert acked.result == broker_pb2.ACK_OK

            metrics = scrape(running.broker.grpc.metrics_url)
            assert metrics["orbitmq_store_disk_full"] == 1
            assert metrics["orbitmq_store_disk_used_ratio"] > 0.8
            assert metrics["orbitmq_store_disk_full_ratio"] == 0.8
            assert metrics["orbitmq_store_disk_full_refusals_total"] >= 1

            ballast.unlink()
            assert await eventually_sends(producer, "Full", within_s=8) < 8
            assert scrape(running.broker.grpc.metrics_url)["orbitmq_store_disk_full"] == 0
    finally:
        await stop_broker(running)


async def test_past_the_forcible_ratio_old_segments_go_before_their_retention_time(disk: Path) -> None:
    """A producer writes three times the disk's size: the oldest segments are deleted (a day
    before their retention time) and no send is refused."""
    running = await start_broker(
        disk / "store",
        **SMALL_STORE,
        file_reserved_time_ms=24 * 3_600_000,
        disk_max_used_space_ratio=0.5,
        disk_space_clean_forcibly_ratio=0.6,
        disk_space_warning_level_ratio=0.9,
    )
    body = b"x" * 16 * 1024
    try:
        for i in range(3 * DISK_BYTES // len(body)):
            reply = await running.stub.SendMessage(
                broker_pb2.SendMessageRequest(
                    producer_group="filler",
                    topic="Filler",
                    queue_id=0,
                    messages=[common_pb2.Message(topic="Filler", body=body)],
                )
            )
            assert reply.status == broker_pb2.SEND_OK, i
            if i % 64 == 0:
                await asyncio.sleep(0.11)  # let a disk check run now and then, as in any real minute
        store = running.broker.store
        assert store.commitlog.min_offset > 0, "no segment was deleted"
        assert used_ratio(disk) < 0.9
        assert store.min_offset_in_queue("Filler", 0) > 0
        assert store.disk.refused_writes == 0
    finally:
        await stop_broker(running)


async def test_enospc_creating_a_segment_is_disk_full_and_leaves_no_torn_record(disk: Path) -> None:
    """No ratio stops the sends (the warning level is 100 %), so one meets a disk that cannot
    hold another segment: DISK_FULL, and after a SIGKILL the whole log scans clean."""
    store_dir = disk / "store"
    settings = {
        **{k: v for k, v in SMALL_STORE.items() if k != "segment_bytes"},
        "index_slot_count": TEST_SETTINGS["index_slot_count"],
        "index_max_entries": TEST_SETTINGS["index_max_entries"],
        "disk_space_warning_level_ratio": 1.0,
        "disk_space_clean_forcibly_ratio": 1.0,
        "disk_max_used_space_ratio": 1.0,
        "flush_mode": "SYNC_FLUSH",
    }
    acknowledged: list[int] = []
    body = b"y" * 8 * 1024
    async with broker_process(store_dir, "enospc-broker", segment_bytes=SEGMENT_BYTES, settings=settings) as (
        stub,
        metrics_url,
        process,
    ):
        failure = None
        for _ in range(2 * DISK_BYTES // len(body)):
            try:
                reply = await stub.SendMessage(
                    broker_pb2.SendMessageRequest(
                        producer_group="filler",
                        topic="Torn",
                        queue_id=0,
                        messages=[common_pb2.Message(topic="Torn", body=body)],
                    )
                )
            except grpc.aio.AioRpcError as error:
                failure = error
                break
            assert reply.status == broker_pb2.SEND_OK
            acknowledged.append(reply.commit_log_offset)
        assert failure is not None, "the disk never filled"
        assert "DISK_FULL" in str(failure) or "refused a write" in str(failure), failure
        assert "no space left" in str(failure)
        assert scrape(metrics_url)["orbitmq_store_disk_full"] == 1
        process.send_signal(signal.SIGKILL)
        await process.wait()

    (store_dir / "checkpoint").unlink()  # recovery then scans the whole log, record by record
    config = StoreConfig(
        data_dir=store_dir,
        segment_bytes=SEGMENT_BYTES,
        max_message_bytes=64 * 1024,
        consume_queue_units_per_file=4096,
        index_slot_count=TEST_SETTINGS["index_slot_count"],
        index_max_entries=TEST_SETTINGS["index_max_entries"],
    )
    store = MessageStore(config)
    report = store.open()
    try:
        assert not report.clean_shutdown
        assert report.commitlog.scanned_from == 0
        assert report.commitlog.truncated_bytes == 0 and report.commitlog.segments_removed == 0
        assert report.commitlog.records_scanned >= len(acknowledged)
        assert report.units_dropped == 0
        found = [store.message_at(offset) for offset in acknowledged]
        assert all(message is not None and message.body == body for message in found)
        assert store.max_offset_in_queue("Torn", 0) == len(acknowledged)
    finally:
        store.close()


async def test_a_consume_queue_file_the_disk_refuses_is_built_once_space_frees(disk: Path) -> None:
    """The record fits in its segment but its new queue's file does not: the send is stored and
    answered OK, further sends are refused, and once the ballast goes the dispatcher builds
    the queue by itself, so the message can be read."""
    running = await start_broker(disk / "store", **SMALL_STORE, disk_space_warning_level_ratio=1.0)
    try:
        await send(running, "Early", b"first")  # the first segment exists, mostly empty
        await send(
            running, "Late", b"topic", queue_id=1
        )  # the topic's config is on disk; queue 0 has no file
        ballast = fill_to(disk, 1.0)  # posix_fallocate takes what is left, then fails
        reply = await running.stub.SendMessage(
            broker_pb2.SendMessageRequest(
                producer_group="p",
                topic="Late",
                queue_id=0,
                messages=[common_pb2.Message(topic="Late", body=b"late")],
            )
        )
        assert reply.status == broker_pb2.SEND_OK
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await send(running, "Early", b"second")
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "refused a write" in (refused.value.details() or "")
        store = running.broker.store
        assert store.max_offset_in_queue("Late", 0) == 0  # not built yet
        ballast.unlink()
        for _ in range(50):
            if store.max_offset_in_queue("Late", 0) == 1:
                break
            await asyncio.sleep(0.1)
        got = store.get_message("g", "Late", 0, 0, 1)
        assert [decode(r).body for r in got.records] == [b"late"]
        await send(running, "Early", b"third")
    finally:
        await stop_broker(running)


async def send(running: RunningBroker, topic: str, body: bytes, queue_id: int = 0) -> None:
    reply = await running.stub.SendMessage(
        broker_pb2.SendMessageRequest(
            producer_group="p",
            topic=topic,
            queue_id=queue_id,
            messages=[common_pb2.Message(topic=topic, body=body)],
        )
    )
    assert reply.status == broker_pb2.SEND_OK


async def test_a_slave_out_of_space_shows_disk_full_and_catches_up_once_space_frees(
    disk: Path, tmp_path: Path
) -> None:
    """The master's log rolls to a segment the slave's full disk cannot hold: the slave says
    DISK_FULL (its metric and log) instead of only reconnecting, and copies the rest once the
    ballast goes, with no restart."""
    master = await start_broker(tmp_path / "master", broker_name="pair", **SMALL_STORE)
    slave = await start_broker(
        disk / "slave",
        broker_name="pair",
        broker_role="SLAVE",
        broker_id=1,
        master_addr=master.broker.address,
        **SMALL_STORE,
        disk_space_warning_level_ratio=1.0,
        disk_space_clean_forcibly_ratio=1.0,
        disk_max_used_space_ratio=1.0,
    )
    body = b"z" * 16 * 1024
    try:
        await send(master, "Copied", body)
        await until(
            lambda: slave.broker.store.commitlog.max_offset == master.broker.store.commitlog.max_offset
        )
        ballast = fill_to(disk, 1.0)
        for _ in range(SEGMENT_BYTES // len(body) + 2):  # the master opens its second segment
            await send(master, "Copied", body)
        await until(lambda: slave.broker.store.disk.refusal is not None)
        assert "refused a write (no space left" in (slave.broker.store.disk.refusal or "")
        assert slave.broker.store.commitlog.max_offset <= SEGMENT_BYTES
        ballast.unlink()
        await until(
            lambda: slave.broker.store.commitlog.max_offset == master.broker.store.commitlog.max_offset
        )
        await until(lambda: slave.broker.store.disk.refusal is None)
    finally:
        await stop_broker(slave)
        await stop_broker(master)


async def until(condition: Callable[[], bool], within_s: float = 15) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, "not within the time allowed"
        await asyncio.sleep(0.05)


def test_an_index_file_on_a_full_disk_is_an_error_not_a_sigbus(disk: Path) -> None:
    """An index file was created sparse, so writing its header through the mapping on a full
    disk killed the broker with SIGBUS (found by the slave test above); its blocks are reserved
    now, and a full disk is an OSError the store handles. Run in a child: a SIGBUS would kill
    the test process."""
    fill_to(disk, 1.0)
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from orbitmq.store.index_file import IndexFile\n"
            "try:\n    IndexFile(sys.argv[1], 1024, 8192, create=True)\n"
            "except OSError as error:\n    print(error.strerror)",
            str(disk / "index"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == 0, f"exit {child.returncode}: {child.stderr[-500:]}"
    assert child.stdout.strip() == "No space left on device"
    assert not (disk / "index").exists()
