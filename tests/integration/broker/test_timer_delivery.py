"""Timed delivery (the broker's timer) over gRPC against a real broker: a message asking for a
time is stored in the timer topic and appears in its real topic and queue at that time, never
before and within the timer's precision after; many timers in due order; a past time now; a
time beyond ``timer_max_delay_ms`` and conflicting timings refused with the rule named."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from brokerkit import RunningBroker, start_broker, stop_broker

from orbitmq.broker.timer.service import CHECKPOINT_EVERY
from orbitmq.common.rpc import failure_of
from orbitmq.common.topics import TIMER_LOG_TOPIC, TIMER_TOPIC
from orbitmq.store.record import StoredMessage
from orbitmq.v1 import broker_pb2, common_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(60)

TOPIC = "Timed"
PRECISION_MS = 100
SLACK_MS = 150
"""Allowance on a shared 2-core machine beyond the precision (a busy loop, a slow put)."""


class LoopStalls:
    """The longest the event loop (the broker's: it runs in the test's process) was late waking
    a 10 ms sleeper meanwhile: on a machine busy with other work a timer cannot be on time while
    its loop is not scheduled, so lateness is judged beyond the stalls measured, not in spite of
    them."""

    def __init__(self) -> None:
        self.longest_ms = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _watch(self) -> None:
        while True:
            started = time.monotonic()
            await asyncio.sleep(0.01)
            self.longest_ms = max(self.longest_ms, (time.monotonic() - started) * 1000 - 10)

    async def __aenter__(self) -> LoopStalls:
        self._task = asyncio.create_task(self._watch())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


@pytest.fixture
async def running(tmp_path: Path) -> AsyncIterator[RunningBroker]:
    running = await start_broker(tmp_path / "b", timer_precision_ms=PRECISION_MS)
    await running.stub.CreateTopic(
        broker_pb2.CreateTopicRequest(
            topic=common_pb2.TopicConfig(topic_name=TOPIC, read_queue_nums=4, write_queue_nums=4, perm=6)
        )
    )
    yield running
    await stop_broker(running)


async def send(
    running: RunningBroker, body: bytes, queue_id: int = 0, **properties: str
) -> broker_pb2.SendMessageReply:
    return await running.stub.SendMessage(
        broker_pb2.SendMessageRequest(
            producer_group="PG",
            topic=TOPIC,
            queue_id=queue_id,
            messages=[common_pb2.Message(topic=TOPIC, body=body, properties=properties)],
        )
    )


def stored(running: RunningBroker, topic: str = TOPIC, queue_id: int = 0) -> list[StoredMessage]:
    """Every message in the queue, in queue order (read from the store: exact store times)."""
    store = running.broker.store
    queue = store.consume_queue(topic, queue_id)
    if queue is None:
        return []
    units = [queue.unit_at(o) for o in range(queue.min_offset, queue.max_offset)]
    return [m for m in (store.message_at(u[0]) for u in units if u) if m is not None]


async def wait_for(
    running: RunningBroker, count: int, within_s: float, queue_id: int = 0
) -> list[StoredMessage]:
    deadline = time.monotonic() + within_s
    while True:
        messages = stored(running, queue_id=queue_id)
        if len(messages) >= count or time.monotonic() > deadline:
            return messages
        await asyncio.sleep(0.01)


def late_ms(message: StoredMessage) -> int:
    """How long after its requested time the message reached its real topic (store clock)."""
    return message.store_timestamp_ms - int(message.properties["TIMER_DELIVER_MS"])


async def test_timed_messages_arrive_at_their_time_in_their_queue_with_their_properties(
    running: RunningBroker,
) -> None:
    now = int(time.time() * 1000)
    await send(
        running, b"at-3.7s", queue_id=2, TIMER_DELIVER_MS=str(now + 3_700), TAGS="t", KEYS="k1", color="red"
    )
    await send(running, b"after-1.5s", queue_id=2, TIMER_DELAY_MS="1500")
    await send(running, b"after-1s", queue_id=2, TIMER_DELAY_SEC="1")
    assert stored(running, queue_id=2) == []  # waiting in the timer topic, not the real one
    assert len(stored(running, TIMER_TOPIC)) == 3

    async with LoopStalls() as stalls:
        arrived = await wait_for(running, 3, 8, queue_id=2)
    assert [m.body for m in arrived] == [b"after-1s", b"after-1.5s", b"at-3.7s"]
    for message in arrived:
        bound = PRECISION_MS + SLACK_MS + stalls.longest_ms
        assert 0 <= late_ms(message) <= bound, (message.body, late_ms(message), stalls.longest_ms)
    first, second, last = arrived
    assert first.store_timestamp_ms - now >= 1_000 and second.store_timestamp_ms - now >= 1_500
    assert int(last.properties["TIMER_DELIVER_MS"]) == now + 3_700 and last.store_timestamp_ms >= now + 3_700
    assert (last.topic, last.queue_id, last.properties["TAGS"], last.properties["KEYS"]) == (
        TOPIC,
        2,
        "t",
        "k1",
    )
    assert last.properties["color"] == "red"
    assert "REAL_TOPIC" not in last.properties and "REAL_QID" not in last.properties
    assert running.broker.timer.pending == 0
    assert running.broker.timer.delivered == {TOPIC: 3}


async def test_many_timers_come_out_in_due_order_each_once(running: RunningBroker) -> None:
    rng = random.Random(17)
    now = int(time.time() * 1000) + 500
    due = {f"m{i}".encode(): now + rng.randrange(0, 2_000) for i in range(400)}
    items = list(due.items())
    rng.shuffle(items)
    for first in range(0, len(items), 50):  # sends of 50, out of due order
        reply = await running.stub.SendMessage(
            broker_pb2.SendMessageRequest(
                producer_group="PG",
                topic=TOPIC,
                queue_id=0,
                messages=[
                    common_pb2.Message(topic=TOPIC, body=body, properties={"TIMER_DELIVER_MS": str(at)})
                    for body, at in items[first : first + 50]
                ],
            )
        )
        assert reply.status == broker_pb2.SEND_OK
    assert int(time.time() * 1000) < now, "sent after the first due time: the machine is too slow"
    async with LoopStalls() as stalls:
        arrived = await wait_for(running, len(due), 10)
    assert sorted(m.body for m in arrived) == sorted(due)  # each once
    times = [int(m.properties["TIMER_DELIVER_MS"]) for m in arrived]
    assert times == sorted(times)  # in due order
    lateness = sorted(late_ms(m) for m in arrived)
    assert lateness[0] >= 0, "delivered before its time"
    p99 = lateness[int(len(lateness) * 0.99) - 1]
    assert p99 <= PRECISION_MS + SLACK_MS + stalls.longest_ms, (lateness[-20:], stalls.longest_ms)


async def test_a_time_already_past_is_delivered_now(running: RunningBroker) -> None:
    past = int(time.time() * 1000) - 60_000
    reply = await send(running, b"late", TIMER_DELIVER_MS=str(past))
    assert reply.status == broker_pb2.SEND_OK
    [message] = stored(running)
    assert message.body == b"late" and message.properties["TIMER_DELIVER_MS"] == str(past)
    assert stored(running, TIMER_TOPIC) == []
    zero = await send(running, b"zero", TIMER_DELAY_MS="0")
    assert zero.status == broker_pb2.SEND_OK and len(stored(running)) == 2


async def refused(running: RunningBroker, **properties: str) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await send(running, b"x", **properties)
    failure = failure_of(caught.value)
    assert failure is not None and failure.reason == ErrorReason.MESSAGE_ILLEGAL, caught.value.details()
    return failure.message


async def test_times_beyond_the_maximum_and_conflicting_timings_are_refused(running: RunningBroker) -> None:
    now = int(time.time() * 1000)
    three_days = 3 * 86_400_000
    beyond = await refused(running, TIMER_DELIVER_MS=str(now + three_days + 60_000))
    assert "TIMER_DELIVER_MS" in beyond and "at most 259200000 ms (72 h) ahead (timer_max_delay_ms" in beyond
    assert "timer_max_delay_ms" in await refused(running, TIMER_DELAY_SEC=str(4 * 86_400))
    info = await running.stub.GetRuntimeInfo(broker_pb2.GetRuntimeInfoRequest())
    assert info.delayed_messages_waiting == 0
    both = await refused(running, TIMER_DELAY_MS="10", DELAY="2")
    assert "one of" in both and "DELAY" in both and "TIMER_DELAY_MS" in both
    assert "non-negative whole number" in await refused(running, TIMER_DELAY_MS="-5")
    assert "'soon'" in await refused(running, TIMER_DELIVER_MS="soon")
    near = await send(running, b"near-max", TIMER_DELAY_MS=str(three_days - 60_000))
    assert near.status == broker_pb2.SEND_OK and running.broker.timer.pending == 1
    assert stored(running) == []
    info = await running.stub.GetRuntimeInfo(broker_pb2.GetRuntimeInfoRequest())
    assert info.delayed_messages_waiting == 1  # a drain waits for timers as for delay levels


async def test_a_broker_with_a_shorter_maximum_or_retention_names_its_own(tmp_path: Path) -> None:
    running = await start_broker(tmp_path / "short", timer_max_delay_ms=10_000)
    try:
        message = await refused(running, TIMER_DELAY_MS="10001")
        assert "asks for delivery 10001 ms from now" in message and "at most 10000 ms" in message
        assert (await send(running, b"ok", TIMER_DELAY_MS="10000")).status == broker_pb2.SEND_OK
    finally:
        await stop_broker(running)
    running = await start_broker(tmp_path / "kept", file_reserved_time_ms=3_600_000)
    try:  # a timer may not outwait the retention of its own message
        message = await refused(running, TIMER_DELAY_SEC="3601")
        assert "at most 3600000 ms (1 h) ahead" in message and "file_reserved_time_ms" in message
    finally:
        await stop_broker(running)


async def test_a_restart_reads_the_timer_log_back_to_its_last_checkpoint_only(tmp_path: Path) -> None:
    """Delivered one by one, 3 * CHECKPOINT_EVERY timers leave as many log records; a restart
    reads back to the last checkpoint and scans the timer queue from its low-water mark, so
    neither grows with what was delivered before."""
    running = await start_broker(tmp_path / "b", timer_precision_ms=PRECISION_MS)
    count = 3 * CHECKPOINT_EVERY
    now = int(time.time() * 1000) + 300
    try:
        for i in range(count):  # 8 ms apart: one delivery batch each
            await send(running, b"%d" % i, TIMER_DELIVER_MS=str(now + 8 * i))
        await send(running, b"pending", TIMER_DELAY_SEC="3600")
        assert len(await wait_for(running, count, 15)) == count
        assert running.broker.timer.state.low == count  # all below the pending one delivered
        records = running.broker.store.max_offset_in_queue(TIMER_LOG_TOPIC, 0)
        assert records > 2 * CHECKPOINT_EVERY, records  # so a checkpoint is not the whole log
    finally:
        await stop_broker(running)
    running = await start_broker(tmp_path / "b", timer_precision_ms=PRECISION_MS)
    try:
        timer = running.broker.timer
        assert 1 <= timer.records_read <= CHECKPOINT_EVERY, timer.records_read
        assert (timer.pending, timer.state.low) == (1, count)
        await asyncio.sleep(0.3)
        assert len(stored(running)) == count  # nothing delivered again
    finally:
        await stop_broker(running)


async def test_a_burst_of_large_timers_due_together_fits_small_segments(tmp_path: Path) -> None:
    """Forty 15 KB timers due at once on 64 KiB segments: delivered in batches that each fit a
    segment (one batch of all would be refused by the store, and retried for ever)."""
    running = await start_broker(tmp_path / "small", segment_bytes=64 * 1024, max_message_bytes=16 * 1024)
    try:
        at = int(time.time() * 1000) + 300
        for i in range(40):
            await send(running, b"%02d" % i + b"x" * 15_000, TIMER_DELIVER_MS=str(at))
        arrived = await wait_for(running, 40, 10)
        assert [m.body[:2] for m in arrived] == [b"%02d" % i for i in range(40)]
        assert running.broker.timer.pending == 0
    finally:
        await stop_broker(running)
