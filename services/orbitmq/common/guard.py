"""Authentication and authorization enforced in a server: who calls, and may they.

:class:`Guard` wraps each handler of a :class:`~orbitmq.common.server.GrpcServer` once, at
registration (not as a ``grpc.aio`` server interceptor: those cost every call of every service
an extra layer of Python, see :func:`orbitmq.common.rpc.error_mapping_registrar`), and a server
with auth off registers no wrapper at all. For each call it

1. verifies the ``x-orbitmq-*`` signature (:func:`orbitmq.auth.signature.verify_v1`) against the
   secret of the access key in the server's :class:`~orbitmq.auth.tables.AuthTables`;
2. finds what the RPC needs from its request (:func:`orbitmq.auth.rpcs.needs_of`; a client
   stream's from its first message) and decides it with the connection's
   :class:`~orbitmq.auth.decide.DecisionCache` (a connection has one user and one address: the
   same topic's next send is a dictionary hit until users or ACLs change).

A handler that gets its request as bytes (the broker's ``SendMessage``, whose C path never
builds a protobuf) is authenticated here and authorized by the servicer once it has read the
topic: :func:`authorize_deferred`. So are needs only the servicer can find (the stored message's
topic of ``EndTransaction``). Both read the call's :class:`Caller` from a context variable, None
when auth is off, so the check costs a servers with auth off one lookup.

Refusals are :class:`~orbitmq.common.rpc.RpcFailure`: a failed authentication has reason
``UNAUTHENTICATED`` and is answered with gRPC's UNAUTHENTICATED (``auth=authentication`` in the
ErrorInfo), a denial has ``NO_PERMISSION`` and PERMISSION_DENIED (``auth=authorization``); both
name the user, the action and the resource, never a secret, and the request id (the client's
``x-orbitmq-request-id``, else one made here) that finds its audit record
(:func:`orbitmq.auth.audit.record`).
"""

from __future__ import annotations

import contextvars
import ipaddress
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from orbitmq.auth import audit
from orbitmq.auth.decide import DecisionCache, IpAddress, Need, Verdict
from orbitmq.auth.model import Action, User, UserType, describe_errors
from orbitmq.auth.rpcs import RULES, RpcContext, RpcRule, topic_need
from orbitmq.auth.signature import DEFAULT_WINDOW_MS, SignatureError, verify_v1
from orbitmq.auth.tables import AuthTables
from orbitmq.common.credentials import REQUEST_ID_HEADER
from orbitmq.common.errors import OrbitError
from orbitmq.common.rpc import RpcFailure
from orbitmq.v1.broker_pb2 import ErrorReason

log = logging.getLogger(__name__)

TablesProvider = Callable[[], AuthTables]
"""The users and ACLs a server checks against, asked on every call (so it must be cheap: a
property that answers the current tables)."""

MAX_CONNECTIONS = 10_000
"""Connections whose decision caches are kept; the oldest is dropped beyond (a client that
reconnects rebuilds its cache in a few calls)."""

CREDENTIALS_HINT = "sign with --access-key/--secret-key or ORBITMQ_ACCESS_KEY/ORBITMQ_SECRET_KEY"


class ServerAuth(BaseModel):
    """Auth settings of a serving process, mixed into its settings (``--auth-enabled``,
    ``ORBITMQ_BROKER_AUTH_ENABLED``, a config file's ``auth_enabled`` all work). Off by default.

    The bootstrap super user is RocketMQ's ``initAuthenticationUser``: the one user that exists
    before any is stored, so that the first users and ACLs can be created, and brokers sign
    their own calls (registration, replication) with it.
    """

    auth_enabled: bool = False
    auth_super_user: str | None = None
    auth_super_secret: str | None = Field(default=None, repr=False)
    auth_window_ms: int = Field(default=DEFAULT_WINDOW_MS, ge=1_000)
    """How far a signed date may be from this server's clock: a captured request replayed
    later than this is refused."""

    @model_validator(mode="after")
    def _check_bootstrap(self) -> ServerAuth:
        if (self.auth_super_user is None) != (self.auth_super_secret is None):
            given = "auth_super_user" if self.auth_super_user is not None else "auth_super_secret"
            raise ValueError(
                f"{given} is set without its pair: set both auth_super_user and auth_super_secret"
            )
        if self.auth_enabled and self.auth_super_user is None:
            raise ValueError(
                "auth_enabled needs a bootstrap super user: set auth_super_user and auth_super_secret"
            )
        if self.auth_super_user is not None:
            self.bootstrap_user()  # the username and secret rules, named at start-up
        return self

    def bootstrap_user(self) -> User | None:
        if self.auth_super_user is None or self.auth_super_secret is None:
            return None
        return User(username=self.auth_super_user, password=self.auth_super_secret, user_type=UserType.SUPER)


