"""Timers across a SIGKILL of a real ``orbitmq broker`` process: killed while delivering (some
timers delivered, some due, some still ahead), restarted on the same data, every timer reaches
its topic exactly once (the timer log names what was delivered), and the metrics say so."""

from __future__ import annotations

import asyncio
import signal
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
from brokerkit import broker_process
from prometheus_client.parser import text_string_to_metric_families

from orbitmq.store.record import StoredMessage, decode
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2

pytestmark = pytest.mark.timeout(90)

TOPIC = "TimedRestart"
NAME = "timer-broker"
SETTINGS = {
    "timer_precision_ms": 50,
    # the topic's config is written every interval: a new topic must be on disk before the kill
    "config_persist_interval_ms": 100,
}
COUNT = 1_200
SPREAD_MS = 3_000


async def read_all(stub: broker_pb2_grpc.BrokerStub) -> list[StoredMessage]:
    messages: list[StoredMessage] = []
    while True:
        reply = await stub.PullMessage(
            broker_pb2.PullMessageRequest(
                consumer_group="reader",
                topic=TOPIC,
                queue_id=0,
                queue_offset=len(messages),
                max_msg_nums=512,
                commit_offset=-1,
            )
        )
        if reply.status != broker_pb2.FOUND:
            return messages
        messages += [decode(record) for record in reply.records]


def timer_samples(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=5) as reply:
        text = reply.read().decode()
    return {
        s.name + ("" if "topic" not in s.labels else f"[{s.labels['topic']}]"): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("orbitmq_timer_")
    }


async def test_sigkill_while_delivering_loses_no_timer_and_delivers_none_twice(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with broker_process(data, NAME, settings=SETTINGS) as (stub, _, process):
        await stub.CreateTopic(
            broker_pb2.CreateTopicRequest(
                topic=common_pb2.TopicConfig(topic_name=TOPIC, read_queue_nums=1, write_queue_nums=1, perm=6)
            )
        )
        start = int(time.time() * 1000) + 1_000
        due = {f"t{i}".encode(): start + i * SPREAD_MS // COUNT for i in range(COUNT)}
        # Sent out of due order (batch k holds every 12th timer from k), so deliveries leave
        # gaps in the timer queue: what was delivered is a set, not a prefix.
        bodies = sorted(due, key=lambda b: (int(b[1:]) % 12, int(b[1:])))
        for first in range(0, COUNT, 100):
            chunk = bodies[first : first + 100]
            reply = await stub.SendMessage(
                broker_pb2.SendMessageRequest(
                    producer_group="PG",
                    topic=TOPIC,
                    queue_id=0,
                    messages=[
                        common_pb2.Message(topic=TOPIC, body=b, properties={"TIMER_DELIVER_MS": str(due[b])})
                        for b in chunk
                    ],
                )
            )
            assert reply.status == broker_pb2.SEND_OK
        await asyncio.sleep((start + SPREAD_MS // 2) / 1000 - time.time())  # mid-way through
        before = await read_all(stub)
        process.send_signal(signal.SIGKILL)
        await process.wait()
    assert 0 < len(before) < COUNT, len(before)
    assert len(set(m.body for m in before)) == len(before)

    restarted_at_ms = int(time.time() * 1000)  # nothing is delivered between the kill and now
    async with broker_process(data, NAME, settings=SETTINGS) as (stub, metrics_url, process):
        deadline = time.monotonic() + 20
        while len({m.body for m in await read_all(stub)}) < COUNT and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.5)  # a duplicate would show up by now
        after = await read_all(stub)
        copies = Counter(m.body for m in after)
        assert sorted(copies) == sorted(due), f"missing {len(set(due) - set(copies))}"
        assert [b for b, n in copies.items() if n > 1] == []
        assert [m.body for m in after[: len(before)]] == [m.body for m in before]  # kept, not rewritten
        for message in after:
            assert message.store_timestamp_ms >= due[message.body], message.body  # never early
        # Delivered before the kill: what was read then, and what came between that read and the kill.
        killed_with = sum(1 for m in after if m.store_timestamp_ms < restarted_at_ms)
        assert killed_with >= len(before)
        samples = await asyncio.to_thread(timer_samples, metrics_url)
        assert samples["orbitmq_timer_pending"] == 0
        assert samples[f"orbitmq_timer_delivered_total[{TOPIC}]"] == COUNT - killed_with
        assert samples["orbitmq_timer_lateness_seconds_count"] == COUNT - killed_with
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) == 0
