"""Who calls the proxy, and may they: RocketMQ 5's signature and ACL 2.0 over ``apache.rocketmq.v2``.

The proxy cannot use :class:`orbitmq.common.guard.Guard`: that one reads orbitmq's own
``x-orbitmq-*`` signature and refuses with gRPC status codes, while a v2 client signs with the
``authorization`` header (``MQv2-HMAC-SHA1``, :func:`orbitmq.auth.signature.verify_mqv2`) and
expects every answer in-band, as a ``Status`` in the response. So :class:`ProxyGuard` raises
:class:`~orbitmq.proxy.convert.Refused`, which the servicer answers like any refusal:
``UNAUTHORIZED`` (40100) for missing, unknown, wrong or stale credentials, ``FORBIDDEN`` (40300)
for a denied decision. The decisions themselves are orbitmq's (:mod:`orbitmq.auth.decide`, one
:class:`~orbitmq.auth.decide.DecisionCache` per connection), and each refusal is one audit record
(:func:`orbitmq.auth.audit.record`) with the client's ``x-mq-request-id``.

What each RPC needs (:data:`RULES`) follows RocketMQ 5.3's ``DefaultAuthorizationContextBuilder``:

* sends, transaction ends and recalls: ``Pub`` on the topic;
* receiving, acking, dead-lettering, assignments, pulls and offsets: ``Sub`` on the topic and on
  the group (a retry topic stands for its group); ``QueryOffset`` (a queue's offset by time or
  bound, no group) ``Get`` or ``Sub`` on the topic, as orbitmq's ``SearchOffset``;
* a route: ``Pub``, ``Sub`` or ``Get`` on the topic (as orbitmq's name server; RocketMQ's proxy
  asks ``Pub`` or ``Sub``);
* a consumer's heartbeat and termination: ``Sub`` on its group; a producer's: nothing but a
  valid, enabled user;
* ``ChangeInvisibleDuration``: ``Sub`` on the group *and* the topic (RocketMQ asks the group only;
  orbitmq's own ``ChangeInvisibleTime`` asks both, and the request names the topic);
* ``Telemetry``: authenticated when the stream opens; each settings command then needs ``Pub``
  on the topics it publishes, or ``Sub`` on its group and subscribed topics.

Resource names are orbitmq's, the namespace applied (``ns%orders``), as stored ACLs name them.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import grpc

from orbitmq.auth import audit
from orbitmq.auth.decide import DecisionCache, IpAddress, Need
from orbitmq.auth.model import Action, User
from orbitmq.auth.rpcs import ROUTE, SUB, group_need, topic_need
from orbitmq.auth.signature import (
    MQ_AUTHORIZATION_HEADER,
    MQ_DATE_TIME_HEADER,
    MQV2_ZONE_SLACK_MS,
    SignatureError,
    SignatureFailure,
    mq_date_time_ms,
    verify_mqv2,
)
from orbitmq.auth.tables import AuthTables
from orbitmq.common.guard import MAX_CONNECTIONS, TablesProvider, source_ip_of
from orbitmq.proxy.convert import Refused, real_name
from orbitmq.rocketmq_v2 import definition_pb2 as v2

log = logging.getLogger(__name__)

REQUEST_ID_HEADER = "x-mq-request-id"
PUB = (Action.PUB,)
GET_OR_SUB = (Action.GET, Action.SUB)
CONSUMER_TYPES = frozenset({v2.PUSH_CONSUMER, v2.SIMPLE_CONSUMER, v2.PULL_CONSUMER})
HINT = "sign with the client's SessionCredentials (access key and secret key of a user of this cluster)"
"""Ends every UNAUTHORIZED message: what the refused client should do."""

VERIFIED_SIGNATURES = 4096
"""Signatures remembered as verified (see :meth:`ProxyGuard.authenticate`): a client signs anew
each second, so this holds the last second or so of a few thousand clients."""

NeedsOf = Callable[[Any], tuple[Need, ...]]


@lru_cache(maxsize=4096)
def _topic(actions: tuple[Action, ...], name: str) -> Need:
    """A topic's need, built once per name (a send would parse its topic into a resource each time)."""
    return topic_need(actions, name)


@lru_cache(maxsize=4096)
def _group(name: str) -> Need:
    return group_need(SUB, name)


def _pub(request: Any) -> tuple[Need, ...]:
    return (_topic(PUB, real_name(request.topic)),)


def _send(request: Any) -> tuple[Need, ...]:
    if not request.messages:  # nothing to decide on (RocketMQ: "message is null")
        raise Refused(v2.BAD_REQUEST, "a send must carry at least one message")
    return tuple(dict.fromkeys(_topic(PUB, real_name(m.topic)) for m in request.messages))


def _consume(request: Any) -> tuple[Need, ...]:
    """``Sub`` on the group and on ``request.topic``."""
    return (_group(real_name(request.group)), _topic(SUB, real_name(request.topic)))


