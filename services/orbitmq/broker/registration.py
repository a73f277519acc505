"""A broker's registration with its name servers: one independent loop per name server.

Name servers never talk to each other, so the broker tells each one itself (RocketMQ's
``registerBrokerAll``). Each name server gets its own guarded loop: a registration to a hung
one (it accepts the connection and never answers) waits out its own timeout while the others
are told at once, and the next round with a healthy one never waits for the hung one.

Nothing a client asks of the broker waits for a registration: a topic change, a retry topic
made by a heartbeat, or a role change is answered once it is held locally, and
:meth:`Registrar.request` wakes every loop to register now. A name server that stops answering
is logged once, then at most once a minute (:class:`FailureLog`), however often it is retried.

A broker with auth on also tells each name server its users and ACLs
(:mod:`orbitmq.nameserver.auth_tables`): every registration carries their stamp, and the tables
themselves go only to a name server whose last answer showed it takes them and holds an older
stamp for the cluster (it restarted, or the tables changed). An answer showing that is followed
by a registration with the tables at once, so a user deleted on the brokers is refused by the
name servers within one round trip of the change (the store's change requests a registration).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import grpc

from orbitmq.auth.tables import AuthTables, Stamp
from orbitmq.common.clock import Clock
from orbitmq.common.credentials import Credentials
from orbitmq.common.namesrv_stubs import NameServerStubs
from orbitmq.common.server import StartupError
from orbitmq.common.tasks import TaskSet
from orbitmq.common.tls import TlsFiles, explain
from orbitmq.v1 import nameserver_pb2

log = logging.getLogger(__name__)

REGISTER_TIMEOUT_S = 5.0
"""How long one registration waits for a name server's answer."""
UNREGISTER_TIMEOUT_S = 2.0
"""How long a leaving broker waits for each name server (all at once) to forget it."""
UNSETTLED_REGISTER_S = 1.0
"""Registration retry period while a name server's last round was incomplete (see
:meth:`Registrar._register_loop`)."""
START_GRACE_S = 1.0
"""At start-up, how long after one name server answered the broker waits for the others."""
FAILURE_LOG_INTERVAL_MS = 60_000
"""A name server that keeps failing is logged again at most this often."""


class FailureLog:
    """Logs one name server's registration failures once, then at most once per interval,
    and its return once (pure: the clock is injected)."""

    def __init__(self, address: str, clock: Clock, interval_ms: int = FAILURE_LOG_INTERVAL_MS) -> None:
        self.address = address
        self._clock = clock
        self._interval_ms = interval_ms
        self.failures = 0
        """Failed registrations since the last answer."""
        self._since_ms = 0
        self._logged_ms = 0

    def failed(self, detail: str) -> None:
        now = self._clock.now_ms()
        self.failures += 1
        if self.failures == 1:
            self._since_ms = self._logged_ms = now
            log.warning(
                "registration with name server %s failed: %s (retried every second; logged again "
                "at most once a minute while it fails)",
                self.address,
                detail,
            )
            return
        if now - self._logged_ms >= self._interval_ms:
            log.warning(
                "registration with name server %s still failing: %d attempts over %d s, last: %s",
                self.address,
                self.failures,
                (now - self._since_ms) // 1000,
                detail,
            )
            self._logged_ms = now

    def answered(self) -> None:
        if self.failures:
            log.info(
                "registration with name server %s works again after %d failed attempts over %d s",
                self.address,
                self.failures,
                (self._clock.now_ms() - self._since_ms) // 1000,
            )
        self.failures = 0


