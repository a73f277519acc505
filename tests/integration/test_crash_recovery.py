"""Crash test: a real child process appends under SYNC_FLUSH and is SIGKILLed at random moments.

After every kill the store is reopened: each acknowledged message must read back byte-identical
at its offsets, and every record reachable through the log or the consume queues must be whole.
Tiny segments make kills land around roll-over.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from crash_child import body_of, config

from orbitmq.store.message_store import MessageStore
from orbitmq.store.record import decode

ROUNDS = 24
CHILD = Path(__file__).parent / "crash_child.py"


def _run_and_kill(data_dir: Path, first_seq: int, rng: random.Random) -> list[tuple[int, int, int, int]]:
    child = subprocess.Popen(
        [sys.executable, str(CHILD), str(data_dir), str(first_seq)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    time.sleep(rng.uniform(0.02, 0.4))
    os.kill(child.pid, signal.SIGKILL)
    output = child.stdout.read()
    child.wait()
    acks = []
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[0] == "ack":
            acks.append(tuple(int(p) for p in parts[1:]))
    return acks  # type: ignore[return-value]


def _verify(store: MessageStore, acked: dict[int, tuple[int, int, int]]) -> None:
    for seq, (physical, queue_offset, size) in acked.items():
        found = store.message_at(physical)
        assert found is not None, f"acknowledged message {seq} at {physical} is gone"
        assert found.body == body_of(seq) and found.properties["SEQ"] == str(seq)
        assert (found.queue_offset, found.size) == (queue_offset, size)
    for queue_id in range(3):
        queue = store.consume_queue("CrashTopic", queue_id)
        assert queue is not None
        for offset in range(queue.min_offset, queue.max_offset):
            physical, size, _ = queue.unit_at(offset)  # type: ignore[misc]
            record = store.commitlog.read(physical, size)
            assert record is not None, f"unit {offset} of queue {queue_id} points at nothing"
            message = decode(record)  # raises on a torn or garbage record
            assert (message.queue_id, message.queue_offset) == (queue_id, offset)
            assert message.body == body_of(int(message.properties["SEQ"]))


@pytest.mark.timeout(600)
def test_acknowledged_messages_survive_sigkill(tmp_path: Path) -> None:
    rng = random.Random(20261121)
    data_dir = tmp_path / "store"
    acked: dict[int, tuple[int, int, int]] = {}
    rounds_with_acks = 0
    for round_number in range(ROUNDS):
        acks = _run_and_kill(data_dir, round_number * 1_000_000, rng)
        rounds_with_acks += bool(acks)
        for seq, physical, queue_offset, size in acks:
            acked[seq] = (physical, queue_offset, size)
        store = MessageStore(config(data_dir))
        report = store.open()
        try:
            assert not report.clean_shutdown
            _verify(store, acked)
        finally:
            store.close()
    assert rounds_with_acks >= ROUNDS - 2 and len(acked) > 500
    segments = list((data_dir / "commitlog").iterdir())
    assert len(segments) > 20, "kills should have landed across many roll-overs"
