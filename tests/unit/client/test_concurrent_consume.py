"""The concurrent consume service on its own (a real, unstarted PushConsumer; no broker): a
quick listener's pull is one request, and a listener that turns slow in the middle of one is
spread over the workers within the share budget instead of running the rest one by one."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

from orbitmq.client.consume import SHARE_BUDGET_S, ConcurrentConsumer
from orbitmq.client.consumer import PushConsumer
from orbitmq.client.consumer_types import ConsumerSettings, ConsumeStatus, MessageModel
from orbitmq.client.process_queue import ProcessQueue
from orbitmq.client.queue import MessageQueue
from orbitmq.store.record import StoredMessage

MQ = MessageQueue("T", "broker-a", 0)
SLOW_S = 0.02


def _message(offset: int) -> StoredMessage:
    return StoredMessage(
        "T", 0, offset, offset * 100, b"x", {}, 0, 0, 0, "127.0.0.1:1", 0, "127.0.0.1:2", 0, 0, 0, 100
    )


async def test_a_listener_that_turns_slow_mid_pull_is_spread_over_the_workers() -> None:
    running = 0
    most = 0
    lock = threading.Lock()

    def listener(messages: list[StoredMessage]) -> None:
        nonlocal running, most
        if messages[0].queue_offset < 500:
            return
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(SLOW_S)
        with lock:
            running -= 1

    consumer = PushConsumer(
        "G", "127.0.0.1:1", listener=listener, settings=ConsumerSettings(consume_threads=8)
    )
    service = ConcurrentConsumer(consumer, listener, consumer._pool)
    pq: ProcessQueue[StoredMessage] = ProcessQueue()
    try:
        quick = [_message(i) for i in range(500)]
        pq.put(quick)
        service.dispatch(MQ, pq, quick)  # the first calls are spread: their pace is unknown
        await asyncio.wait_for(service._requests.join(), 10)
        assert pq.committable_offset == 500
        slow = [_message(i) for i in range(500, 600)]
        pq.put(slow)
        service.dispatch(MQ, pq, slow)  # quick so far: the whole pull is one request
        assert service._requests.qsize() == 1
        started = time.perf_counter()
        await asyncio.wait_for(service._requests.join(), 10)
        took = time.perf_counter() - started
    finally:
        await service.wait_idle(1)
        consumer._pool.shutdown()
    assert pq.committable_offset == 600 and pq.count == 0
    # One by one the slow calls would take 100 x 20 ms; spread over 8 workers about a quarter
    # second after the first share's budget.
    assert most >= 4, f"at most {most} slow calls ran at once"
    assert took < 100 * SLOW_S / 2, f"{took:.2f} s for 100 calls of {SLOW_S} s (budget {SHARE_BUDGET_S} s)"


async def test_results_are_counted_per_message_and_calls_observed_one_by_one(tmp_path: Path) -> None:
    """A share mixing successes and failures counts each message under its own result and
    observes every listener call (broadcasting: a failure is dropped, so no broker is needed)."""

    def listener(messages: list[StoredMessage]) -> ConsumeStatus | None:
        return ConsumeStatus.RECONSUME_LATER if messages[0].queue_offset % 3 == 0 else None

    consumer = PushConsumer(
        "G", "127.0.0.1:1", listener=listener, message_model=MessageModel.BROADCASTING, offsets_dir=tmp_path
    )
    service = ConcurrentConsumer(consumer, listener, consumer._pool)
    pq: ProcessQueue[StoredMessage] = ProcessQueue()
    try:
        for start in (0, 300):  # the first pull spread, the second (quick by then) one request
            pull = [_message(i) for i in range(start, start + 300)]
            pq.put(pull)
            service.dispatch(MQ, pq, pull)
            await asyncio.wait_for(service._requests.join(), 10)
    finally:
        await service.wait_idle(1)
        consumer._pool.shutdown()
    assert pq.committable_offset == 600
    registry = consumer.metrics.registry

    def results(status: str) -> float | None:
        return registry.get_sample_value(
            "orbitmq_consume_results_total", {"group": "G", "topic": "T", "status": status}
        )

    assert results("CONSUME_SUCCESS") == 400
    assert results("RECONSUME_LATER") == 200
    assert registry.get_sample_value("orbitmq_consume_latency_seconds_count", {"group": "G"}) == 600