class AuthUsersError(OrbitError):
    """A users file that cannot be used; the message names the file, the field and the rule."""


def load_users_file(path: Path) -> AuthTables:
    """``{"users": [...], "acls": [...]}`` (YAML or JSON, RocketMQ's ACL 2.0 documents) as tables."""
    try:
        data = yaml.safe_load(path.expanduser().read_text()) or {}
    except OSError as error:
        raise AuthUsersError(f"cannot read auth users file {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise AuthUsersError(f"auth users file {path} is not valid YAML/JSON: {error}") from None
    if not isinstance(data, dict):
        raise AuthUsersError(f"auth users file {path} must hold a mapping with 'users' and 'acls'")
    try:
        return AuthTables(users=tuple(data.get("users") or ()), acls=tuple(data.get("acls") or ()))
    except ValidationError as error:
        raise AuthUsersError(f"auth users file {path}: {'; '.join(describe_errors(error))}") from None


class UsersFileAuth(ServerAuth):
    """:class:`ServerAuth` of a server that keeps no users itself (name server, sidecar, proxy):
    besides the bootstrap super user, the users of ``auth_users_file``."""

    auth_users_file: Path | None = None
    """YAML/JSON ``{"users": [...], "acls": [...]}`` (RocketMQ ACL 2.0 documents) checked with auth
    on, besides the brokers' users (a username both have is the brokers') and the bootstrap super
    user; read at start, so a bad file is refused there, naming the file, the field and the rule."""

    @field_validator("auth_users_file")
    @classmethod
    def _check_users_file(cls, value: Path | None) -> Path | None:
        if value is not None:
            try:
                load_users_file(value)
            except AuthUsersError as error:
                raise ValueError(str(error)) from None
        return value


class SyncedAuth(UsersFileAuth):
    """:class:`UsersFileAuth` of a server that also takes the users stored on the brokers from the
    name servers (:class:`~orbitmq.common.auth_sync.SyncedTables`): sidecars and proxies."""

    auth_sync_interval_ms: int = Field(default=1_000, ge=100)
    """With auth on, how often the users and ACLs stored on the brokers are fetched from the name
    servers (as this server's own cluster user, which must be a super user there): the longest a
    deleted user keeps getting in. They are layered over ``auth_users_file``'s."""


def with_bootstrap(tables: AuthTables, user: User | None) -> AuthTables:
    """``tables`` plus the bootstrap super user (stored users of the same name win)."""
    if user is None or tables.user(user.username) is not None:
        return tables
    return AuthTables(version=tables.version, users=(*tables.users, user), acls=tables.acls)


def bootstrapped(provider: TablesProvider, user: User | None) -> TablesProvider:
    """A provider answering ``provider``'s tables with the bootstrap user added, merged once per
    tables object (the stored tables are replaced whole when they change)."""
    last: list[Any] = [None, None]

    def tables() -> AuthTables:
        current = provider()
        if current is not last[0]:
            last[0], last[1] = current, with_bootstrap(current, user)
        return last[1]  # type: ignore[no-any-return]

    return tables


def fixed(tables: AuthTables) -> TablesProvider:
    return lambda: tables


# -- failures ---------------------------------------------------------------------------------


class AuthenticationFailure(RpcFailure):
    """UNAUTHENTICATED answered as gRPC's UNAUTHENTICATED, ``auth=authentication`` in its ErrorInfo."""

    def __init__(self, message: str) -> None:
        super().__init__(ErrorReason.UNAUTHENTICATED, message, auth="authentication")

    @property
    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAUTHENTICATED


def _denied(message: str) -> RpcFailure:
    return RpcFailure(ErrorReason.NO_PERMISSION, message, auth="authorization")


def _audit(**fields: str) -> None:
    try:
        audit.record(audit.AuditEvent(**fields))  # type: ignore[arg-type]
    except Exception:  # an audit failure must not turn a refusal into an internal error
        log.exception("audit record failed")


def request_id_of(context: grpc.aio.ServicerContext) -> str:
    """The call's ``x-orbitmq-request-id``, or a new random id (a client that sends none): read
    only when something is audited, never on an allowed call."""
    for key, value in context.invocation_metadata() or ():
        if key == REQUEST_ID_HEADER:
            return value if isinstance(value, str) else value.decode(errors="replace")
    return uuid.uuid4().hex[:16]


def audit_denial(
    context: grpc.aio.ServicerContext, rpc: str, action: str, resource: str, resource_type: str, reason: str
) -> str:
    """Audit a denial a servicer decides itself (after the guard allowed the RPC); returns the
    request id it was recorded under."""
    user = current_user()
    request_id = request_id_of(context)
    _audit(
        kind="denied",
        who=user.username if user is not None else "",
        source=context.peer(),
        action=action,
        resource=resource,
        resource_type=resource_type,
        decision="Deny",
        request_id=request_id,
        rpc=rpc,
        reason=reason,
    )
    return request_id


# -- the per-call check -----------------------------------------------------------------------


@dataclass(slots=True)
class _Connection:
    cache: DecisionCache
    source_ip: IpAddress | None


@dataclass(slots=True)
class Caller:
    """Who makes the current call, for checks the servicer makes (:func:`authorize_deferred`)."""

    guard: Guard
    user: User
    tables: AuthTables
    connection: _Connection
    method: str
    peer: str
    context: grpc.aio.ServicerContext
    needs_checked: list[Need] = field(default_factory=list)


_CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("orbitmq_caller", default=None)


def authorize_deferred(*needs: Need) -> None:
    """Authorize ``needs`` for the current call (a no-op with auth off); raise a NO_PERMISSION
    :class:`RpcFailure` naming the user, action and resource when one is denied."""
    caller = _CALLER.get()
    if caller is not None:
        caller.guard.authorize(caller, needs)


def source_ip_of(peer: str) -> IpAddress | None:
    """``ipv4:10.0.0.1:5000`` / ``ipv6:[::1]:5000`` → the address; None for others (Unix sockets)."""
    kind, _, rest = peer.partition(":")
    if kind not in ("ipv4", "ipv6"):
        return None
    host = rest.rpartition(":")[0].strip("[]")
    try:
        return ipaddress.ip_address(host.partition("%")[0])
    except ValueError:
        return None


class Guard:
    def __init__(
        self,
        provider: TablesProvider,
        rpc_context: RpcContext,
        *,
        window_ms: int = DEFAULT_WINDOW_MS,
        now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        hint: str = CREDENTIALS_HINT,
    ) -> None:
        """``hint``: how a refused caller signs (ends every authentication failure's message)."""
        self._hint = hint
        self._provider = provider
        self._rpc_context = rpc_context
        self._window_ms = window_ms
        self._now_ms = now_ms
        self._connections: dict[str, _Connection] = {}
        self.refusals = 0

    # -- registration --

    def wrap(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        """``handler`` checked on every call; a method without a rule (health, reflection) as is."""
        rule = RULES.get(method)
        if rule is None:
            return handler
        if handler.unary_unary is not None:
            return self._wrap_unary(handler, method, rule)
        if handler.stream_stream is not None:
            return self._wrap_stream(handler, method, rule)
        raise TypeError(f"{method}: the guard checks unary and bidirectional RPCs only")

    def _wrap_unary(
        self, handler: grpc.RpcMethodHandler, method: str, rule: RpcRule
    ) -> grpc.RpcMethodHandler:
        inner = handler.unary_unary
        raw = getattr(inner, "takes_request_bytes", False)
        needs_of = rule.needs
        rpc_context = self._rpc_context

        async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
            caller = self.authenticate(context, method)
            if not raw:
                self.authorize(caller, needs_of(request, rpc_context), may_need_nothing=rule.may_need_nothing)
            token = _CALLER.set(caller)
            try:
                return await inner(request, context)
            finally:
                _CALLER.reset(token)

        _copy_marks(inner, unary_unary)
        return handler._replace(unary_unary=unary_unary)

    def _wrap_stream(
        self, handler: grpc.RpcMethodHandler, method: str, rule: RpcRule
    ) -> grpc.RpcMethodHandler:
        inner = handler.stream_stream
        rpc_context = self._rpc_context

        async def stream_stream(requests: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            caller = self.authenticate(context, method)
            iterator = requests.__aiter__()
            try:
                first = await iterator.__anext__()
            except StopAsyncIteration:
                return
            self.authorize(caller, rule.needs(first, rpc_context), may_need_nothing=rule.may_need_nothing)

            async def replay() -> AsyncIterator[Any]:
                yield first
                async for request in iterator:
                    yield request

            _CALLER.set(caller)
            async for response in inner(replay(), context):
                yield response

        _copy_marks(inner, stream_stream)
        return handler._replace(stream_stream=stream_stream)

    # -- checks --

    def authenticate(self, context: grpc.aio.ServicerContext, method: str) -> Caller:
        tables = self._provider()
        peer = context.peer()
        try:
            access_key = verify_v1(
                context.invocation_metadata() or (),
                method,
                tables.secret_of,
                self._now_ms(),
                self._window_ms,
            )
        except SignatureError as error:
            self.refusals += 1
            request_id = request_id_of(context)
            _audit(
                kind="authentication_failed",
                who=error.access_key or "anonymous",
                source=peer,
                action="",
                resource="",
                resource_type="",
                decision="Deny",
                request_id=request_id,
                rpc=method,
                reason=error.failure.value,
            )
            log.warning("refused %s from %s: %s (request %s)", method, peer, error, request_id)
            raise AuthenticationFailure(
                f"authentication failed: {error}; {self._hint} (request id {request_id})"
            ) from None
        user = tables.user(access_key)
        assert user is not None  # verify_v1 found its secret
        connection = self._connections.get(peer)
        if connection is None:
            connection = self._connection(peer)
        return Caller(self, user, tables, connection, method, peer, context)

    def _connection(self, peer: str) -> _Connection:
        if len(self._connections) >= MAX_CONNECTIONS:
            del self._connections[next(iter(self._connections))]
        connection = self._connections[peer] = _Connection(DecisionCache(), source_ip_of(peer))
        return connection

    def authorize(self, caller: Caller, needs: tuple[Need, ...], *, may_need_nothing: bool = True) -> None:
        if not needs and not may_need_nothing:
            return  # the servicer decides what it finds (authorize_deferred)
        tables = caller.tables
        user = caller.user
        verdict: Verdict = caller.connection.cache.authorize(
            tables.version, user, tables.acl_of(user.username), needs, caller.connection.source_ip
        )
        if verdict.allowed:
            return
        self.refusals += 1
        need = verdict.need
        action = "|".join(a.value for a in need.actions) if need is not None else ""
        resource = str(need.resource) if need is not None else ""
        request_id = request_id_of(caller.context)
        _audit(
            kind="denied",
            who=user.username,
            source=caller.peer,
            action=action,
            resource=resource,
            resource_type=need.resource.type.value if need is not None else "",
            decision="Deny",
            request_id=request_id,
            rpc=caller.method,
            reason=verdict.reason,
        )
        log.warning(
            "denied %s to %s from %s: %s (request %s)",
            caller.method,
            user.username,
            caller.peer,
            verdict.reason,
            request_id,
        )
        raise _denied(
            f"{user.username} may not {action} on {resource} ({caller.method.rpartition('/')[2]}): "
            f"{verdict.reason} (request id {request_id})"
        )


def _copy_marks(source: Any, target: Any) -> None:
    """Keep the marks :func:`orbitmq.common.rpc.with_error_mapping` reads off a handler."""
    for mark in ("takes_request_bytes", "returns_reply_bytes"):
        if getattr(source, mark, False):
            setattr(target, mark, True)


NAMESRV_CLUSTER = "DefaultCluster"
"""The cluster a sidecar's cluster-wide RPCs act on (its requests do not name one)."""


def namesrv_guard(settings: Any, provider: TablesProvider | None = None) -> Guard | None:
    """A name server's guard (None with auth off), deciding with ``provider``'s tables (the
    brokers' users over its users file, :class:`~orbitmq.nameserver.auth_tables.ClusterAuthTables`);
    without one, the bootstrap super user and the users of ``auth_users_file``."""
    if not settings.auth_enabled:
        return None
    if provider is None:
        tables = load_users_file(settings.auth_users_file) if settings.auth_users_file else AuthTables()
        provider = fixed(with_bootstrap(tables, settings.bootstrap_user()))
    return Guard(provider, RpcContext(settings.cluster), window_ms=settings.auth_window_ms)


def sidecar_guard(settings: Any, synced: TablesProvider | None = None) -> Guard | None:
    """A sidecar's guard toward its applications (None with auth off): the users of
    ``auth_users_file``, the brokers' users over them when ``synced``
    (:class:`~orbitmq.common.auth_sync.SyncedTables`), and the bootstrap super user; its RPCs act
    on its group and subscribed topics."""
    if not settings.auth_enabled:
        return None
    tables = load_users_file(settings.auth_users_file) if settings.auth_users_file else AuthTables()
    if synced is None:
        provider = fixed(with_bootstrap(tables, settings.bootstrap_user()))
    else:
        from orbitmq.common.auth_sync import layered_provider  # auth_sync imports this module

        provider = layered_provider(tables, synced, settings.bootstrap_user())
    context = RpcContext(NAMESRV_CLUSTER, settings.group, tuple(spec.topic for spec in settings.specs))
    hint = "sign with SidecarClient(address, credentials=Credentials(access_key, secret_key))"
    return Guard(provider, context, window_ms=settings.auth_window_ms, hint=hint)


_NO_TABLES = AuthTables()


def broker_guard(broker: Any) -> Guard | None:
    """A broker's guard (None with auth off): the stored users and ACLs (``broker.auth_store``,
    once it exists) and the bootstrap super user."""
    settings = broker.settings
    if not settings.auth_enabled:
        return None

    def stored() -> AuthTables:
        store = getattr(broker, "auth_store", None)
        return store.tables if store is not None else _NO_TABLES

    provider = bootstrapped(stored, settings.bootstrap_user())
    return Guard(provider, RpcContext(settings.cluster), window_ms=settings.auth_window_ms)


def authorize_topic_deferred(actions: tuple[Action, ...], topic: str) -> None:
    """:func:`authorize_deferred` of ``actions`` on ``topic``, the need built only when auth is
    on (a send with auth off pays one context-variable lookup)."""
    caller = _CALLER.get()
    if caller is not None:
        key = (actions, topic)
        needs = _TOPIC_NEEDS.get(key)
        if needs is None:
            if len(_TOPIC_NEEDS) >= MAX_CONNECTIONS:
                _TOPIC_NEEDS.clear()
            needs = _TOPIC_NEEDS[key] = (topic_need(actions, topic),)
        caller.guard.authorize(caller, needs)


_TOPIC_NEEDS: dict[tuple[tuple[Action, ...], str], tuple[Need, ...]] = {}
"""Needs built once per topic (a send's topic name is parsed into a resource otherwise)."""


def auth_active() -> bool:
    """Whether the current call is being checked (a servicer looks up what a need names, e.g. a
    half message's topic, only then)."""
    return _CALLER.get() is not None


def current_user() -> User | None:
    """The authenticated user of the current call (None with auth off), for servicers that
    decide more than :mod:`orbitmq.auth.rpcs` says (who may change a super user)."""
    caller = _CALLER.get()
    return caller.user if caller is not None else None
