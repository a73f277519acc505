"""The proxy's answers at the protocol level, sent with the official client's own generated
stubs (``rocketmq.grpc_protocol``): status codes and messages the RocketMQ 5 clients decide by.

Each test names the protocol behaviour it checks. No request may hang: every call has a short
deadline, and an RPC orbitmq does not serve answers ``NOT_IMPLEMENTED`` at once.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from rocketmq.grpc_protocol import definition_pb2 as d
from rocketmq.grpc_protocol import service_pb2 as s
from rocketmq.grpc_protocol import service_pb2_grpc
from v2kit import V2Cluster, v2_cluster

from orbitmq.v1 import broker_pb2

pytestmark = pytest.mark.timeout(60)

CLIENT = (("x-mq-client-id", "test-client@1"),)
FAST_S = 5.0


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[V2Cluster]:
    async with v2_cluster(tmp_path) as running:
        yield running


@pytest.fixture
async def stub(cluster: V2Cluster) -> AsyncIterator[service_pb2_grpc.MessagingServiceStub]:
    async with grpc.aio.insecure_channel(cluster.endpoint) as channel:
        yield service_pb2_grpc.MessagingServiceStub(channel)


def _message(topic: str = "V2Codes", body: bytes = b"x", **system: object) -> d.Message:
    message = d.Message(topic=d.Resource(name=topic), body=body)
    message.system_properties.message_id = "01AB"
    message.system_properties.message_type = system.pop("message_type", d.NORMAL)  # type: ignore[assignment]
    for name, value in system.items():
        setattr(message.system_properties, name, value)
    return message


async def _send(stub: service_pb2_grpc.MessagingServiceStub, message: d.Message) -> s.SendMessageResponse:
    return await stub.SendMessage(s.SendMessageRequest(messages=[message]), metadata=CLIENT, timeout=FAST_S)


async def test_query_route_lists_real_queues_at_the_access_point_the_client_used(
    cluster: V2Cluster, stub: service_pb2_grpc.MessagingServiceStub
) -> None:
    """QueryRoute: the topic's queues with broker name, queue id, READ_WRITE permission, every
    message type accepted, and the access point of the request as endpoints (cluster mode)."""
    await _send(stub, _message("V2Route"))  # creates the topic (4 queues)
    access = d.Endpoints(scheme=d.DOMAIN_NAME, addresses=[d.Address(host="mq.example", port=8081)])
    reply = await stub.QueryRoute(
        s.QueryRouteRequest(topic=d.Resource(name="V2Route"), endpoints=access),
        metadata=CLIENT,
        timeout=FAST_S,
    )
    assert reply.status.code == d.OK
    assert [(q.broker.name, q.id, q.permission) for q in reply.message_queues] == [
        ("broker-a", i, d.READ_WRITE) for i in range(4)
    ]
    assert all(q.broker.endpoints == access and q.broker.id == 0 for q in reply.message_queues)
    assert set(reply.message_queues[0].accept_message_types) == {d.NORMAL, d.FIFO, d.DELAY, d.TRANSACTION}


async def test_query_route_of_a_new_topic_offers_queues_that_the_first_send_creates(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    """QueryRoute of a topic no broker has yet (auto-create on): queues on every master, as
    orbitmq's producer assumes, so a RocketMQ 5 producer can start on a new topic."""
    reply = await stub.QueryRoute(
        s.QueryRouteRequest(topic=d.Resource(name="V2Fresh")), metadata=CLIENT, timeout=FAST_S
    )
    assert reply.status.code == d.OK
    assert {(q.broker.name, q.permission) for q in reply.message_queues} == {("broker-a", d.READ_WRITE)}