def _consume_queue(request: Any) -> tuple[Need, ...]:
    """``Sub`` on the group and on the topic of ``request.message_queue``."""
    return (_group(real_name(request.group)), _topic(SUB, real_name(request.message_queue.topic)))


def _route(request: Any) -> tuple[Need, ...]:
    return (_topic(ROUTE, real_name(request.topic)),)


def _queue_offset(request: Any) -> tuple[Need, ...]:
    return (_topic(GET_OR_SUB, real_name(request.message_queue.topic)),)


def _heartbeat(request: Any) -> tuple[Need, ...]:
    if request.client_type not in CONSUMER_TYPES:
        return ()
    return (_group(real_name(request.group)),)


def _termination(request: Any) -> tuple[Need, ...]:
    return (_group(real_name(request.group)),) if request.group.name else ()


def settings_needs(settings: v2.Settings) -> tuple[Need, ...]:
    """What a Telemetry settings command needs: ``Pub`` on the topics it publishes, ``Sub`` on
    its group and the topics it subscribes."""
    needs = [_topic(PUB, real_name(t)) for t in settings.publishing.topics]
    if settings.HasField("subscription"):
        subscription = settings.subscription
        if subscription.HasField("group"):
            needs.append(_group(real_name(subscription.group)))
        needs.extend(_topic(SUB, real_name(s.topic)) for s in subscription.subscriptions)
    return tuple(dict.fromkeys(needs))


def _telemetry(command: Any) -> tuple[Need, ...]:
    return settings_needs(command.settings) if command.HasField("settings") else ()


RULES: dict[str, NeedsOf] = {
    "QueryRoute": _route,
    "Heartbeat": _heartbeat,
    "SendMessage": _send,
    "QueryAssignment": _consume,
    "ReceiveMessage": _consume_queue,
    "AckMessage": _consume,
    "ForwardMessageToDeadLetterQueue": _consume,
    "PullMessage": _consume_queue,
    "UpdateOffset": _consume_queue,
    "GetOffset": _consume_queue,
    "QueryOffset": _queue_offset,
    "EndTransaction": _pub,
    "Telemetry": _telemetry,
    "NotifyClientTermination": _termination,
    "ChangeInvisibleDuration": _consume,
    "RecallMessage": _pub,
    "SyncLiteSubscription": _consume,
}
"""Method name of ``apache.rocketmq.v2.MessagingService`` → its needs, read from its request (a
Telemetry stream's: from each settings command). A unit test checks every method is here."""

MAY_NEED_NOTHING = frozenset({"Heartbeat", "NotifyClientTermination", "Telemetry"})
"""RPCs a producer makes naming no resource: any enabled user that authenticates may make them."""


@dataclass(slots=True)
class _Connection:
    cache: DecisionCache
    source_ip: IpAddress | None


@dataclass(frozen=True, slots=True)
class ProxyCaller:
    """An authenticated call: who, from where, under which tables."""

    user: User
    tables: AuthTables
    connection: _Connection
    rpc: str
    peer: str
    metadata: Any
    """The call's metadata: its request id is read from it only for an audit record."""


