"""The RPC table: every method of the generated services is in it, and the needs it reads from
requests are the ones a user is granted for (and admin RPCs only with cluster grants)."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.message_factory import GetMessageClass

from orbitmq.auth.decide import Need, authorize
from orbitmq.auth.model import Acl, Action, Resource, User
from orbitmq.auth.rpcs import RULES, RpcContext, needs_of
from orbitmq.v1 import broker_pb2, common_pb2, nameserver_pb2, sidecar_pb2

SERVICES = [
    service
    for module in (broker_pb2, nameserver_pb2, sidecar_pb2)
    for service in module.DESCRIPTOR.services_by_name.values()
]
METHODS = {f"/{s.full_name}/{m.name}": m for s in SERVICES for m in s.methods}
CONTEXT = RpcContext(
    cluster="DefaultCluster", group="sidecar-group", topics=("orders", "%RETRY%sidecar-group")
)

P, S, G, L, C, U, D = (
    Action.PUB,
    Action.SUB,
    Action.GET,
    Action.LIST,
    Action.CREATE,
    Action.UPDATE,
    Action.DELETE,
)
T, GR, CL = Resource.topic, Resource.group, Resource.cluster


def test_every_generated_rpc_is_in_the_table_and_nothing_else() -> None:
    assert len(METHODS) == 61
    assert set(RULES) == set(METHODS)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_rule_guards_its_rpc(method: str) -> None:
    """An empty request (a stream's empty first message) still needs something, unless the
    servicer resolves the resource or the RPC may name none (then it is marked so)."""
    rule = RULES[method]
    request = GetMessageClass(METHODS[method].input_type)()
    needs = rule.needs(request, CONTEXT)
    assert all(isinstance(n, Need) and n.actions for n in needs)
    assert needs or rule.resolved_by_servicer is not None or rule.may_need_nothing


def _needs(method: str, request: Any) -> set[tuple[tuple[Action, ...], Resource]]:
    return {(n.actions, n.resource) for n in needs_of(method, request, CONTEXT)}


B = "/orbitmq.v1.Broker/"
N = "/orbitmq.v1.NameServer/"
SC = "/orbitmq.v1.Sidecar/"
Q = common_pb2.MessageQueue


@pytest.mark.parametrize(
    ("method", "request_", "expected"),
    [
        (B + "SendMessage", broker_pb2.SendMessageRequest(topic="orders"), {((P,), T("orders"))}),
        (B + "SendMessage", broker_pb2.SendMessageRequest(topic="%RETRY%g1"), {((S,), GR("g1"))}),
        (
            B + "PullMessage",
            broker_pb2.PullMessageRequest(topic="orders", consumer_group="g1"),
            {((S,), T("orders")), ((S,), GR("g1"))},
        ),
        (
            B + "PopMessage",
            broker_pb2.PopMessageRequest(topic="%DLQ%g1", consumer_group="g1"),
            {((S,), GR("g1"))},
        ),
        (
            B + "AckMessage",
            broker_pb2.AckMessageRequest(topic="orders", consumer_group="g1"),
            {((S,), T("orders")), ((S,), GR("g1"))},
        ),
        (
            B + "Heartbeat",
            broker_pb2.HeartbeatRequest(
                producers=[broker_pb2.ProducerData(group="p")],
                consumers=[
                    broker_pb2.ConsumerData(
                        group="g1",
                        subscriptions=[
                            common_pb2.Subscription(topic="a"),
                            common_pb2.Subscription(topic="%RETRY%g1"),
                        ],
                    )
                ],
            ),
            {((S,), GR("g1")), ((S,), T("a"))},
        ),
        (B + "Heartbeat", broker_pb2.HeartbeatRequest(producers=[broker_pb2.ProducerData(group="p")]), set()),
        (
            B + "LockBatch",
            broker_pb2.LockBatchRequest(
                consumer_group="g1", queues=[Q(topic="a"), Q(topic="a"), Q(topic="b")]
            ),
            {((S,), GR("g1")), ((S,), T("a")), ((S,), T("b"))},
        ),
        (
            B + "SendBack",
            broker_pb2.SendBackRequest(consumer_group="g1", origin_topic="orders"),
            {((S,), GR("g1")), ((S,), T("orders"))},
        ),
        (
            B + "Session",
            broker_pb2.ClientEvent(
                hello=broker_pb2.SessionHello(consumer_groups=["g1"], producer_groups=["p"])
            ),
            {((S,), GR("g1"))},
        ),
        (B + "GetMaxOffset", broker_pb2.QueueRequest(topic="orders"), {((G, S), T("orders"))}),
        (B + "QueryMessageByKey", broker_pb2.QueryMessageByKeyRequest(topic="orders"), {((G,), T("orders"))}),
        (
            B + "CreateTopic",
            broker_pb2.CreateTopicRequest(topic=common_pb2.TopicConfig(topic_name="orders")),
            {((C,), T("orders"))},
        ),
        (
            B + "CreateTopic",
            broker_pb2.CreateTopicRequest(
                topic=common_pb2.TopicConfig(topic_name="orders"), update_existing=True
            ),
            {((C,), T("orders")), ((U,), T("orders"))},
        ),
        (B + "DeleteTopic", broker_pb2.DeleteTopicRequest(topic="orders"), {((D,), T("orders"))}),
        (
            B + "CreateSubscriptionGroup",
            broker_pb2.CreateSubscriptionGroupRequest(
                group=broker_pb2.SubscriptionGroupConfig(group_name="g1")
            ),
            {((C,), GR("g1"))},
        ),
        (
            B + "DeleteSubscriptionGroup",
            broker_pb2.DeleteSubscriptionGroupRequest(group_name="g1"),
            {((D,), GR("g1"))},
        ),
        (
            B + "ResetOffset",
            broker_pb2.ResetOffsetRequest(consumer_group="g1", topic="orders"),
            {((U,), GR("g1")), ((U,), T("orders"))},
        ),
        (B + "ListTopics", broker_pb2.ListTopicsRequest(), {((L,), CL("DefaultCluster"))}),
        (B + "ChangeRole", broker_pb2.ChangeRoleRequest(role="SLAVE"), {((U,), CL("DefaultCluster"))}),
        (B + "GetHaState", broker_pb2.GetHaStateRequest(), {((G,), CL("DefaultCluster"))}),
        (N + "QueryRoute", nameserver_pb2.QueryRouteRequest(topic="orders"), {((P, S, G), T("orders"))}),
        (N + "RegisterBroker", nameserver_pb2.RegisterBrokerRequest(cluster="c2"), {((U,), CL("c2"))}),
        (
            N + "WipeWritePerm",
            nameserver_pb2.WipeWritePermRequest(broker_name="b"),
            {((U,), CL("DefaultCluster"))},
        ),
        (N + "GetTopicList", nameserver_pb2.GetTopicListRequest(), {((L,), CL("DefaultCluster"))}),
        (
            SC + "Consume",
            sidecar_pb2.ConsumeRequest(),
            {((S,), GR("sidecar-group")), ((S,), T("orders"))},
        ),
        (
            SC + "SendBatch",
            sidecar_pb2.SidecarSendBatchRequest(
                sends=[
                    sidecar_pb2.SidecarSendRequest(message=common_pb2.Message(topic=t))
                    for t in ("a", "b", "a")
                ]
            ),
            {((P,), T("a")), ((P,), T("b"))},
        ),
        (SC + "Pause", sidecar_pb2.PauseRequest(), {((U,), GR("sidecar-group"))}),
    ],
)
def test_needs_read_from_requests(method: str, request_: Any, expected: set[Any]) -> None:
    assert _needs(method, request_) == expected


def test_stored_message_needs_are_left_to_the_servicer() -> None:
    assert RULES[B + "EndTransaction"].resolved_by_servicer == ((P,), Resource.topic("").type)
    assert RULES[B + "ViewMessage"].resolved_by_servicer == ((G,), Resource.topic("").type)


def _acl(*entries: tuple[str, str]) -> Acl:
    return Acl.model_validate(
        {
            "subject": "User:app",
            "policies": [
                {
                    "entries": [
                        {"resource": r, "actions": a.split(","), "decision": "Allow"} for r, a in entries
                    ]
                }
            ],
        }
    )


APP = User.model_validate({"username": "app", "password": "pw"})
ROOT = User.model_validate({"username": "root", "password": "pw", "userType": "Super"})
USER_AND_ACL_CHANGES = ("CreateUser", "UpdateUser", "DeleteUser", "CreateAcl", "UpdateAcl", "DeleteAcl")
CLUSTER_MOVERS = [
    (B + "ChangeRole", broker_pb2.ChangeRoleRequest()),
    (B + "Replicate", broker_pb2.ReplicaAck()),
    (B + "GetReplicaConfig", broker_pb2.GetReplicaConfigRequest()),
    (N + "WipeWritePerm", nameserver_pb2.WipeWritePermRequest()),
    (N + "AddWritePerm", nameserver_pb2.AddWritePermRequest()),
    (N + "RegisterBroker", nameserver_pb2.RegisterBrokerRequest(cluster="DefaultCluster")),
    *((B + m, GetMessageClass(METHODS[B + m].input_type)()) for m in USER_AND_ACL_CHANGES),
]


@pytest.mark.parametrize(("method", "request_"), CLUSTER_MOVERS)
def test_cluster_moving_rpcs_need_super_or_an_explicit_cluster_grant(method: str, request_: Any) -> None:
    needs = needs_of(method, request_, CONTEXT)
    every_topic_and_group = _acl(
        ("Topic:*", "All"), ("Group:*", "All"), ("Cluster:DefaultCluster", "Get,List")
    )
    assert not authorize(APP, every_topic_and_group, needs, "10.0.0.1").allowed
    assert authorize(APP, _acl(("Cluster:DefaultCluster", "Update")), needs, "10.0.0.1").allowed
    assert not authorize(APP, _acl(("Cluster:Other", "Update")), needs, "10.0.0.1").allowed
    assert authorize(ROOT, None, needs, "10.0.0.1").allowed


def test_a_producer_and_a_consumer_grant_cover_their_rpcs() -> None:
    producer = _acl(("Topic:orders", "Pub"))
    consumer = _acl(("Topic:orders", "Sub"), ("Group:g1", "Sub"))
    send = needs_of(B + "SendMessage", broker_pb2.SendMessageRequest(topic="orders"), CONTEXT)
    route = needs_of(N + "QueryRoute", nameserver_pb2.QueryRouteRequest(topic="orders"), CONTEXT)
    pop = needs_of(
        B + "PopMessage", broker_pb2.PopMessageRequest(topic="orders", consumer_group="g1"), CONTEXT
    )
    retry = needs_of(
        B + "SendBack", broker_pb2.SendBackRequest(consumer_group="g1", origin_topic="orders"), CONTEXT
    )
    assert authorize(APP, producer, [*send, *route], None).allowed
    assert not authorize(APP, producer, pop, None).allowed
    assert authorize(APP, consumer, [*pop, *route, *retry], None).allowed
    assert not authorize(APP, consumer, send, None).allowed
