"""What every RPC of ``orbitmq.v1`` needs: actions on resources, read from its request.

One table, :data:`RULES`, keyed by the full gRPC method (``/orbitmq.v1.Broker/SendMessage``), so
a server's interceptor looks a call up once; a unit test checks that every method of the
generated service descriptors is in it, so a new RPC cannot go unguarded.

The choices follow RocketMQ 5.3's ACL 2.0 where it has the same request, and otherwise the
least surprising grant:

* producing is ``Pub`` on the topic; consuming (pull, POP, acks, offsets, locks, send-back) is
  ``Sub`` on the topic *and* on the group; a retry or dead-letter topic (``%RETRY%g``,
  ``%DLQ%g``) stands for its group, as in RocketMQ (``Resource.ofGroup``);
* a route query is allowed with ``Pub``, ``Sub`` or ``Get`` on the topic (producers, consumers
  and tools all need routes); queries and stats are ``Get``, listings ``List`` on the cluster;
* creating, changing and deleting topics and groups are ``Create`` / ``Update`` / ``Delete`` on
  them; an offset reset is ``Update`` on the group and the topic (it rewrites what the group
  consumes next);
* what moves the cluster — role changes, replication (a slave reads the whole commit log, every
  topic), broker registration, write-permission wipes — is ``Update`` on the cluster: super
  users (brokers use one) or an explicit ``Cluster`` grant, never a topic or group grant.

Some needs name a resource the request does not carry (the topic of a stored message for
``EndTransaction`` and ``ViewMessage``); the rule says so in ``resolved_by_servicer`` and the
servicer checks it once it has looked the message up. A client-streaming RPC's needs are read
from its first message (the session hello); the sidecar's from its own configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from orbitmq.auth.decide import Need
from orbitmq.auth.model import Action, Resource, ResourceType
from orbitmq.common.topics import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX

PUB = (Action.PUB,)
SUB = (Action.SUB,)
GET = (Action.GET,)
LIST = (Action.LIST,)
CREATE = (Action.CREATE,)
UPDATE = (Action.UPDATE,)
DELETE = (Action.DELETE,)
ROUTE = (Action.PUB, Action.SUB, Action.GET)


@dataclass(frozen=True, slots=True)
class RpcContext:
    """What a server knows that requests do not carry.

    ``cluster``: the cluster the server belongs to (a name server: the cluster it is deployed
    for, or the broker group's when the request names one). ``group`` / ``topics``: a sidecar's
    consumer group and subscribed topics (its RPCs act on them).
    """

    cluster: str
    group: str = ""
    topics: tuple[str, ...] = ()


NeedsOf = Callable[[Any, RpcContext], tuple[Need, ...]]


@dataclass(frozen=True, slots=True)
class RpcRule:
    needs: NeedsOf
    """The needs read from the request (for a client stream: from its first message)."""
    resolved_by_servicer: tuple[tuple[Action, ...], ResourceType] | None = None
    """A need whose resource the servicer finds (the stored message's topic) and checks itself."""
    may_need_nothing: bool = False
    """A request may name no resource (a heartbeat of producers only, a session of a producer):
    then any enabled, authenticated user may make it, as in RocketMQ."""


def topic_need(actions: tuple[Action, ...], topic: str) -> Need:
    """A need on a topic; a retry or dead-letter topic stands for its group (``Sub`` on it)."""
    for prefix in (RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX):
        if topic.startswith(prefix):
            return Need(SUB, Resource.group(topic[len(prefix) :]))
    return Need(actions, Resource.topic(topic))


def group_need(actions: tuple[Action, ...], group: str) -> Need:
    return Need(actions, Resource.group(group))


def cluster_need(actions: tuple[Action, ...], cluster: str) -> Need:
    return Need(actions, Resource.cluster(cluster))


def _consume(request: Any, _: RpcContext) -> tuple[Need, ...]:
    """``Sub`` on ``request.topic`` and ``request.consumer_group``."""
    return (topic_need(SUB, request.topic), group_need(SUB, request.consumer_group))


def _topic(actions: tuple[Action, ...], field: str = "topic") -> NeedsOf:
    return lambda request, _: (topic_need(actions, getattr(request, field)),)


def _group(actions: tuple[Action, ...], field: str = "consumer_group") -> NeedsOf:
    return lambda request, _: (group_need(actions, getattr(request, field)),)


def _cluster(actions: tuple[Action, ...]) -> NeedsOf:
    return lambda _, context: (cluster_need(actions, context.cluster),)


def _nothing(_: Any, __: RpcContext) -> tuple[Need, ...]:
    return ()


def _unique(needs: Iterable[Need]) -> tuple[Need, ...]:
    return tuple(dict.fromkeys(needs))


def _heartbeat(request: Any, _: RpcContext) -> tuple[Need, ...]:
    needs: list[Need] = []
    for consumer in request.consumers:
        needs.append(group_need(SUB, consumer.group))
        needs.extend(topic_need(SUB, s.topic) for s in consumer.subscriptions)
    return _unique(needs)


def _unregister(request: Any, _: RpcContext) -> tuple[Need, ...]:
    return (group_need(SUB, request.consumer_group),) if request.consumer_group else ()


def _locks(request: Any, _: RpcContext) -> tuple[Need, ...]:
    topics = (topic_need(SUB, q.topic) for q in request.queues)
    return _unique([group_need(SUB, request.consumer_group), *topics])


def _send_back(request: Any, _: RpcContext) -> tuple[Need, ...]:
    needs = [group_need(SUB, request.consumer_group)]
    if request.origin_topic:
        needs.append(topic_need(SUB, request.origin_topic))
    return _unique(needs)


def _session(hello: Any, _: RpcContext) -> tuple[Need, ...]:
    """The first message of the stream: consumer groups get checks pushed to them (resets)."""
    if hello.WhichOneof("event") != "hello":
        return ()
    return _unique(group_need(SUB, g) for g in hello.hello.consumer_groups)


def _consume_stats(request: Any, _: RpcContext) -> tuple[Need, ...]:
    needs = [group_need(GET, request.consumer_group)]
    if request.topic:
        needs.append(topic_need(GET, request.topic))
    return tuple(needs)


def _create_topic(request: Any, _: RpcContext) -> tuple[Need, ...]:
    needs = [topic_need(CREATE, request.topic.topic_name)]
    if request.update_existing:
        needs.append(topic_need(UPDATE, request.topic.topic_name))
    return tuple(needs)


def _reset_offset(request: Any, _: RpcContext) -> tuple[Need, ...]:
    return (group_need(UPDATE, request.consumer_group), topic_need(UPDATE, request.topic))


def _register_broker(request: Any, context: RpcContext) -> tuple[Need, ...]:
    return (cluster_need(UPDATE, request.cluster or context.cluster),)


def _sidecar_consume(_: Any, context: RpcContext) -> tuple[Need, ...]:
    return _unique([group_need(SUB, context.group), *(topic_need(SUB, t) for t in context.topics)])


def _sidecar_send(request: Any, _: RpcContext) -> tuple[Need, ...]:
    return (topic_need(PUB, request.message.topic),)


def _sidecar_send_batch(request: Any, _: RpcContext) -> tuple[Need, ...]:
    return _unique(topic_need(PUB, s.message.topic) for s in request.sends)


def _sidecar_group(_: Any, context: RpcContext) -> tuple[Need, ...]:
    return (group_need(UPDATE, context.group),)


_BROKER: dict[str, RpcRule] = {
    "SendMessage": RpcRule(_topic(PUB)),
    "EndTransaction": RpcRule(_nothing, resolved_by_servicer=(PUB, ResourceType.TOPIC)),
    "PullMessage": RpcRule(_consume),
    "QueryConsumerOffset": RpcRule(_consume),
    "UpdateConsumerOffset": RpcRule(_consume),
    "Heartbeat": RpcRule(_heartbeat, may_need_nothing=True),
    "UnregisterClient": RpcRule(_unregister, may_need_nothing=True),
    "GetConsumerList": RpcRule(_group(SUB)),
    "LockBatch": RpcRule(_locks),
    "UnlockBatch": RpcRule(_locks),
    "SendBack": RpcRule(_send_back),
    "Session": RpcRule(_session, may_need_nothing=True),
    "PopMessage": RpcRule(_consume),
    "AckMessage": RpcRule(_consume),
    "ChangeInvisibleTime": RpcRule(_consume),
    "ForwardToDeadLetter": RpcRule(_consume),
    "QueryMessageByKey": RpcRule(_topic(GET)),
    "ViewMessage": RpcRule(_nothing, resolved_by_servicer=(GET, ResourceType.TOPIC)),
    "SearchOffset": RpcRule(_topic((Action.GET, Action.SUB))),
    "GetMinOffset": RpcRule(_topic((Action.GET, Action.SUB))),
    "GetMaxOffset": RpcRule(_topic((Action.GET, Action.SUB))),
    "GetConsumeStats": RpcRule(_consume_stats),
    "GetTopicStats": RpcRule(_topic(GET)),
    "CreateTopic": RpcRule(_create_topic),
    "UpdateTopic": RpcRule(_topic(UPDATE)),
    "DeleteTopic": RpcRule(_topic(DELETE)),
    "ListTopics": RpcRule(_cluster(LIST)),
    "CreateSubscriptionGroup": RpcRule(lambda r, _: (group_need(CREATE, r.group.group_name),)),
    "DeleteSubscriptionGroup": RpcRule(_group(DELETE, "group_name")),
    "ListSubscriptionGroups": RpcRule(_cluster(LIST)),
    "ResetOffset": RpcRule(_reset_offset),
    "GetRuntimeInfo": RpcRule(_cluster(GET)),
    "GetConsumerConnections": RpcRule(_group(GET)),
    "Replicate": RpcRule(_cluster(UPDATE)),
    "GetReplicaConfig": RpcRule(_cluster(UPDATE)),
    "ChangeRole": RpcRule(_cluster(UPDATE)),
    "GetHaState": RpcRule(_cluster(GET)),
    # Users and ACLs as RocketMQ 5.3 guards them (CreateUserRequestHeader & co.): changes are
    # Update on the cluster, reads Get; the servicer also refuses a non-super caller a change
    # to a super user.
    "CreateUser": RpcRule(_cluster(UPDATE)),
    "UpdateUser": RpcRule(_cluster(UPDATE)),
    "DeleteUser": RpcRule(_cluster(UPDATE)),
    "GetUser": RpcRule(_cluster(GET)),
    "ListUsers": RpcRule(_cluster(GET)),
    "CreateAcl": RpcRule(_cluster(UPDATE)),
    "UpdateAcl": RpcRule(_cluster(UPDATE)),
    "DeleteAcl": RpcRule(_cluster(UPDATE)),
    "GetAcl": RpcRule(_cluster(GET)),
    "ListAcls": RpcRule(_cluster(GET)),
}

_NAME_SERVER: dict[str, RpcRule] = {
    "RegisterBroker": RpcRule(_register_broker),
    "UnregisterBroker": RpcRule(_register_broker),
    "QueryRoute": RpcRule(_topic(ROUTE)),
    "GetClusterInfo": RpcRule(_cluster(GET)),
    "GetTopicList": RpcRule(_cluster(LIST)),
    "DeleteTopic": RpcRule(_topic(DELETE)),
    "WipeWritePerm": RpcRule(_cluster(UPDATE)),
    "AddWritePerm": RpcRule(_cluster(UPDATE)),
    # Answers every secret: the servicer also refuses a caller that is not a super user.
    "GetAuthTables": RpcRule(_cluster(UPDATE)),
}

_SIDECAR: dict[str, RpcRule] = {
    "Consume": RpcRule(_sidecar_consume),
    "Send": RpcRule(_sidecar_send),
    "SendBatch": RpcRule(_sidecar_send_batch, may_need_nothing=True),  # an empty batch sends nothing
    "Pause": RpcRule(_sidecar_group),
    "Resume": RpcRule(_sidecar_group),
}

RULES: dict[str, RpcRule] = {
    f"/orbitmq.v1.{service}/{method}": rule
    for service, table in (("Broker", _BROKER), ("NameServer", _NAME_SERVER), ("Sidecar", _SIDECAR))
    for method, rule in table.items()
}
"""Full gRPC method → what it needs."""


def needs_of(method: str, request: Any, context: RpcContext) -> tuple[Need, ...]:
    """The needs of one call; KeyError for a method not in :data:`RULES` (deny it)."""
    return RULES[method].needs(request, context)