class Registrar:
    """Registers a broker with each name server of ``addresses``, independently.

    Args:
        addresses: the name servers, ``host:port``.
        build_request: the registration as of now (topics, role, epoch); called for every
            attempt, so a registration always carries the latest state.
        on_reply: told each answer (a slave learns its master from it).
        is_waiting: whether the broker still waits for something only a registration brings
            (a slave without a known master): registers every :data:`UNSETTLED_REGISTER_S`.
        interval_s: the heartbeat period in seconds (``register_interval_ms``).
        clock: for the failure log's pacing.
        tls: the broker's TLS files: name servers are called over TLS when any is set.
        credentials: what every registration is signed with (the bootstrap super user), if any.
        auth: the broker's users and ACLs as of now (a broker with auth on); None: none sent.
    """

    def __init__(
        self,
        addresses: list[str],
        *,
        build_request: Callable[[], nameserver_pb2.RegisterBrokerRequest],
        on_reply: Callable[[nameserver_pb2.RegisterBrokerResponse], None],
        is_waiting: Callable[[], bool],
        interval_s: float,
        clock: Clock,
        owner: str,
        tls: TlsFiles | None = None,
        credentials: Credentials | None = None,
        auth: Callable[[], AuthTables] | None = None,
    ) -> None:
        self.addresses = addresses
        self._auth = auth
        self._held: dict[str, Stamp | None] = {}
        """Name servers that take auth tables → the stamp each last said it holds."""
        self._plaintext_warned = False
        self._behind_warned: Stamp | None = None
        self._tls = tls
        self._refused: dict[str, str] = {}
        """Name servers whose last registration failed its TLS handshake, with the cause."""
        self._build_request = build_request
        self._on_reply = on_reply
        self._is_waiting = is_waiting
        self._interval_s = interval_s
        self._stub = NameServerStubs(tls, credentials)
        self._due = {address: asyncio.Event() for address in addresses}
        self._answered = dict.fromkeys(addresses, False)
        self._failures = {address: FailureLog(address, clock) for address in addresses}
        self._tasks = TaskSet(f"register:{owner}")

    def request(self) -> None:
        """Register with every name server now, in the background (topics or role changed)."""
        for due in self._due.values():
            due.set()

    async def register_at_start(self) -> None:
        """One registration with every name server at once, before the broker says it is up
        (so it is routable by then).

        A name server that has not answered :data:`START_GRACE_S` after another one did is
        left to its loop: a hung one must not hold up the start. One that answers but is not
        a name server (a broker's port, say) stops the start: a mistake in the settings, not
        an outage to wait out. Nor does one that refuses the TLS handshake (a wrong CA, an
        expired certificate, plaintext on one side): the error names the cause."""
        loop = asyncio.get_running_loop()
        attempts = {asyncio.ensure_future(self._register(a, refuse_wrong=True)): a for a in self.addresses}
        pending = set(attempts)
        deadline: float | None = None
        try:
            while pending:
                wait_s = None if deadline is None else max(0.0, deadline - loop.time())
                done, pending = await asyncio.wait(
                    pending, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    break  # the others answered a while ago: the stragglers' loops go on
                if deadline is None and any(task.result() for task in done):
                    deadline = loop.time() + START_GRACE_S
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        wrong = [a for task, a in attempts.items() if not task.cancelled() and task.result() is None]
        if wrong:
            raise StartupError(_not_a_name_server(wrong))
        refused = [
            self._refused[a] for task, a in attempts.items() if not task.cancelled() and a in self._refused
        ]
        if refused:
            raise StartupError(f"cannot register with name servers: {'; '.join(refused)}")

    def start(self) -> None:
        """Start the loops, one per name server."""
        for address in self.addresses:
            self._tasks.spawn(address, self._register_loop(address))

    async def unregister(self, request: nameserver_pb2.UnregisterBrokerRequest) -> None:
        """Stop registering, then tell every name server at once that this broker leaves
        (bounded by the timeout): a registration still on its way must not bring it back."""
        await self._tasks.close()

        async def one(address: str) -> None:
            try:
                await self._stub(address).UnregisterBroker(request, timeout=UNREGISTER_TIMEOUT_S)
            except grpc.aio.AioRpcError as error:
                log.warning("unregistering from name server %s failed: %s", address, error.details())

        await asyncio.gather(*(one(a) for a in self.addresses))

    async def close(self) -> None:
        await self._tasks.close()
        await self._stub.close()

    async def _register_loop(self, address: str) -> None:
        """Register every interval (the heartbeat), and at once when :meth:`request` asks.

        Every :data:`UNSETTLED_REGISTER_S` instead while this name server's last round failed
        (it may be starting beside this broker) or the broker waits for a registration's
        answer (a slave that has not learnt its master): waiting a whole interval there kept
        a new broker group unwritable for half a minute."""
        due = self._due[address]
        while True:
            interval = self._interval_s
            if not self._answered[address] or self._is_waiting():
                interval = min(interval, UNSETTLED_REGISTER_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(due.wait(), interval)
            due.clear()
            await self._register(address)

    async def _register(self, address: str, *, refuse_wrong: bool = False) -> bool | None:
        """One registration; True when it answered, False when it did not, None when the
        address is not a name server (logged, unless ``refuse_wrong``: the caller raises)."""
        try:
            request = self._build_request()
            sent = self._add_auth(address, request)
            reply = await self._stub(address).RegisterBroker(request, timeout=REGISTER_TIMEOUT_S)
        except grpc.aio.AioRpcError as error:
            self._answered[address] = False
            if error.code() is grpc.StatusCode.UNIMPLEMENTED:
                if not refuse_wrong:
                    self._failures[address].failed(_not_a_name_server([address]))
                return None
            refused = await explain(error, address, self._tls)
            if refused is not None:
                self._refused[address] = str(refused)
                self._failures[address].failed(str(refused))
                return False
            self._failures[address].failed(f"{error.code().name}: {error.details()}")
            return False
        self._refused.pop(address, None)
        self._answered[address] = True
        self._failures[address].answered()
        self._auth_answered(address, reply, sent)
        self._on_reply(reply)
        return True

    def _add_auth(self, address: str, request: nameserver_pb2.RegisterBrokerRequest) -> bool:
        """Put the auth stamp on ``request``, and the tables when ``address`` lacks them;
        returns whether the tables were added."""
        if self._auth is None:
            return False
        tables = self._auth()
        stamp = tables.stamp
        request.auth_version.changed_ms, request.auth_version.digest = stamp
        if address not in self._held or not _older(self._held[address], stamp):
            return False
        if self._tls is None or not self._tls.client_enabled:
            self._warn_plaintext()
        request.auth_tables = tables.content_json()
        return True

    def _auth_answered(self, address: str, reply: nameserver_pb2.RegisterBrokerResponse, sent: bool) -> None:
        """Note what ``address`` holds; register again at once with the tables when it lacks
        them and they were not just sent (it restarted, or this was the first registration)."""
        if self._auth is None:
            return
        if not reply.takes_auth_tables:
            self._held.pop(address, None)
            return
        held = (
            Stamp(reply.auth_version.changed_ms, reply.auth_version.digest)
            if reply.auth_version.digest
            else None
        )
        self._held[address] = held
        ours = self._auth().stamp
        if not sent and _older(held, ours):
            self._due[address].set()
        elif held is not None and held > ours and held.digest != ours.digest:
            self._warn_behind(address, held, ours)

    def _warn_behind(self, address: str, held: Stamp, ours: Stamp) -> None:
        """Another broker group's tables are newer: a change made while this one was down (or
        refused here) never reached it, and it still enforces the old users. Logged once per
        newer version: an operator re-applies the change (or copies auth.json)."""
        if self._behind_warned == held:
            return
        self._behind_warned = held
        log.warning(
            "this broker's users and ACLs (changed at %d) are older than the cluster's newest that "
            "name server %s holds (changed at %d by another broker group): a change made while this "
            "broker was down did not reach it; re-apply it with 'orbitmq admin user|acl'",
            ours.changed_ms,
            address,
            held.changed_ms,
        )

    def _warn_plaintext(self) -> None:
        if not self._plaintext_warned:
            self._plaintext_warned = True
            log.warning(
                "sending users and ACLs (secrets included) to name servers without TLS: "
                "set --tls-ca (and the name servers' --tls-cert/--tls-key) to encrypt them"
            )


def _older(held: Stamp | None, ours: Stamp) -> bool:
    return held is None or held < ours


def _not_a_name_server(addresses: list[str]) -> str:
    return (
        f"name server address {', '.join(addresses)} is not a name server (it does not serve "
        "orbitmq.v1.NameServer; a broker's port?); check --namesrv / ORBITMQ_NAMESRV"
    )
