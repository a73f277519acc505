"""The proxy's table of what each ``apache.rocketmq.v2`` RPC needs: every method of the service is
in it (a new RPC cannot go unchecked), and the needs are RocketMQ 5.3's (``Pub`` to send, ``Sub``
on topic and group to consume), in orbitmq's names (the namespace applied); and the guard's
refusals (its memory of verified signatures expires with the window and the secret)."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.message_factory import GetMessageClass

from orbitmq.auth.decide import Need
from orbitmq.auth.model import Acl, Action, Resource, User, UserStatus
from orbitmq.auth.signature import MQV2_ZONE_SLACK_MS, mqv2_date_time, sign_mqv2
from orbitmq.auth.tables import AuthTables
from orbitmq.proxy.auth import MAY_NEED_NOTHING, RULES, ProxyGuard, settings_needs
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


class _Call:
    """What the guard reads of a call: its metadata and its peer (grpc's ServicerContext API)."""

    def __init__(self, metadata: list[tuple[str, str]]) -> None:
        self._metadata = metadata

    def invocation_metadata(self) -> list[tuple[str, str]]:
        return self._metadata

    def peer(self) -> str:
        return "ipv4:10.0.0.7:5555"


def _tables(secret: str) -> AuthTables:
    acl = Acl.model_validate(
        {
            "subject": "User:app",
            "policies": [
                {
                    "policyType": "Custom",
                    "entries": [{"resource": "Topic:orders", "actions": ["Pub"], "decision": "Allow"}],
                }
            ],
        }
    )
    return AuthTables(users=(User(username="app", password=secret),), acls=(acl,))


SIGNED_MS = 1_790_000_000_000
SEND = pb.SendMessageRequest(messages=[v2.Message(topic=_r("orders"))])


def test_a_signature_verified_once_is_still_refused_once_stale_or_after_a_secret_change() -> None:
    """The guard remembers verified signatures: that must not outlive the window or the secret."""
    tables = [_tables("app-secret")]
    now = [SIGNED_MS]
    guard = ProxyGuard(lambda: tables[0], window_ms=60_000, now_ms=lambda: now[0])
    call = _Call(sign_mqv2("app", "app-secret", mqv2_date_time(SIGNED_MS)))
    assert guard.check("SendMessage", SEND, call).user.username == "app"  # type: ignore[arg-type]
    assert guard.check("SendMessage", SEND, call).user.username == "app"  # type: ignore[arg-type]

    now[0] = SIGNED_MS + MQV2_ZONE_SLACK_MS + 61_000
    with pytest.raises(Refused) as stale:
        guard.check("SendMessage", SEND, call)  # type: ignore[arg-type]
    assert stale.value.code == v2.UNAUTHORIZED and "from the server's clock" in stale.value.message

    now[0] = SIGNED_MS
    tables[0] = _tables("rotated-secret")
    with pytest.raises(Refused) as rotated:
        guard.check("SendMessage", SEND, call)  # type: ignore[arg-type]
    assert rotated.value.code == v2.UNAUTHORIZED and "does not match" in rotated.value.message


def test_a_grant_missing_is_forbidden_naming_user_action_and_resource() -> None:
    guard = ProxyGuard(lambda: _tables("app-secret"), window_ms=60_000, now_ms=lambda: SIGNED_MS)
    call = _Call(sign_mqv2("app", "app-secret", mqv2_date_time(SIGNED_MS)))
    receive = pb.ReceiveMessageRequest(group=_r("g"), message_queue=v2.MessageQueue(topic=_r("orders")))
    with pytest.raises(Refused) as refused:
        guard.check("ReceiveMessage", receive, call)  # type: ignore[arg-type]
    assert refused.value.code == v2.FORBIDDEN
    assert refused.value.message.startswith("app may not Sub on Group:g (ReceiveMessage)")


def test_a_telemetry_caller_is_renewed_under_changed_tables() -> None:
    """A stream authenticated at its opening is checked against the users of now: a deleted
    user is refused UNAUTHORIZED, a disabled one FORBIDDEN, at its next settings command."""
    tables = [_tables("app-secret")]
    guard = ProxyGuard(lambda: tables[0], window_ms=60_000, now_ms=lambda: SIGNED_MS)
    call = _Call(sign_mqv2("app", "app-secret", mqv2_date_time(SIGNED_MS)))
    caller = guard.authenticate("Telemetry", call)  # type: ignore[arg-type]
    publishing = settings_needs(v2.Settings(publishing=v2.Publishing(topics=[_r("orders")])))
    guard.authorize(guard.renewed(caller), publishing)

    disabled = User(username="app", password="app-secret", user_status=UserStatus.DISABLE)
    tables[0] = AuthTables(version=2, users=(disabled,), acls=_tables("app-secret").acls)
    with pytest.raises(Refused) as refused:
        guard.authorize(guard.renewed(caller), publishing)
    assert refused.value.code == v2.FORBIDDEN and "disabled" in refused.value.message

    tables[0] = AuthTables(version=3)
    with pytest.raises(Refused) as gone:
        guard.renewed(caller)
    assert gone.value.code == v2.UNAUTHORIZED and "no longer exists" in gone.value.message
