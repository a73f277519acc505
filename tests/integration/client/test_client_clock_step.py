"""A client whose wall clock is stepped keeps its queue locks and its queues.

An orderly consumer stops consuming a queue whose lock it has not renewed for 30 s (the broker
lets it lapse after 60 s), and drops a queue it has not pulled for 120 s. Both were timed on the
wall clock: a step forward stopped every orderly queue and dropped every queue at the next
rebalance, and a step back kept a consumer consuming a queue whose lock the broker had already
given to another. The consumer's clock is the monotonic one by default now.

Run in a child process under libfaketime, the consumer's real defaults (no clock passed in);
needs Debian's libfaketime (scripts/test installs it), skipped without it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from orbitmq.chaos.clockfault import library, set_offset

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(library() is None, reason="needs libfaketime (apt-get install libfaketime)"),
]

CHILD = """
import sys
from pathlib import Path

from orbitmq.chaos.clockfault import set_offset
from orbitmq.client import PushConsumer
from orbitmq.client.process_queue import ProcessQueue

offsets = Path(sys.argv[1])
consumer = PushConsumer("StepGroup", "127.0.0.1:1", listener=lambda messages: None, orderly=True)
pq = ProcessQueue()
pq.set_locked(True)
pq.mark_pulled()
for seconds in (150, -150):  # forward past both limits, then back past the start
    set_offset(offsets, seconds)
    now = consumer.clock.now_ms()
    assert not pq.is_lock_expired(now), f"the lock lapsed at {seconds:+d} s"
    assert not pq.is_pull_expired(now), f"the queue looked idle at {seconds:+d} s"
print("kept")
"""


def test_a_stepped_client_clock_neither_lapses_its_locks_nor_idles_its_queues(tmp_path: Path) -> None:
    offsets = tmp_path / "client.faketime"
    set_offset(offsets, 0)
    env = {
        **os.environ,
        "LD_PRELOAD": str(library()),
        "FAKETIME_TIMESTAMP_FILE": str(offsets),
        "FAKETIME_NO_CACHE": "1",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(offsets)], capture_output=True, text=True, env=env, timeout=50
    )
    assert child.returncode == 0 and child.stdout.strip() == "kept", child.stderr[-2000:]
