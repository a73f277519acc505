"""gRPC channels to name servers and brokers, one per address, shared by a client's parts.

Channels speak TLS when the client's :class:`~orbitmq.common.tls.ClientTls` has a CA or a
certificate (read from ``ORBITMQ_TLS_*`` unless one is given), plaintext otherwise. A name-server
call refused at the TLS layer raises :class:`~orbitmq.common.tls.TlsError` naming the cause at
once: another name server, or waiting, would fail the same way.

A channel keeps the CA and certificate it was opened with for every connection it makes, also
when it reconnects. So a long-lived client whose CA bundle was replaced on disk (a rotated
Secret: the old and the new CA) would still refuse servers that moved to the new CA. Channels
therefore note the state of the TLS files (size, time, inode) when they open one, and a call
refused at the handshake after the files changed opens the channel again with them
(:meth:`Channels.renew_if_rotated`) instead of naming a cause that no longer holds.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import grpc

from orbitmq.common.credentials import Credentials, signed
from orbitmq.common.namesrv_list import NAMESRV_ENV, parse_namesrv_list
from orbitmq.common.rpc import RpcFailure
from orbitmq.common.server import GRPC_OPTIONS
from orbitmq.common.tls import ClientTls, TlsError, explain, may_be_handshake, open_channel
from orbitmq.v1 import broker_pb2_grpc, nameserver_pb2_grpc
from orbitmq.v1.broker_pb2 import ErrorReason

log = logging.getLogger(__name__)

DEFAULT_NAMESRV = "127.0.0.1:9876"

HEDGE_DELAY_S = 0.25
"""How long a name-server call waits for one name server before asking the next one too: far
above a live one's answer (milliseconds, tens on a loaded machine), far below a timeout."""

FRESH_CHANNEL_OPTIONS = [*GRPC_OPTIONS, ("grpc.use_local_subchannel_pool", 1)]
"""Options of a channel that must open its own connection: gRPC shares connections (and their
reconnect backoff) between channels to one address, so a new channel to a server that was down
would otherwise wait as long as the old one before it tries to connect."""

RETIRE_GRACE_S = 60.0
"""How long calls already on a channel replaced by :meth:`Channels.reconnect` may go on (a
send's budget and a long-polling pull fit) before it is closed."""

_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
"""Codes that say nothing answered at that address, so another name server may."""


