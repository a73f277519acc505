"""POP state through commit-log retention and a SIGKILL, on a real ``orbitmq broker`` process with
tiny segments and a 4 s retention: the records that built a group's place are deleted by
retention, yet after the kill the group's consumer offset, its acked and its in-flight messages
are what they were (the snapshot written every ``pop_snapshot_interval_ms`` outlived them), the
in-flight ones come back with their attempt counted, and the in-flight gauge reads 0 rather
than vanishing once nothing is in flight."""

from __future__ import annotations

import asyncio
import os
import signal
import time
import urllib.request
from pathlib import Path

import pytest
from brokerkit import broker_process
from prometheus_client.parser import text_string_to_metric_families

from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2

pytestmark = pytest.mark.timeout(120)

TOPIC = "PopRetention"
FILLER = "PopRetentionFiller"
GROUP = "pop-retention"
BROKER = "pop-retention-broker"
HOUR_MS = 3_600_000
RETENTION_MS = 4_000
FIRST_SEGMENT = "0" * 20
SETTINGS = {"file_reserved_time_ms": RETENTION_MS, "clean_interval_ms": 500, "max_message_bytes": 32 * 1024}
"""64 KiB segments (below) and a 4 s retention."""


async def send(stub: broker_pb2_grpc.BrokerStub, topic: str, body: bytes) -> None:
    reply = await stub.SendMessage(
        broker_pb2.SendMessageRequest(
            producer_group="pop-retention-producer",
            topic=topic,
            queue_id=0,
            messages=[common_pb2.Message(topic=topic, body=body)],
        )
    )
    assert reply.status == broker_pb2.SEND_OK


async def pop(
    stub: broker_pb2_grpc.BrokerStub, invisible_ms: int, poll_ms: int = 0
) -> list[tuple[bytes, int, str]]:
    reply = await stub.PopMessage(
        broker_pb2.PopMessageRequest(
            consumer_group=GROUP,
            topic=TOPIC,
            queue_id=-1,
            max_msg_nums=32,
            invisible_time_ms=invisible_ms,
            poll_time_ms=poll_ms,
        )
    )
    return [(decode(m.record).body, m.delivery_attempt, m.receipt_handle) for m in reply.messages]


async def ack(stub: broker_pb2_grpc.BrokerStub, handle: str) -> None:
    reply = await stub.AckMessage(
        broker_pb2.AckMessageRequest(consumer_group=GROUP, topic=TOPIC, receipt_handle=handle)
    )
    assert reply.result == broker_pb2.ACK_OK


async def progress(stub: broker_pb2_grpc.BrokerStub) -> tuple[int, int, int]:
    """(consumer offset, in flight, done above the offset) of the group's one queue."""
    stats = await stub.GetConsumeStats(broker_pb2.GetConsumeStatsRequest(consumer_group=GROUP, topic=TOPIC))
    (queue,) = stats.queues
    return queue.consumer_offset, queue.pop_in_flight, queue.pop_done_above


def in_flight_gauge(url: str) -> float | None:
    """The group's ``orbitmq_pop_in_flight`` sample; None when the series is absent."""
    with urllib.request.urlopen(url, timeout=5) as reply:
        text = reply.read().decode()
    wanted = {"group": GROUP, "topic": TOPIC, "broker": BROKER}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "orbitmq_pop_in_flight" and sample.labels == wanted:
                return sample.value
    return None


async def test_pop_state_survives_retention_of_its_records_and_a_kill(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with broker_process(data, BROKER, segment_bytes=64 * 1024, settings=SETTINGS) as (stub, _, process):
        for topic in (TOPIC, FILLER):
            await stub.CreateTopic(
                broker_pb2.CreateTopicRequest(
                    topic=common_pb2.TopicConfig(
                        topic_name=topic, read_queue_nums=1, write_queue_nums=1, perm=6
                    )
                )
            )
        for i in range(10):
            await send(stub, TOPIC, f"m{i}".encode())
        first = await pop(stub, HOUR_MS)
        assert [b for b, _, _ in first] == [f"m{i}".encode() for i in range(10)]
        for _, _, handle in first:
            await ack(stub, handle)
        # Other traffic until retention deleted the first segment: m0..m9 and the POP records
        # of their delivery and acks with it (retention looks every 10 s).
        deadline = time.monotonic() + 60
        while (data / "commitlog" / FIRST_SEGMENT).exists():
            assert time.monotonic() < deadline, "retention never deleted the first segment"
            await send(stub, FILLER, bytes(16 * 1024))
            await asyncio.sleep(0.2)

        for i in range(10, 20):
            await send(stub, TOPIC, f"m{i}".encode())
        second = await pop(stub, 6_000)
        assert [b for b, _, _ in second] == [f"m{i}".encode() for i in range(10, 20)]
        for _, _, handle in second[:5]:
            await ack(stub, handle)
        assert await progress(stub) == (15, 5, 0)
        os.kill(process.pid, signal.SIGKILL)

    async with broker_process(data, BROKER, segment_bytes=64 * 1024, settings=SETTINGS) as (
        stub,
        metrics_url,
        _,
    ):
        assert await progress(stub) == (15, 5, 0)  # m0..m14 done, m15..m19 in flight
        assert await pop(stub, HOUR_MS) == []  # still invisible: nothing from the beginning
        back = await pop(stub, HOUR_MS, poll_ms=15_000)
        assert [(b, a) for b, a, _ in back] == [(f"m{i}".encode(), 2) for i in range(15, 20)]
        assert await asyncio.to_thread(in_flight_gauge, metrics_url) == 5
        for _, _, handle in back:
            await ack(stub, handle)
        assert await progress(stub) == (20, 0, 0)
        assert await asyncio.to_thread(in_flight_gauge, metrics_url) == 0  # present, at 0