async def test_telemetry_answers_settings_and_stays_open(stub: service_pb2_grpc.MessagingServiceStub) -> None:
    """Telemetry: each settings command is answered OK with the server's publishing settings
    (max body size, exponential backoff with 3 attempts), on a stream that stays open."""
    call = stub.Telemetry(metadata=CLIENT)
    settings = d.Settings(client_type=d.PRODUCER, publishing=d.Publishing(topics=[d.Resource(name="V2Tele")]))
    settings.request_timeout.FromSeconds(3)
    for _ in range(2):
        await call.write(s.TelemetryCommand(settings=settings))
        reply = await asyncio.wait_for(call.read(), FAST_S)
        assert reply.status.code == d.OK
        assert reply.settings.publishing.max_body_size == 4 * 1024 * 1024
        assert reply.settings.publishing.validate_message_type
        assert reply.settings.backoff_policy.max_attempts == 3
        assert reply.settings.backoff_policy.WhichOneof("strategy") == "exponential_backoff"
        assert [t.name for t in reply.settings.publishing.topics] == ["V2Tele"]
    read = asyncio.ensure_future(call.read())
    await asyncio.sleep(0.3)
    assert not read.done(), "the stream ended instead of staying open"
    read.cancel()
    call.cancel()


async def test_telemetry_answers_push_consumer_settings_with_a_backoff_policy(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    """Telemetry for a push consumer: its settings come back with a backoff policy (the client
    refuses to start without one)."""
    call = stub.Telemetry(metadata=CLIENT)
    await call.write(s.TelemetryCommand(settings=d.Settings(client_type=d.PUSH_CONSUMER)))
    reply = await asyncio.wait_for(call.read(), FAST_S)
    call.cancel()
    assert reply.status.code == d.OK
    assert reply.settings.backoff_policy.max_attempts > 1
    assert len(reply.settings.backoff_policy.customized_backoff.next) > 0


async def test_telemetry_tells_a_consumer_of_an_orderly_group_to_consume_fifo(
    cluster: V2Cluster, stub: service_pb2_grpc.MessagingServiceStub
) -> None:
    """A group configured consume_message_orderly comes back with subscription.fifo set (the
    push consumer then keeps each message group in order) and a backoff of 1 s between its
    local retries; other groups without it, with the delay levels from 10 s. Both get the
    group's attempts (retry_max_times + 1) and a long polling timeout (without one the Python
    push consumer would ask again at once, forever)."""
    await cluster.broker.stub.CreateSubscriptionGroup(
        broker_pb2.CreateSubscriptionGroupRequest(
            group=broker_pb2.SubscriptionGroupConfig(
                group_name="v2-orderly", consume_enable=True, consume_message_orderly=True, retry_max_times=2
            )
        )
    )
    fifo = {}
    backoff = {}
    for group in ("v2-orderly", "v2-plain"):
        call = stub.Telemetry(metadata=CLIENT)
        settings = d.Settings(
            client_type=d.PUSH_CONSUMER, subscription=d.Subscription(group=d.Resource(name=group))
        )
        await call.write(s.TelemetryCommand(settings=settings))
        reply = await asyncio.wait_for(call.read(), FAST_S)
        call.cancel()
        assert reply.status.code == d.OK
        assert reply.settings.subscription.long_polling_timeout.seconds == 20
        fifo[group] = reply.settings.subscription.fifo
        policy = reply.settings.backoff_policy
        backoff[group] = (policy.max_attempts, policy.customized_backoff.next[0].seconds)
    assert fifo == {"v2-orderly": True, "v2-plain": False}
    assert backoff == {"v2-orderly": (3, 1), "v2-plain": (17, 10)}


async def test_telemetry_without_client_id_is_client_id_required(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    """Telemetry needs the x-mq-client-id header: CLIENT_ID_REQUIRED at once, and the stream
    ends (the answer does not wait for the client's first command, so none is written here: a
    write may race with the end of the call)."""
    call = stub.Telemetry(timeout=FAST_S)
    reply = await call.read()
    assert reply.status.code == d.CLIENT_ID_REQUIRED
    assert "x-mq-client-id" in reply.status.message
    assert await call.read() == grpc.aio.EOF


async def test_unknown_client_type_is_unrecognized(stub: service_pb2_grpc.MessagingServiceStub) -> None:
    """Heartbeat and Telemetry settings of a client type orbitmq does not know:
    UNRECOGNIZED_CLIENT_TYPE (not OK, not a hang)."""
    reply = await stub.Heartbeat(
        s.HeartbeatRequest(client_type=d.LITE_PUSH_CONSUMER), metadata=CLIENT, timeout=FAST_S
    )
    assert reply.status.code == d.UNRECOGNIZED_CLIENT_TYPE
    call = stub.Telemetry(metadata=CLIENT)
    await call.write(s.TelemetryCommand(settings=d.Settings(client_type=d.CLIENT_TYPE_UNSPECIFIED)))
    assert (await asyncio.wait_for(call.read(), FAST_S)).status.code == d.UNRECOGNIZED_CLIENT_TYPE
    call.cancel()
    ok = await stub.Heartbeat(s.HeartbeatRequest(client_type=d.PRODUCER), metadata=CLIENT, timeout=FAST_S)
    assert ok.status.code == d.OK


async def test_rpcs_not_served_answer_not_implemented_at_once(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    """RPCs orbitmq does not serve (recall of a delayed message, lite topics) answer
    NOT_IMPLEMENTED with a readable message naming the RPC, within a second."""
    started = time.monotonic()
    unary = [
        stub.RecallMessage(s.RecallMessageRequest(), metadata=CLIENT, timeout=FAST_S),
        stub.SyncLiteSubscription(s.SyncLiteSubscriptionRequest(), metadata=CLIENT, timeout=FAST_S),
    ]
    replies = await asyncio.gather(*unary)
    assert [r.status.code for r in replies] == [d.NOT_IMPLEMENTED] * len(unary)
    assert "RecallMessage" in replies[0].status.message
    assert time.monotonic() - started < 1.0


async def test_consumer_rpcs_refuse_bad_requests_with_the_protocol_codes(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    """Receive, ack and change of invisibility check what they are given before any broker is
    asked: the code a RocketMQ 5 client decides by, and a message naming the value."""
    group = d.Resource(name="v2-group")
    topic = d.Resource(name="V2Answers")
    queue = d.MessageQueue(topic=topic, id=0, broker=d.Broker(name="broker-a"))

    async def receive(request: s.ReceiveMessageRequest) -> list[s.ReceiveMessageResponse]:
        return [f async for f in stub.ReceiveMessage(request, metadata=CLIENT, timeout=FAST_S)]

    frames = await receive(s.ReceiveMessageRequest())
    assert [f.status.code for f in frames] == [d.ILLEGAL_CONSUMER_GROUP]
    frames = await receive(s.ReceiveMessageRequest(group=group, message_queue=queue, batch_size=33))
    assert frames[0].status.code == d.BAD_REQUEST and "batch_size 33" in frames[0].status.message
    frames = await receive(s.ReceiveMessageRequest(group=group, message_queue=queue, batch_size=1))
    assert frames[0].status.code == d.ILLEGAL_INVISIBLE_TIME
    ack = await stub.AckMessage(
        s.AckMessageRequest(
            group=group, topic=topic, entries=[s.AckMessageEntry(message_id="m", receipt_handle="forged")]
        ),
        metadata=CLIENT,
        timeout=FAST_S,
    )
    assert ack.status.code == d.INVALID_RECEIPT_HANDLE and "'forged'" in ack.status.message
    assert [e.status.code for e in ack.entries] == [d.INVALID_RECEIPT_HANDLE]
    change = await stub.ChangeInvisibleDuration(
        s.ChangeInvisibleDurationRequest(group=group, topic=topic, receipt_handle="broker-a:0:0:1"),
        metadata=CLIENT,
        timeout=FAST_S,
    )
    assert change.status.code == d.ILLEGAL_INVISIBLE_TIME and "0 ms" in change.status.message
    forward = await stub.ForwardMessageToDeadLetterQueue(
        s.ForwardMessageToDeadLetterQueueRequest(group=group, topic=topic, receipt_handle="x:y"),
        metadata=CLIENT,
        timeout=FAST_S,
    )
    assert forward.status.code == d.INVALID_RECEIPT_HANDLE and "'x:y'" in forward.status.message


@pytest.mark.parametrize(
    ("message", "code", "words"),
    [
        (_message(body=b""), d.MESSAGE_BODY_EMPTY, "empty"),
        (_message(topic="bad topic!"), d.ILLEGAL_TOPIC, "bad topic!"),
        (_message(message_type=d.FIFO), d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE, "message group"),
        (
            _message(message_type=d.TRANSACTION, message_group="g"),
            d.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            "TRANSACTION",
        ),
        (_message(tag="a|b"), d.ILLEGAL_MESSAGE_TAG, "'a|b'"),
        (_message(body=b"x" * (4 * 1024 * 1024 + 1)), d.MESSAGE_BODY_TOO_LARGE, "4194304"),
    ],
    ids=[
        "empty-body",
        "bad-topic",
        "fifo-without-group",
        "transaction-with-group",
        "tag-with-bar",
        "too-large",
    ],
)
async def test_send_message_refuses_what_the_protocol_forbids(
    stub: service_pb2_grpc.MessagingServiceStub, message: d.Message, code: int, words: str
) -> None:
    """SendMessage: a message the protocol forbids gets its specific code and a message naming
    the value and the rule; nothing is stored."""
    reply = await _send(stub, message)
    assert reply.status.code == code, reply.status
    assert words in reply.status.message


async def test_send_message_refuses_reserved_user_properties_and_far_timestamps(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    """SendMessage: a user property named like a system one is ILLEGAL_MESSAGE_PROPERTY_KEY; a
    delivery timestamp beyond the timer's 3 days is ILLEGAL_DELIVERY_TIME (never early)."""
    reserved = _message()
    reserved.user_properties["UNIQ_KEY"] = "forged"
    reply = await _send(stub, reserved)
    assert reply.status.code == d.ILLEGAL_MESSAGE_PROPERTY_KEY and "UNIQ_KEY" in reply.status.message
    far = _message(message_type=d.DELAY)
    far.system_properties.delivery_timestamp.FromSeconds(int(time.time()) + 3 * 86_400 + 60)
    reply = await _send(stub, far)
    assert reply.status.code == d.ILLEGAL_DELIVERY_TIME and "longest timer delay" in reply.status.message


async def test_end_transaction_with_a_foreign_or_stale_id_is_invalid_transaction_id(
    stub: service_pb2_grpc.MessagingServiceStub,
) -> None:
    """EndTransaction: an id orbitmq never handed out, or one whose offset holds no half message,
    is INVALID_TRANSACTION_ID; a normal send's offset is not a transaction."""
    request = s.EndTransactionRequest(
        topic=d.Resource(name="V2Codes"), message_id="01AB", transaction_id="nonsense", resolution=d.COMMIT
    )
    reply = await stub.EndTransaction(request, metadata=CLIENT, timeout=FAST_S)
    assert reply.status.code == d.INVALID_TRANSACTION_ID and "nonsense" in reply.status.message
    await _send(stub, _message())
    request.transaction_id = "broker-a:0:01AB"  # offset 0 holds the normal message just sent
    reply = await stub.EndTransaction(request, metadata=CLIENT, timeout=FAST_S)
    assert reply.status.code == d.INVALID_TRANSACTION_ID, reply.status
    request.transaction_id = "no-such-broker:0:01AB"
    reply = await stub.EndTransaction(request, metadata=CLIENT, timeout=FAST_S)
    assert reply.status.code == d.HA_NOT_AVAILABLE and "no-such-broker" in reply.status.message
