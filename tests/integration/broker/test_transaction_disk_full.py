"""A check-back whose copy of the half message a full disk refuses leaves the half where the
check pass is: it is asked about once space frees. The pass used to step past it anyway, and
the half was never asked about again (a transaction whose end was lost stayed open for good;
one its producer would have committed never became visible).

A real broker on a small tmpfs, filled by a ballast file and by sends until the disk refuses
a write (only then are the broker's own bookkeeping records, such as check copies, refused).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from brokerkit import TEST_SETTINGS, start_broker, stop_broker
from clusterkit import eventually

from orbitmq.broker.transactions import PROGRESS_GROUP
from orbitmq.client import Message, SendStatus, StoredMessage, TransactionProducer, TransactionResolution
from orbitmq.common.topics import TRANS_HALF_TOPIC
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.v1 import broker_pb2, common_pb2

pytestmark = [
    pytest.mark.timeout(90),
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("mount") is None, reason="mounting a tmpfs needs root"
    ),
]

DISK_BYTES = 16 * 1024 * 1024
TIMEOUT_MS = 3_000
"""A half is asked about 3 s after it was stored: time to fill the disk first."""


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
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


async def test_a_check_copy_the_full_disk_refuses_leaves_the_half_for_the_next_pass(
    disk: Path, namesrv: NameServer
) -> None:
    running = await start_broker(
        disk / "store",
        namesrv=namesrv.address,
        broker_name="tx-full-broker",
        segment_bytes=1024 * 1024,
        max_message_bytes=64 * 1024,
        consume_queue_units_per_file=4096,
        index_slot_count=TEST_SETTINGS["index_slot_count"],
        index_max_entries=TEST_SETTINGS["index_max_entries"],
        disk_check_interval_ms=100,
        disk_space_warning_level_ratio=1.0,  # no ratio refuses: only the disk itself
        disk_space_clean_forcibly_ratio=1.0,
        disk_max_used_space_ratio=1.0,
        transaction_timeout_ms=TIMEOUT_MS,
        transaction_check_interval_ms=100,
    )
    broker = running.broker
    queue = lambda: broker.store.consume_queue(TRANS_HALF_TOPIC, 0)  # noqa: E731
    try:

        def check(message: StoredMessage) -> TransactionResolution:
            return TransactionResolution.UNKNOWN

        async with TransactionProducer(
            "TxFullProducer",
            namesrv.address,
            local_transaction=lambda message, arg: TransactionResolution.UNKNOWN,
            check=check,
        ) as producer:
            result, _ = await producer.send_in_transaction(Message("TxFull", b"paid"))
            sent_at = time.monotonic()
            assert result.status is SendStatus.SEND_OK
            ballast = disk / "ballast"
            with ballast.open("wb") as file:
                stats = os.statvfs(disk)
                os.posix_fallocate(file.fileno(), 0, stats.f_bavail * stats.f_frsize - 64 * 1024)
            body = b"y" * 8 * 1024
            for _ in range(2 * DISK_BYTES // len(body)):  # to the end of the segment, and past
                try:
                    await running.stub.SendMessage(
                        broker_pb2.SendMessageRequest(
                            producer_group="filler",
                            topic="Filler",
                            queue_id=0,
                            messages=[common_pb2.Message(topic="Filler", body=body)],
                        )
                    )
                except grpc.aio.AioRpcError:
                    break
            assert not broker.store.disk.has_room, "the disk never refused a write"
            half_queue = queue()
            assert half_queue is not None and half_queue.max_offset == 1, "asked before the disk filled"

            # Past the half's timeout: ten passes meet it, and the disk refuses each copy.
            await asyncio.sleep(max(0.0, sent_at + TIMEOUT_MS / 1000 + 1.0 - time.monotonic()))
            assert broker.transactions.checks_sent == 0
            assert broker.offsets.query(PROGRESS_GROUP, TRANS_HALF_TOPIC, 0) <= 0, "the pass stepped past"

            ballast.unlink()
            await eventually(
                lambda: half_queue.max_offset > 1, 10, lambda: "the half asked about once space freed"
            )
    finally:
        await stop_broker(running)