class Channels:
    def __init__(
        self,
        namesrv: str | list[str] | None = None,
        tls: ClientTls | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        """``namesrv``: ``"host:port;host:port"`` (``,`` works too) or a list; None reads
        ``ORBITMQ_NAMESRV``, then the local default ``127.0.0.1:9876``. A malformed list raises
        :class:`~orbitmq.common.namesrv_list.NamesrvListError`. ``tls``: None reads
        ``ORBITMQ_TLS_CA``/``_CERT``/``_KEY``/``_SERVER_NAME`` (a bad one raises
        :class:`~orbitmq.common.tls.TlsConfigError`); none set is plaintext. ``credentials``:
        every call is signed with them (servers with auth on need it); None reads
        ``ORBITMQ_ACCESS_KEY``/``ORBITMQ_SECRET_KEY``, neither set signs nothing."""
        self.tls = tls if tls is not None else ClientTls.from_env()
        self.credentials = credentials if credentials is not None else Credentials.from_env()
        self.namesrv_addrs = parse_namesrv_list(namesrv or os.environ.get(NAMESRV_ENV, DEFAULT_NAMESRV))
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._brokers: dict[str, broker_pb2_grpc.BrokerStub] = {}
        """Stubs are cached: building one creates a callable per RPC method, too dear per call."""
        self._namesrvs: dict[str, nameserver_pb2_grpc.NameServerStub] = {}
        self._opened_with: dict[str, tuple[tuple[int, int, int], ...]] = {}
        """The TLS files' state when each address's channel was opened (see the module docstring)."""
        self._retiring: dict[grpc.aio.Channel, asyncio.Task[None]] = {}
        """Channels replaced by :meth:`reconnect`, each closing once its calls ended (at most
        :data:`RETIRE_GRACE_S`); :meth:`close` closes what is left at once."""
        self._preferred_namesrv = 0
        """Index of the name server that answered last: calls start there."""
        self.unanswered: set[str] = set()
        """Name servers whose last call here found them unreachable or too slow (left
        unanswered for another one): a wait for every name server need not wait for them."""

    def channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            self._note_tls_state(address)
            channel = self._channels[address] = self._open(address, GRPC_OPTIONS)
        return channel

    def _note_tls_state(self, address: str) -> None:
        if self.tls.client_enabled:
            self._opened_with[address] = self._tls_state()

    def _open(self, address: str, options: list[tuple[str, Any]]) -> grpc.aio.Channel:
        channel: grpc.aio.Channel = signed(open_channel(address, self.tls, options), self.credentials)
        return channel

    def _tls_state(self) -> tuple[tuple[int, int, int], ...]:
        """Size, modification time and inode of each TLS file (a Secret swaps a symlink)."""
        state = []
        for path in (self.tls.tls_ca, self.tls.tls_cert, self.tls.tls_key):
            if path is not None:
                try:
                    status = Path(path).stat()
                except OSError:
                    return ()  # mid-rotation: not a state to open a channel with
                state.append((status.st_size, status.st_mtime_ns, status.st_ino))
        return tuple(state)

    def _renewed_after(self, error: BaseException, address: str) -> bool:
        return may_be_handshake(error) and self.renew_if_rotated(address)

    def renew_if_rotated(self, address: str) -> bool:
        """Open ``address``'s channel again when the TLS files changed since it was opened
        (a replaced CA bundle or client certificate); whether it did. Called after a call was
        refused at the handshake: the next call goes out with the files as they are now."""
        opened = self._opened_with.get(address)
        if opened is None or address not in self._channels:
            return False
        now = self._tls_state()
        if not now or now == opened:
            return False
        log.info("TLS files changed since the channel to %s was opened: opening it again", address)
        self.reconnect(address)
        return True

    def broker(self, address: str) -> broker_pb2_grpc.BrokerStub:
        stub = self._brokers.get(address)
        if stub is None:
            stub = self._brokers[address] = broker_pb2_grpc.BrokerStub(self.channel(address))
        return stub

    def namesrv(self, address: str) -> nameserver_pb2_grpc.NameServerStub:
        """The stub of one name server (most calls want :meth:`namesrv_call` instead)."""
        stub = self._namesrvs.get(address)
        if stub is None:
            stub = self._namesrvs[address] = nameserver_pb2_grpc.NameServerStub(self.channel(address))
        return stub

    async def namesrv_call(self, method: str, request: object, timeout_s: float = 5) -> object:
        """Call a NameServer method on the first name server that answers.

        Name servers never talk to each other and any live one is as good as another, so the
        call starts at the one that answered last (RocketMQ's client keeps its chosen name
        server until it fails). One that has not answered within :data:`HEDGE_DELAY_S`, or
        cannot be reached, does not hold the call up: the next one is asked too, and the first
        answer wins (the others are cancelled). A hung first name server (it accepts the
        connection and never answers) costs a new process a quarter of a second, not the whole
        timeout. Every address is asked at most once per call; a non-connection failure is the
        server's answer and is raised at once. A name server that refuses the TLS handshake is
        passed over like an unreachable one, and when none answered, the call raises its
        :class:`TlsError` (the cause) rather than "no name server answered".
        """
        order = [
            (self._preferred_namesrv + step) % len(self.namesrv_addrs)
            for step in range(len(self.namesrv_addrs))
        ]
        pending: dict[asyncio.Task[object], int] = {}
        failures: list[str] = []
        refused: TlsError | None = None
        renewed: set[str] = set()
        try:
            while order or pending:
                if order:
                    index = order.pop(0)
                    call = getattr(self.namesrv(self.namesrv_addrs[index]), method)(
                        request, timeout=timeout_s
                    )
                    pending[asyncio.ensure_future(call)] = index
                done, _ = await asyncio.wait(
                    pending, timeout=HEDGE_DELAY_S if order else None, return_when=asyncio.FIRST_COMPLETED
                )
                for task in done:
                    index = pending.pop(task)
                    address = self.namesrv_addrs[index]
                    try:
                        reply = task.result()
                    except grpc.aio.AioRpcError as error:
                        self._check_reachable_failure(error, address, method)
                        if address not in renewed and self._renewed_after(error, address):
                            renewed.add(address)
                            order.append(index)  # once more, with the files as they are now
                            continue
                        refused = await explain(error, address, self.tls) or refused
                        failures.append(f"{address} {error.code().name.lower()}")
                        self.unanswered.add(address)
                        continue
                    self._preferred_namesrv = index
                    self.unanswered.discard(address)
                    return reply
        finally:
            for task, index in pending.items():
                task.cancel()
                self.unanswered.add(self.namesrv_addrs[index])
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
        if refused is not None:
            raise refused
        raise RpcFailure(
            ErrorReason.SERVICE_NOT_AVAILABLE,
            f"no name server answered ({'; '.join(failures)}); check --namesrv or {NAMESRV_ENV}",
        )

    async def raise_tls_failure(self, address: str, error: BaseException) -> bool:
        """Raise a :class:`TlsError` naming the cause when ``error`` (a failed call to
        ``address``) is a refused TLS handshake; return otherwise.

        gRPC fails such a call at once as UNAVAILABLE, which callers would retry until their
        deadline; a handshake fails the same way every time, so it ends the operation instead.
        The cause costs one probe handshake, and only for failures whose words may mean TLS.
        When the TLS files changed since the channel was opened, the channel is opened again
        and this returns True: the call may be made again at once (:meth:`renew_if_rotated`).
        """
        if self._renewed_after(error, address):
            return True
        refused: TlsError | None = await explain(error, address, self.tls)
        if refused is not None:
            raise refused from None
        return False

    @staticmethod
    def _check_reachable_failure(error: grpc.aio.AioRpcError, address: str, method: str) -> None:
        """Raise a failure that is an answer (not a connection problem another name server
        could work around)."""
        if error.code() is grpc.StatusCode.UNIMPLEMENTED:
            raise RpcFailure(
                ErrorReason.SERVICE_NOT_AVAILABLE,
                f"{address} is not an orbitmq name server (it does not serve "
                f"NameServer.{method}); check --namesrv or {NAMESRV_ENV}",
            ) from None
        if error.code() not in _UNREACHABLE:
            raise error

    async def namesrv_call_each(
        self, method: str, request: object, timeout_s: float = 5
    ) -> dict[str, object]:
        """Call a NameServer method on every configured name server at once; replies by address.

        For changes each name server must hold (they never tell each other anything, RocketMQ's
        mqadmin calls each too): one that cannot be reached fails the call, naming it, after
        the others answered (a hung one costs ``timeout_s`` once, not once per name server
        before it), so a retry finishes the job.
        """

        async def one(address: str) -> object:
            return await getattr(self.namesrv(address), method)(request, timeout=timeout_s)

        outcomes = await asyncio.gather(*(one(a) for a in self.namesrv_addrs), return_exceptions=True)
        replies: dict[str, object] = {}
        failures: list[str] = []
        for address, outcome in zip(self.namesrv_addrs, outcomes, strict=True):
            if isinstance(outcome, grpc.aio.AioRpcError) and outcome.code() in _UNREACHABLE:
                await self.raise_tls_failure(address, outcome)
                failures.append(f"{address} {outcome.code().name.lower()}")
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                replies[address] = outcome
        if failures:
            raise RpcFailure(
                ErrorReason.SERVICE_NOT_AVAILABLE,
                f"NameServer.{method} reached {len(replies)} of {len(self.namesrv_addrs)} name servers "
                f"({'; '.join(failures)}); retry once they answer",
            )
        return replies

    def fresh_channel(self, address: str) -> grpc.aio.Channel:
        """A channel of its own to ``address`` (its own connection, :data:`FRESH_CHANNEL_OPTIONS`),
        with this client's TLS; the caller closes it (a probe of a broker that was down)."""
        return self._open(address, FRESH_CHANNEL_OPTIONS)

    def reconnect(self, address: str) -> None:
        """Open a new channel to ``address`` for the calls that follow.

        A channel whose connection failed waits out gRPC's reconnect backoff (growing up to
        ``grpc.max_reconnect_backoff_ms``, 5 s) before it tries again, and fails calls at once
        meanwhile, even when the server is back. A producer whose probe reached a restarted
        broker on a fresh channel swaps the waiting one out this way; the new channel has its
        own connection (:data:`FRESH_CHANNEL_OPTIONS`), as the shared one is still waiting. The
        old channel closes once the calls already on it ended (:meth:`_retire`)."""
        channel = self._channels.pop(address, None)
        self._brokers.pop(address, None)
        self._namesrvs.pop(address, None)
        if channel is not None:
            self._retire(channel)
        self._note_tls_state(address)
        self._channels[address] = self._open(address, FRESH_CHANNEL_OPTIONS)

    def _retire(self, channel: grpc.aio.Channel) -> None:
        """Close ``channel`` once the calls on it ended, cancelling those still on it after
        :data:`RETIRE_GRACE_S` (a session stream then opens again on the new channel). Kept
        open until :meth:`close`, each replaced channel held its own connection for the
        client's lifetime: a proxy or sidecar gained a socket on both ends at every broker
        blip its producer probed through (ten in one disk-full episode of ``orbitmq bench
        soak``), without bound."""
        task = asyncio.ensure_future(channel.close(grace=RETIRE_GRACE_S))
        self._retiring[channel] = task
        task.add_done_callback(lambda _: self._retiring.pop(channel, None))

    async def close(self) -> None:
        for task in self._retiring.values():
            task.cancel()
        for channel in [*self._channels.values(), *self._retiring]:
            await channel.close()
        self._retiring.clear()
        self._channels.clear()
        self._brokers.clear()
        self._namesrvs.clear()
