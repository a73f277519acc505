"""Child process for the crash test: appends under SYNC_FLUSH and reports every acknowledgement.

Usage: python crash_child.py DATA_DIR FIRST_SEQ. Prints ``ack SEQ PHYSICAL QUEUE_OFFSET SIZE``
after each put returns PUT_OK, and runs until it is killed.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
from pathlib import Path

from orbitmq.store.config import FlushMode, StoreConfig
from orbitmq.store.record import InboundMessage
from orbitmq.store.service import StoreService

WRITERS = 4


def body_of(seq: int) -> bytes:
    size = 50 + (seq * 7919) % 2900
    block = hashlib.blake2b(str(seq).encode()).digest()
    return (block * (size // len(block) + 1))[:size]


def config(data_dir: Path) -> StoreConfig:
    return StoreConfig(
        data_dir=data_dir,
        segment_bytes=16 * 1024,
        max_message_bytes=4 * 1024,
        consume_queue_units_per_file=64,
        index_slot_count=32,
        index_max_entries=256,
        flush_mode=FlushMode.SYNC_FLUSH,
        consume_queue_flush_interval_ms=20,
    )


async def main(data_dir: Path, first_seq: int) -> None:
    async with StoreService(config(data_dir)) as service:
        print("ready", flush=True)

        async def writer(lane: int) -> None:
            seq = first_seq + lane
            while True:
                message = InboundMessage(
                    topic="CrashTopic",
                    body=body_of(seq),
                    queue_id=seq % 3,
                    properties={"KEYS": f"seq{seq}", "SEQ": str(seq)},
                )
                result = await service.put_message(message)
                if result.ok:
                    m = result.first
                    sys.stdout.write(f"ack {seq} {m.physical_offset} {m.queue_offset} {m.size}\n")
                    sys.stdout.flush()
                seq += WRITERS

        await asyncio.gather(*(writer(lane) for lane in range(WRITERS)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2])))
