"""The broker keeps the ids of ended transactions only while a half of theirs is ahead of the
check progress: a soak of steady transactions saw the set (the ``broker_resolved_transactions``
table) grow by one id per transaction for good. Forgetting an id must not let a late end of its
half commit the message a second time: that end is refused, while a late end of a half whose
check copy is still open is applied, as before.

A real broker in this process over real gRPC, as the other transaction tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from brokerkit import RunningBroker, start_broker, stop_broker
from test_send_pull import expect_failure, pull_request, send_request

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import eventually

from orbitmq.common.topics import TRANS_HALF_TOPIC
from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2
from orbitmq.v1.broker_pb2 import ErrorReason, TransactionResolution

pytestmark = pytest.mark.timeout(60)

TOPIC = "Pay"
FAST_CHECKS = {
    "transaction_timeout_ms": 200,
    "transaction_check_interval_ms": 100,
    "transaction_check_max": 3,
}
COUNT = 150


def half(body: bytes, tid: str) -> broker_pb2.SendMessageRequest:
    return send_request(TOPIC, body, queue_id=0, TRAN_MSG="true", UNIQ_KEY=tid)


def end(commit_log_offset: int) -> broker_pb2.EndTransactionRequest:
    return broker_pb2.EndTransactionRequest(
        producer_group="PG", commit_log_offset=commit_log_offset, resolution=TransactionResolution.COMMIT
    )


def half_records(running: RunningBroker) -> int:
    queue = running.broker.store.consume_queue(TRANS_HALF_TOPIC, 0)
    return 0 if queue is None else queue.max_offset


async def stored(running: RunningBroker) -> list[bytes]:
    """Every message of the topic's queue, read from offset 0."""
    bodies: list[bytes] = []
    while True:
        reply = await running.stub.PullMessage(pull_request(TOPIC, 0, len(bodies)))
        if not reply.records:
            return bodies
        bodies += [decode(record).body for record in reply.records]


async def test_ended_ids_are_forgotten_behind_the_progress_and_a_late_end_is_refused(tmp_path: Path) -> None:
    running = await start_broker(tmp_path / "b", **FAST_CHECKS)
    try:
        offsets = []
        for i in range(COUNT):
            sent = await running.stub.SendMessage(half(f"paid {i}".encode(), f"t{i}"))
            offsets.append(sent.commit_log_offset)
            await running.stub.EndTransaction(end(sent.commit_log_offset))
        await running.stub.EndTransaction(end(offsets[-1]))  # a retry at once: applied once

        await eventually(
            lambda: running.broker.transactions.resolved_count == 0,
            10,
            lambda: f"{running.broker.transactions.resolved_count} ended ids still kept",
        )
        await expect_failure(running.stub.EndTransaction(end(offsets[0])), ErrorReason.INVALID_OFFSET, "t0")
        assert await stored(running) == [f"paid {i}".encode() for i in range(COUNT)]
    finally:
        await stop_broker(running)

    # A restart reads every op record back, and keeps none of them: every half is behind.
    running = await start_broker(tmp_path / "b", transaction_check_interval_ms=60_000)
    try:
        assert running.broker.transactions.resolved_count == 0
        await expect_failure(running.stub.EndTransaction(end(offsets[1])), ErrorReason.INVALID_OFFSET, "t1")
        assert len(await stored(running)) == COUNT
    finally:
        await stop_broker(running)


async def test_a_late_end_of_a_half_whose_check_copy_is_open_is_applied_once(tmp_path: Path) -> None:
    # Checked 50 times before it is discarded: the copy stays open through the test.
    running = await start_broker(tmp_path / "b", **{**FAST_CHECKS, "transaction_check_max": 50})
    try:
        original = await running.stub.SendMessage(half(b"asked about", "open"))
        # No producer is connected: each check pass copies the half and finds nobody to ask,
        # so the original falls behind the progress while a copy of it stays open.
        await eventually(
            lambda: running.broker.transactions.resolved_count == 0 and half_records(running) >= 2,
            10,
            lambda: "a check copy of the half",
        )
        await running.stub.EndTransaction(end(original.commit_log_offset))
        await running.stub.EndTransaction(end(original.commit_log_offset))
        assert await stored(running) == [b"asked about"]
    finally:
        await stop_broker(running)