class ProxyGuard:
    """Authenticates and authorizes the v2 calls of one proxy.

    Args:
        provider: the current users and ACLs (a fixed table from the users file, or the tables
            synced from the brokers); read once per call.
        window_ms: how far a signed ``x-mq-date-time`` may be from the proxy's clock, beyond the
            time-zone slack the official clients need (they stamp local time as UTC).
        now_ms: the clock (injected for tests).
    """

    def __init__(
        self,
        provider: TablesProvider,
        *,
        window_ms: int,
        now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._provider = provider
        self._window_ms = window_ms + MQV2_ZONE_SLACK_MS
        self._now_ms = now_ms
        self._connections: dict[str, _Connection] = {}
        self._verified: dict[tuple[str, str], tuple[AuthTables, str, int | None]] = {}

    def check(self, rpc: str, request: Any, context: grpc.aio.ServicerContext) -> ProxyCaller:
        """Authenticate the call and authorize what ``request`` needs; raise :class:`Refused`."""
        caller = self.authenticate(rpc, context)
        self.authorize(caller, RULES[rpc](request))
        return caller

    def authenticate(self, rpc: str, context: grpc.aio.ServicerContext) -> ProxyCaller:
        """The caller of ``context``, or :class:`Refused` with ``UNAUTHORIZED`` (audited).

        The official clients sign with a date of one-second resolution, so a client's calls
        within a second carry the same ``authorization`` and ``x-mq-date-time``: once verified
        under the current tables, that pair is answered from a dictionary (its time still
        checked against the window), which halves the cost of a check. It admits nothing the
        HMAC would refuse: the same headers under the same secret give the same HMAC.
        """
        metadata = context.invocation_metadata() or ()
        tables = self._provider()
        peer = context.peer() or ""
        try:
            access_key = self._verify(metadata, tables)
        except SignatureError as error:
            request_id = _request_id(metadata)
            _audit(
                "authentication_failed",
                who=error.access_key or "anonymous",
                source=peer,
                rpc=rpc,
                request_id=request_id,
                reason=error.failure.value,
            )
            log.warning("refused v2 %s from %s: %s (request %s)", rpc, peer, error, request_id)
            message = f"authentication failed: {error}; {HINT} (request id {request_id})"
            raise Refused(v2.UNAUTHORIZED, message) from None
        user = tables.user(access_key)
        assert user is not None  # verify_mqv2 found its secret
        connection = self._connections.get(peer)
        if connection is None:
            connection = self._connection(peer)
        return ProxyCaller(user, tables, connection, rpc, peer, metadata)

    def renewed(self, caller: ProxyCaller) -> ProxyCaller:
        """``caller`` under the current tables: a Telemetry stream, authenticated once when it
        opened, lives as long as its client, and a user deleted or disabled since must not keep
        passing its settings checks. A deleted user is :class:`Refused` ``UNAUTHORIZED``."""
        tables = self._provider()
        if tables is caller.tables:
            return caller
        user = tables.user(caller.user.username)
        if user is None:
            request_id = _request_id(caller.metadata)
            _audit(
                "authentication_failed",
                who=caller.user.username,
                source=caller.peer,
                rpc=caller.rpc,
                request_id=request_id,
                reason=SignatureFailure.UNKNOWN_ACCESS_KEY.value,
            )
            message = (
                f"authentication failed: user {caller.user.username!r} no longer exists; {HINT} "
                f"(request id {request_id})"
            )
            raise Refused(v2.UNAUTHORIZED, message)
        return dataclasses.replace(caller, user=user, tables=tables)

    def authorize(self, caller: ProxyCaller, needs: Iterable[Need]) -> None:
        """Allow ``needs`` for ``caller`` or raise :class:`Refused` with ``FORBIDDEN`` (audited)."""
        needs = tuple(needs)
        if not needs and caller.rpc not in MAY_NEED_NOTHING:
            raise Refused(v2.BAD_REQUEST, f"{caller.rpc} names no topic or group to authorize")
        tables = caller.tables
        user = caller.user
        connection = caller.connection
        verdict = connection.cache.authorize(
            tables.version, user, tables.acl_of(user.username), needs, connection.source_ip
        )
        if verdict.allowed:
            return
        need = verdict.need
        action = "|".join(a.value for a in need.actions) if need is not None else ""
        resource = str(need.resource) if need is not None else ""
        request_id = _request_id(caller.metadata)
        _audit(
            "denied",
            who=user.username,
            source=caller.peer,
            rpc=caller.rpc,
            request_id=request_id,
            reason=verdict.reason,
            action=action,
            resource=resource,
            resource_type=need.resource.type.value if need is not None else "",
        )
        log.warning(
            "denied v2 %s to %s from %s: %s (request %s)",
            caller.rpc,
            user.username,
            caller.peer,
            verdict.reason,
            request_id,
        )
        message = (
            f"{user.username} may not {action} on {resource} ({caller.rpc}): {verdict.reason} "
            f"(request id {request_id})"
        )
        raise Refused(v2.FORBIDDEN, message)

    def _verify(self, metadata: Any, tables: AuthTables) -> str:
        authorization = date_time = None
        for key, value in metadata:
            if key == MQ_AUTHORIZATION_HEADER:
                authorization = value
            elif key == MQ_DATE_TIME_HEADER:
                date_time = value
        now_ms = self._now_ms()
        pair = (authorization, date_time)
        known = self._verified.get(pair)  # type: ignore[arg-type]
        if known is not None and known[0] is tables:
            signed_ms = known[2]
            if signed_ms is None or abs(signed_ms - now_ms) <= self._window_ms:
                return known[1]
        access_key = verify_mqv2(metadata, tables.secret_of, now_ms, self._window_ms)
        if isinstance(authorization, str) and isinstance(date_time, str):
            if len(self._verified) >= VERIFIED_SIGNATURES:
                self._verified.clear()
            self._verified[(authorization, date_time)] = (tables, access_key, mq_date_time_ms(date_time))
        return access_key

    def _connection(self, peer: str) -> _Connection:
        if len(self._connections) >= MAX_CONNECTIONS:
            del self._connections[next(iter(self._connections))]
        connection = self._connections[peer] = _Connection(DecisionCache(), source_ip_of(peer))
        return connection


def _request_id(metadata: Iterable[tuple[str, str | bytes]]) -> str:
    """The client's ``x-mq-request-id`` (the official clients send one per call), else a new one."""
    for key, value in metadata:
        if key == REQUEST_ID_HEADER:
            return value if isinstance(value, str) else value.decode("ascii", "replace")
    return uuid.uuid4().hex


def _audit(
    kind: audit.Kind, *, action: str = "", resource: str = "", resource_type: str = "", **fields: str
) -> None:
    try:
        audit.record(
            audit.AuditEvent(
                kind=kind,
                action=action,
                resource=resource,
                resource_type=resource_type,
                decision="Deny",
                **fields,  # type: ignore[arg-type]
            )
        )
    except Exception:  # an audit failure must not turn a refusal into an internal error
        log.exception("audit record failed")
