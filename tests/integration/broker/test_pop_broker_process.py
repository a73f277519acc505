"""POP consumption over gRPC against a real ``orbitmq broker`` process: pop → invisible → ack,
expiry → delivered again with its attempt counted, long polling, /metrics, and a restart of
the process (acked messages stay acked, in-flight ones are neither lost nor duplicated)."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from brokerkit import broker_process
from prometheus_client.parser import text_string_to_metric_families

from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2, broker_pb2_grpc, common_pb2

pytestmark = pytest.mark.timeout(90)

TOPIC = "PopTopic"
GROUP = "pop-group"
HOUR_MS = 3_600_000


async def send(stub: broker_pb2_grpc.BrokerStub, body: bytes) -> None:
    reply = await stub.SendMessage(
        broker_pb2.SendMessageRequest(
            producer_group="pop-producer",
            topic=TOPIC,
            queue_id=-1,
            messages=[common_pb2.Message(topic=TOPIC, body=body)],
        )
    )
    assert reply.status == broker_pb2.SEND_OK


async def pop(
    stub: broker_pb2_grpc.BrokerStub, max_nums: int = 16, invisible_ms: int = HOUR_MS, poll_ms: int = 0
) -> list[tuple[bytes, int, str]]:
    """(body, delivery attempt, receipt handle) of what a pop hands out."""
    reply = await stub.PopMessage(
        broker_pb2.PopMessageRequest(
            consumer_group=GROUP,
            topic=TOPIC,
            queue_id=-1,
            max_msg_nums=max_nums,
            invisible_time_ms=invisible_ms,
            poll_time_ms=poll_ms,
        )
    )
    return [(decode(m.record).body, m.delivery_attempt, m.receipt_handle) for m in reply.messages]


async def ack(stub: broker_pb2_grpc.BrokerStub, handle: str) -> int:
    reply = await stub.AckMessage(
        broker_pb2.AckMessageRequest(consumer_group=GROUP, topic=TOPIC, receipt_handle=handle)
    )
    return reply.result


async def hide(
    stub: broker_pb2_grpc.BrokerStub, handle: str, ms: int
) -> broker_pb2.ChangeInvisibleTimeResponse:
    return await stub.ChangeInvisibleTime(
        broker_pb2.ChangeInvisibleTimeRequest(
            consumer_group=GROUP, topic=TOPIC, receipt_handle=handle, invisible_time_ms=ms
        )
    )


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=5) as reply:
        text = reply.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("orbitmq_pop_")
    }


def pop_metric(samples: dict, name: str) -> float:
    labels = (("broker", "pop-broker"), ("group", GROUP), ("topic", TOPIC))
    return samples.get((name, labels), 0.0)


async def test_pop_ack_expiry_long_poll_metrics_and_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with broker_process(data, "pop-broker", graceful_stop=True) as (stub, metrics_url, _):
        await stub.CreateTopic(
            broker_pb2.CreateTopicRequest(
                topic=common_pb2.TopicConfig(topic_name=TOPIC, read_queue_nums=2, write_queue_nums=2, perm=6)
            )
        )
        for body in (b"m1", b"m2", b"m3"):
            await send(stub, body)

        first = await pop(stub, max_nums=2)
        rest = await pop(stub)
        handed = first + rest
        assert sorted(b for b, _, _ in handed) == [b"m1", b"m2", b"m3"] and len(first) == 2
        assert {a for _, a, _ in handed} == {1}
        assert await pop(stub) == []  # all invisible
        handles = {b: h for b, _, h in handed}

        assert await ack(stub, handles[b"m1"]) == broker_pb2.ACK_OK
        assert await ack(stub, handles[b"m1"]) == broker_pb2.ACK_ALREADY_DONE

        # m2 becomes visible again soon: delivered a second time, with a new handle.
        changed = await hide(stub, handles[b"m2"], 300)
        assert changed.result == broker_pb2.ACK_OK and changed.receipt_handle != handles[b"m2"]
        again = await pop(stub, poll_ms=5000)
        assert [(b, a) for b, a, _ in again] == [(b"m2", 2)]
        assert await ack(stub, changed.receipt_handle) == broker_pb2.ACK_STALE_HANDLE
        assert await ack(stub, again[0][2]) == broker_pb2.ACK_OK

        # A held pop answers as soon as a message arrives.
        started = time.monotonic()
        held = asyncio.ensure_future(pop(stub, poll_ms=10_000))
        await asyncio.sleep(0.3)
        assert not held.done()
        await send(stub, b"m4")
        m4 = await asyncio.wait_for(held, 5)
        assert [(b, a) for b, a, _ in m4] == [(b"m4", 1)] and time.monotonic() - started < 5
        assert await ack(stub, m4[0][2]) == broker_pb2.ACK_OK

        samples = await asyncio.to_thread(scrape, metrics_url)
        assert pop_metric(samples, "orbitmq_pop_in_flight") == 1  # m3
        assert pop_metric(samples, "orbitmq_pop_acks_total") == 3
        assert pop_metric(samples, "orbitmq_pop_revives_total") == 1

        # Bad input: a clear error naming the value.
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await ack(stub, "not-a-handle")
        assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "not-a-handle" in (bad.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as bad:
            await pop(stub, invisible_ms=0)
        assert "invisible_time_ms 0" in (bad.value.details() or "")

    async with broker_process(data, "pop-broker", graceful_stop=True) as (stub, metrics_url, _):
        assert await pop(stub) == []  # m1, m2, m4 acked; m3 still invisible for an hour
        # m3's handle from before the restart is still valid: make it visible at once.
        changed = await hide(stub, handles[b"m3"], 50)
        assert changed.result == broker_pb2.ACK_OK
        back = await pop(stub, poll_ms=5000)
        assert [(b, a) for b, a, _ in back] == [(b"m3", 2)]
        assert await ack(stub, back[0][2]) == broker_pb2.ACK_OK
        assert await pop(stub, poll_ms=500) == []

        # A consumer gives up on m5: it goes to the group's dead letters now.
        await send(stub, b"m5")
        ((_, _, m5),) = await pop(stub, poll_ms=5000)
        forward = broker_pb2.ForwardToDeadLetterRequest(consumer_group=GROUP, topic=TOPIC, receipt_handle=m5)
        assert (await stub.ForwardToDeadLetter(forward)).result == broker_pb2.ACK_OK
        assert (await stub.ForwardToDeadLetter(forward)).result == broker_pb2.ACK_ALREADY_DONE
        dead = await stub.PullMessage(
            broker_pb2.PullMessageRequest(
                consumer_group="dlq-reader", topic=f"%DLQ%{GROUP}", queue_id=0, max_msg_nums=8
            )
        )
        assert [decode(r).body for r in dead.records] == [b"m5"]
        assert await pop(stub) == []
        samples = await asyncio.to_thread(scrape, metrics_url)
        assert pop_metric(samples, "orbitmq_pop_in_flight") == 0
        assert pop_metric(samples, "orbitmq_pop_dead_letters_total") == 1
