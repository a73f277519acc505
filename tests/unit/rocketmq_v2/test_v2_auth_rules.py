"""The proxy's table of what each ``apache.rocketmq.v2`` RPC needs: every method of the service is
in it (a new RPC cannot go unchecked), and the needs are RocketMQ 5.3's (``Pub`` to send, ``Sub``
on topic and group to consume), in orbitmq's names (the namespace applied)."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.message_factory import GetMessageClass

from orbitmq.auth.decide import Need
from orbitmq.auth.model import Action, Resource
from orbitmq.proxy.auth import MAY_NEED_NOTHING, RULES
from orbitmq.proxy.convert import Refused
from orbitmq.rocketmq_v2 import definition_pb2 as v2
from orbitmq.rocketmq_v2 import service_pb2 as pb

SERVICE = pb.DESCRIPTOR.services_by_name["MessagingService"]
P, S, G = Action.PUB, Action.SUB, Action.GET
T, GR = Resource.topic, Resource.group


def test_every_method_of_the_service_is_in_the_table_and_nothing_else() -> None:
    assert set(RULES) == {m.name for m in SERVICE.methods}
    assert set(RULES) >= MAY_NEED_NOTHING


@pytest.mark.parametrize("method", sorted(m.name for m in SERVICE.methods))
def test_an_empty_request_still_needs_something_unless_it_may_need_nothing(method: str) -> None:
    request = GetMessageClass(SERVICE.methods_by_name[method].input_type)()
    if method == "SendMessage":  # no message, no topic: refused before anything is decided
        with pytest.raises(Refused) as refused:
            RULES[method](request)
        assert refused.value.code == v2.BAD_REQUEST
        return
    needs = RULES[method](request)
    assert all(isinstance(n, Need) and n.actions for n in needs)
    assert needs or method in MAY_NEED_NOTHING


def _needs(method: str, request: Any) -> set[tuple[tuple[Action, ...], Resource]]:
    return {(n.actions, n.resource) for n in RULES[method](request)}


def _r(name: str, namespace: str = "") -> v2.Resource:
    return v2.Resource(name=name, resource_namespace=namespace)


def test_producing_needs_pub_on_the_topic_in_its_namespace() -> None:
    send = pb.SendMessageRequest(messages=[v2.Message(topic=_r("orders", "shop"))] * 2)
    assert _needs("SendMessage", send) == {((P,), T("shop%orders"))}
    assert _needs("EndTransaction", pb.EndTransactionRequest(topic=_r("orders"))) == {((P,), T("orders"))}
    assert _needs("RecallMessage", pb.RecallMessageRequest(topic=_r("orders"))) == {((P,), T("orders"))}


def test_consuming_needs_sub_on_topic_and_group() -> None:
    both = {((S,), GR("g")), ((S,), T("orders"))}
    queue = v2.MessageQueue(topic=_r("orders"))
    assert _needs("ReceiveMessage", pb.ReceiveMessageRequest(group=_r("g"), message_queue=queue)) == both
    assert _needs("PullMessage", pb.PullMessageRequest(group=_r("g"), message_queue=queue)) == both
    assert _needs("UpdateOffset", pb.UpdateOffsetRequest(group=_r("g"), message_queue=queue)) == both
    for method, request_type in (
        ("AckMessage", pb.AckMessageRequest),
        ("ForwardMessageToDeadLetterQueue", pb.ForwardMessageToDeadLetterQueueRequest),
        ("QueryAssignment", pb.QueryAssignmentRequest),
        ("ChangeInvisibleDuration", pb.ChangeInvisibleDurationRequest),
    ):
        assert _needs(method, request_type(group=_r("g"), topic=_r("orders"))) == both, method


def test_a_retry_topic_stands_for_its_group() -> None:
    ack = pb.AckMessageRequest(group=_r("g"), topic=_r("%RETRY%g"))
    assert _needs("AckMessage", ack) == {((S,), GR("g"))}


def test_routes_and_queue_offsets_take_any_of_their_actions() -> None:
    assert _needs("QueryRoute", pb.QueryRouteRequest(topic=_r("orders"))) == {((P, S, G), T("orders"))}
    offset = pb.QueryOffsetRequest(message_queue=v2.MessageQueue(topic=_r("orders")))
    assert _needs("QueryOffset", offset) == {((G, S), T("orders"))}


def test_a_producer_heartbeat_needs_nothing_a_consumer_one_its_group() -> None:
    assert _needs("Heartbeat", pb.HeartbeatRequest(client_type=v2.PRODUCER, group=_r("g"))) == set()
    consumer = pb.HeartbeatRequest(client_type=v2.SIMPLE_CONSUMER, group=_r("g"))
    assert _needs("Heartbeat", consumer) == {((S,), GR("g"))}
    assert _needs("NotifyClientTermination", pb.NotifyClientTerminationRequest()) == set()


def test_telemetry_settings_need_their_publishing_or_subscription() -> None:
    publishing = v2.Settings(publishing=v2.Publishing(topics=[_r("a"), _r("b")]))
    assert _needs("Telemetry", pb.TelemetryCommand(settings=publishing)) == {((P,), T("a")), ((P,), T("b"))}
    subscription = v2.Settings(
        subscription=v2.Subscription(group=_r("g"), subscriptions=[v2.SubscriptionEntry(topic=_r("a"))])
    )
    assert _needs("Telemetry", pb.TelemetryCommand(settings=subscription)) == {
        ((S,), GR("g")),
        ((S,), T("a")),
    }
