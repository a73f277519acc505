"""The delivery hub's hand-over rules and the sidecar's settings validation."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

import pytest
from pydantic import ValidationError

from orbitmq.sidecar.hub import AppStream, DeliveryHub, StreamDetached, to_records
from orbitmq.sidecar.settings import SidecarSettings, SubscriptionSpec
from orbitmq.store.record import InboundMessage, StoredMessage, decode_all, encode, encode_host
from orbitmq.v1.sidecar_pb2 import AckStatus


@dataclass
class FakeMessage:
    body: int


async def test_a_detached_streams_deliveries_go_to_the_next_stream_in_order() -> None:
    hub = DeliveryHub()
    verdicts = [asyncio.create_task(hub.deliver([FakeMessage(i)])) for i in range(8)]  # type: ignore[list-item]
    await asyncio.sleep(0)
    silent = AppStream("silent", 5)
    await hub.attach(silent)
    held = [(await hub.next_for(silent))[0].message.body for _ in range(5)]
    assert held == [0, 1, 2, 3, 4] and hub.in_flight == 5
    waiting = asyncio.create_task(hub.next_for(silent))  # a take still waiting when the stream goes
    await asyncio.sleep(0)
    await hub.detach(silent)
    with pytest.raises(StreamDetached):
        await waiting
    helper = AppStream("helper", 32)
    await hub.attach(helper)
    order = []
    for _ in range(8):
        (pending,) = await asyncio.wait_for(hub.next_for(helper), 1)
        order.append(pending.message.body)
        await hub.ack(helper, pending.delivery_id, AckStatus.SUCCESS)
    assert order == list(range(8))
    assert await asyncio.gather(*verdicts) == [[AckStatus.SUCCESS]] * 8
    assert hub.redelivered == 5 and hub.acks == {"SUCCESS": 8}


async def test_pause_holds_deliveries_and_a_stream_never_exceeds_its_limit() -> None:
    hub = DeliveryHub()
    for i in range(3):
        asyncio.create_task(hub.deliver([FakeMessage(i)]))  # type: ignore[list-item]  # noqa: RUF006
    await asyncio.sleep(0)
    stream = AppStream("app", 1)
    await hub.attach(stream)
    await hub.set_paused(True)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(hub.next_for(stream), 0.1)
    await hub.set_paused(False)
    (first,) = await hub.next_for(stream)
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(hub.next_for(stream), 0.1)  # its one slot is taken
    await hub.ack(stream, first.delivery_id, AckStatus.LATER)
    await hub.ack(stream, first.delivery_id, AckStatus.SUCCESS)  # a second answer is ignored
    assert hub.acks == {"LATER": 1}
    assert hub.cancel_all() == 2


def test_settings_are_validated_with_reasons() -> None:
    ok = SidecarSettings(group="G", subscriptions='["A", "B:TagA || TagB", "C:sql:a > 5"]')
    assert [(s.topic, s.expression, s.sql) for s in ok.specs] == [
        ("A", "*", False),
        ("B", "TagA || TagB", False),
        ("C", "a > 5", True),
    ]
    assert SubscriptionSpec.parse("T") == SubscriptionSpec("T")
    for bad, reason in (
        ({"group": "G", "subscriptions": ["A", "A:x"]}, "subscribed more than once"),
        ({"group": "G", "subscriptions": ["bad topic"]}, "invalid topic name"),
        ({"group": "G", "subscriptions": ["T:sql:a >"]}, "invalid SQL92 expression"),
        ({"group": "G", "subscriptions": ["T"], "max_in_flight": 0}, "greater than or equal to 1"),
        ({"group": "G", "subscriptions": ["T"], "listen": "nowhere"}, "nowhere"),
        ({"group": "G", "subscriptions": []}, "at least 1 item"),
    ):
        with pytest.raises(ValidationError, match=reason):
            SidecarSettings(**bad)


async def test_a_batch_gets_each_messages_own_verdict_and_none_when_withdrawn() -> None:
    hub = DeliveryHub(max_in_flight=2)
    batch = asyncio.create_task(hub.deliver([FakeMessage(i) for i in range(4)]))  # type: ignore[misc]
    await asyncio.sleep(0)
    stream = AppStream("app", 10)
    await hub.attach(stream)
    first = await hub.next_for(stream, most=10)
    assert [p.message.body for p in first] == [0, 1], "the hub's own limit applies over all streams"
    await hub.ack_many(stream, [(first[0].delivery_id, AckStatus.SUCCESS), (first[1].delivery_id, 99)])
    (third,) = await hub.next_for(stream)
    await hub.ack(stream, third.delivery_id, AckStatus.SUCCESS)
    assert hub.waiting == 1 and not batch.done()
    assert hub.cancel_all() == 1  # the drain withdraws the fourth, never handed out
    assert await batch == [AckStatus.SUCCESS, AckStatus.LATER, AckStatus.SUCCESS, None]
    assert hub.acks == {"SUCCESS": 2, "LATER": 1} and hub.in_flight == 0


def _stored(i: int, properties: bytes, born: str, topic: str = "Orders") -> StoredMessage:
    message = InboundMessage(topic, b"body %d" % i, i % 4, flag=i, born_timestamp_ms=1_700_000_000_000 + i)
    message.born_host = born
    message.reconsume_times = i
    return decode_all(
        [
            encode(
                message,
                properties_raw=properties,
                topic_raw=topic.encode(),
                queue_offset=100 + i,
                physical_offset=4096 * i,
                store_timestamp_ms=1_700_000_000_500 + i,
                store_host=encode_host("10.0.0.7:10911"),
            )
        ]
    )[0]


async def test_records_decode_to_the_messages_the_consumer_handed_over() -> None:
    messages = [
        _stored(0, b"UNIQ_KEY\x01AC1\x02TAGS\x01TagA\x02", "127.0.0.1:5001"),
        _stored(1, b"", "[2001:db8::1]:6000"),
        # a retried message: shown under its original topic, properties as a plain dict
        replace(
            _stored(2, b"RETRY_TOPIC\x01Orders\x02", "127.0.0.1:5001", "%RETRY%G"),
            topic="Orders",
            properties={"a": "b"},
        ),
    ]
    hub = DeliveryHub()
    verdicts = asyncio.create_task(hub.deliver(messages))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    stream = AppStream("app", 10, records=True)
    await hub.attach(stream)
    taken = await hub.next_for(stream, most=10)
    wire = to_records(taken)
    unsized = [replace(m, size=0) for m in decode_all(list(wire.records))]  # a record's own size
    assert unsized == [replace(m, size=0) for m in messages]
    assert dict(unsized[2].properties) == {"a": "b"} and unsized[2].topic == "Orders"
    assert [wire.first_delivery_id + i for i in range(3)] == [p.delivery_id for p in taken]
    await hub.ack_succeeded(stream, [p.delivery_id for p in taken] + [999])  # an unknown id is ignored
    assert await verdicts == [AckStatus.SUCCESS] * 3 and hub.in_flight == 0 and hub.acks == {"SUCCESS": 3}
