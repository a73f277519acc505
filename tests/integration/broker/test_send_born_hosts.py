"""A send whose messages were born at different hosts (the RocketMQ 5 proxy coalescing sends of
several clients) names each message's born host in the message: the broker stores each one,
and the request's (or else the connection's) for a message that names none, on the C path's
broker (which leaves such a send to the Python path) as on the Python path alone."""

from __future__ import annotations

import grpc
import pytest
from brokerkit import RunningBroker

from nativekit import use_path
from orbitmq import native
from orbitmq.common.rpc import failure_of
from orbitmq.store.record import decode
from orbitmq.v1 import broker_pb2, common_pb2
from orbitmq.v1.broker_pb2 import ErrorReason, SendStatus

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(autouse=True, params=["c", "python"])
def send_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    use_path(request.param, monkeypatch, native)
    return request.param


def mixed_send(topic: str, *born: tuple[bytes, str], request_host: str = "") -> broker_pb2.SendMessageRequest:
    """A send of (body, born host) pairs to queue 0 ("" born host: the message names none)."""
    return broker_pb2.SendMessageRequest(
        producer_group="PG",
        topic=topic,
        queue_id=0,
        born_host=request_host,
        messages=[
            common_pb2.Message(topic=topic, body=body, born_host=host, properties={"TAGS": "T"})
            for body, host in born
        ],
    )


async def test_each_message_is_stored_with_its_own_born_host(broker: RunningBroker) -> None:
    servicer = broker.broker.servicer
    python_path_before = servicer.python_path_sends
    first = await broker.stub.SendMessage(
        mixed_send(
            "Born",
            (b"a", "10.0.0.1:1001"),
            (b"b", "10.0.0.2:2002"),
            (b"c", ""),
            (b"d", "[2001:db8::7]:99"),
            request_host="10.9.9.9:9999",
        )
    )
    assert first.status == SendStatus.SEND_OK and first.queue_offset == 0 and len(first.msg_ids) == 4
    # No request born host: a message naming none was born at the connection's end.
    second = await broker.stub.SendMessage(mixed_send("Born", (b"e", ""), (b"f", "10.0.0.1:1001")))
    assert second.queue_offset == 4
    # Both sends went by the Python path, which stores a born host per message.
    assert servicer.python_path_sends - python_path_before == 2

    reply = await broker.stub.PullMessage(
        broker_pb2.PullMessageRequest(
            consumer_group="CG", topic="Born", queue_id=0, queue_offset=0, max_msg_nums=32, commit_offset=-1
        )
    )
    stored = [decode(r) for r in reply.records]
    assert [m.body for m in stored] == [b"a", b"b", b"c", b"d", b"e", b"f"]
    assert [m.born_host for m in stored[:4]] == [
        "10.0.0.1:1001",
        "10.0.0.2:2002",
        "10.9.9.9:9999",
        "[2001:db8::7]:99",
    ]
    own = stored[4].born_host
    assert own.startswith("127.0.0.1:") and own != "127.0.0.1:0"
    assert stored[5].born_host == "10.0.0.1:1001"
    assert all(m.tags == "T" for m in stored)
    assert [m.msg_id for m in stored] == [*first.msg_ids, *second.msg_ids]


async def test_a_message_born_at_a_host_name_is_refused_and_nothing_of_its_send_stored(
    broker: RunningBroker,
) -> None:
    bad = mixed_send("BornBad", (b"ok", "10.0.0.1:1001"), (b"named", "app-host-1:4567"))
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await broker.stub.SendMessage(bad)
    failure = failure_of(caught.value)
    assert failure is not None and failure.reason == ErrorReason.MESSAGE_ILLEGAL, caught.value.details()
    assert "app-host-1:4567" in failure.message
    ok = await broker.stub.SendMessage(mixed_send("BornBad", (b"ok", "10.0.0.1:1001")))
    assert ok.queue_offset == 0
