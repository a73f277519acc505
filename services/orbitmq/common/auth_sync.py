"""Users and ACLs kept in step with the brokers', for servers that check requests themselves.

Brokers store users and ACLs (:mod:`orbitmq.broker.auth_store`) and tell the name servers at every
registration (:mod:`orbitmq.nameserver.auth_tables`); proxies and sidecars, which authenticate
their own clients, ask a name server with :class:`SyncedTables`: ``GetAuthTables`` every
``interval_s`` with the version they hold, which costs one small round trip while nothing changed.
A user deleted with ``orbitmq admin user delete`` is refused by them within that interval plus
the broker's registration (milliseconds): 1 s by default.

Name servers hold the same tables (every broker registers with every one), so the first that
answers is asked until it fails; then the next. Until the first answer, or while none answers,
the tables are the last ones received (empty at first: only a bootstrap super user gets in), so
an outage of the name servers neither admits a deleted user nor refuses the users already known.
Nor does a name server behind the others: one just started answers SERVICE_NOT_AVAILABLE until a
broker registered its tables, and tables changed before those held are not taken.
The call needs a super user's credentials (it answers secrets) and a name server with auth on.

The tables cross the wire (registrations, ``GetAuthTables``) as :meth:`AuthTables.content_json`
under an ``AuthVersion`` (:func:`version_of`, :func:`stamp_of`, :func:`wire_tables`), secrets
included: that is what a server verifies signatures with. Give every server TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Callable
from typing import Any

import grpc
from pydantic import ValidationError

from orbitmq.auth.model import User, describe_errors
from orbitmq.auth.tables import AuthTables, Stamp, layered
from orbitmq.common.credentials import Credentials
from orbitmq.common.guard import with_bootstrap
from orbitmq.common.namesrv_list import parse_namesrv_list
from orbitmq.common.namesrv_stubs import NameServerStubs
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.common.tls import ClientTls, explain
from orbitmq.v1 import nameserver_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

log = logging.getLogger(__name__)

CALL_TIMEOUT_S = 3.0
"""How long one ``GetAuthTables`` waits before the next name server is tried."""
FAILURE_LOG_INTERVAL_S = 60.0
"""A failing name server list is logged again at most this often."""


def stamp_of(version: nameserver_pb2.AuthVersion) -> Stamp | None:
    """The stamp of a wire version; None when unset (an empty digest)."""
    return Stamp(version.changed_ms, version.digest) if version.digest else None


def version_of(stamp: Stamp | None) -> nameserver_pb2.AuthVersion:
    if stamp is None:
        return nameserver_pb2.AuthVersion()
    return nameserver_pb2.AuthVersion(changed_ms=stamp.changed_ms, digest=stamp.digest)


def wire_tables(raw: bytes, field: str) -> AuthTables:
    """Tables sent by another server (:meth:`AuthTables.content_json`); INVALID_ARGUMENT naming
    ``field`` and each rule broken otherwise."""
    try:
        return AuthTables.model_validate_json(raw)
    except ValidationError as error:
        raise RpcFailure(
            ErrorReason.INVALID_ARGUMENT, f"{field}: {'; '.join(describe_errors(error))}"
        ) from None


class SyncedTables:
    """A :data:`~orbitmq.common.guard.TablesProvider`: the users and ACLs the name servers hold.

    Calling it answers the current :class:`AuthTables` (one attribute read); their ``version``
    counts the tables received in this process, so decision caches drop their verdicts on each.

    Args:
        namesrv: the name servers, ``host:port;host:port``.
        tls: TLS toward them (None or no files: plaintext, then secrets cross the wire in clear).
        credentials: a super user of the brokers' tables (or a name server's bootstrap one).
        interval_s: how often to ask (the longest a deleted user is still let in).
    """

    def __init__(
        self, namesrv: str, tls: ClientTls | None, credentials: Credentials, interval_s: float = 1.0
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s {interval_s} must be more than 0")
        self._addresses = parse_namesrv_list(namesrv)
        self._tls = tls
        self._interval_s = interval_s
        self._tables = AuthTables()
        self._versions = itertools.count(1)
        self._known = nameserver_pb2.AuthVersion()
        self._current = 0
        """Index of the name server asked first."""
        self._stub = NameServerStubs(tls, credentials)
        self._task: asyncio.Task[None] | None = None
        self._failing_since: float | None = None
        self._logged_at = 0.0
        self.received = 0
        """How many times new tables arrived (0: none yet)."""

    def __call__(self) -> AuthTables:
        return self._tables

    async def start(self) -> None:
        """Ask once (not raising: a name server may be starting beside this process), then keep
        asking in the background."""
        if self._task is not None:
            return
        await self.refresh()
        self._task = asyncio.create_task(self._loop(), name="auth-sync")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._stub.close()

    async def refresh(self) -> bool:
        """One round: ask the name servers in turn until one answers; returns whether the tables
        changed. Failures are logged (once, then at most once a minute), never raised."""
        problems = []
        for step in range(len(self._addresses)):
            index = (self._current + step) % len(self._addresses)
            address = self._addresses[index]
            try:
                reply = await self._stub(address).GetAuthTables(
                    nameserver_pb2.GetAuthTablesRequest(known_version=self._known), timeout=CALL_TIMEOUT_S
                )
            except grpc.aio.AioRpcError as error:
                problems.append(await _describe(error, address, self._tls))
                continue
            self._current = index
            self._answered()
            return self._take(reply, address)
        self._failed("; ".join(problems))
        return False

    def _take(self, reply: nameserver_pb2.GetAuthTablesResponse, address: str) -> bool:
        if not reply.changed:
            return False
        if reply.version.changed_ms < self._known.changed_ms:  # a name server behind the others
            self._failed(
                f"{address} answered tables changed at {reply.version.changed_ms}, before the "
                f"{self._known.changed_ms} held: kept those"
            )
            return False
        try:
            received = wire_tables(reply.tables, f"GetAuthTables from {address}: tables")
        except RpcFailure as failure:  # a bad answer keeps the tables held: never fewer checks
            self._failed(failure.message)
            return False
        self._tables = AuthTables(
            version=next(self._versions),
            changed_ms=received.changed_ms,
            users=received.users,
            acls=received.acls,
        )
        self._known = version_of(stamp_of(reply.version))
        self.received += 1
        log.info(
            "users and ACLs from name server %s: %d users, %d ACLs, changed at %d",
            address,
            len(received.users),
            len(received.acls),
            received.changed_ms,
        )
        return True

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            try:
                await self.refresh()
            except Exception:  # keep syncing: stale tables are better than frozen ones
                log.exception("users and ACLs sync failed; retrying in %s s", self._interval_s)

    def _failed(self, detail: str) -> None:
        now = asyncio.get_running_loop().time()
        if self._failing_since is None:
            self._failing_since = self._logged_at = now
            log.warning(
                "cannot fetch users and ACLs from name servers %s: %s (keeping the %d users held; "
                "retried every %s s, logged again at most once a minute)",
                ";".join(self._addresses),
                detail,
                len(self._tables.users),
                self._interval_s,
            )
        elif now - self._logged_at >= FAILURE_LOG_INTERVAL_S:
            self._logged_at = now
            log.warning("still cannot fetch users and ACLs: %s", detail)

    def _answered(self) -> None:
        if self._failing_since is not None:
            log.info("users and ACLs fetched again from the name servers")
            self._failing_since = None


async def _describe(error: grpc.aio.AioRpcError, address: str, tls: ClientTls | None) -> str:
    refused = await explain(error, address, tls)
    if refused is not None:
        return str(refused)
    failure = failure_of(error)
    detail = failure.message if failure is not None else error.details()
    return f"{address}: {error.code().name}: {detail}"


def layered_provider(
    local: AuthTables, synced: Callable[[], AuthTables], bootstrap: User | None
) -> Callable[[], AuthTables]:
    """A provider answering ``local``'s users (a users file) with ``synced``'s over them and the
    bootstrap super user added unless a layer has the name; merged again only when ``synced``
    answers new tables, under a version that grows each time."""
    versions = itertools.count(1)
    last: list[Any] = [None, None]

    def tables() -> AuthTables:
        current = synced()
        if current is not last[0]:
            last[0], last[1] = current, with_bootstrap(layered((local, current), next(versions)), bootstrap)
        return last[1]  # type: ignore[no-any-return]

    return tables
