"""gRPC channels to name servers and brokers, one per address, shared by a client's parts."""

from __future__ import annotations

import os

import grpc

from orbitmq.common.namesrv_list import NAMESRV_ENV, parse_namesrv_list
from orbitmq.common.rpc import RpcFailure
from orbitmq.common.server import GRPC_OPTIONS
from orbitmq.v1 import broker_pb2_grpc, nameserver_pb2_grpc
from orbitmq.v1.broker_pb2 import ErrorReason

DEFAULT_NAMESRV = "127.0.0.1:9876"

_UNREACHABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
"""Codes that say nothing answered at that address, so another name server may."""


class Channels:
    def __init__(self, namesrv: str | list[str] | None = None) -> None:
        """``namesrv``: ``"host:port;host:port"`` (``,`` works too) or a list; None reads
        ``ORBITMQ_NAMESRV``, then the local default ``127.0.0.1:9876``. A malformed list raises
        :class:`~orbitmq.common.namesrv_list.NamesrvListError`."""
        self.namesrv_addrs = parse_namesrv_list(namesrv or os.environ.get(NAMESRV_ENV, DEFAULT_NAMESRV))
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._brokers: dict[str, broker_pb2_grpc.BrokerStub] = {}
        """Stubs are cached: building one creates a callable per RPC method, too dear per call."""
        self._namesrvs: dict[str, nameserver_pb2_grpc.NameServerStub] = {}
        self._preferred_namesrv = 0
        """Index of the name server that answered last: calls start there."""

    def channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = grpc.aio.insecure_channel(address, options=GRPC_OPTIONS)
        return channel

    def broker(self, address: str) -> broker_pb2_grpc.BrokerStub:
        stub = self._brokers.get(address)
        if stub is None:
            stub = self._brokers[address] = broker_pb2_grpc.BrokerStub(self.channel(address))
        return stub

    def _namesrv_stub(self, address: str) -> nameserver_pb2_grpc.NameServerStub:
        stub = self._namesrvs.get(address)
        if stub is None:
            stub = self._namesrvs[address] = nameserver_pb2_grpc.NameServerStub(self.channel(address))
        return stub

    async def namesrv_call(self, method: str, request: object, timeout_s: float = 5) -> object:
        """Call a NameServer method, trying each configured name server at most once.

        Name servers never talk to each other and any live one is as good as another, so the
        call starts at the one that answered last (RocketMQ's client keeps its chosen name
        server until it fails) and moves on only when that one cannot be reached. The rotation
        is computed from one starting point per call, so every address is tried exactly once
        whatever other calls do meanwhile; a non-connection failure is the server's answer and
        is raised at once.
        """
        count = len(self.namesrv_addrs)
        start = self._preferred_namesrv
        failures: list[str] = []
        for attempt in range(count):
            index = (start + attempt) % count
            address = self.namesrv_addrs[index]
            try:
                reply = await getattr(self._namesrv_stub(address), method)(request, timeout=timeout_s)
            except grpc.aio.AioRpcError as error:
                if error.code() is grpc.StatusCode.UNIMPLEMENTED:
                    raise RpcFailure(
                        ErrorReason.SERVICE_NOT_AVAILABLE,
                        f"{address} is not an orbitmq name server (it does not serve "
                        f"NameServer.{method}); check --namesrv or {NAMESRV_ENV}",
                    ) from None
                if error.code() not in _UNREACHABLE:
                    raise
                failures.append(f"{address} {error.code().name.lower()}")
                continue
            self._preferred_namesrv = index
            return reply
        raise RpcFailure(
            ErrorReason.SERVICE_NOT_AVAILABLE,
            f"no name server answered ({'; '.join(failures)}); check --namesrv or {NAMESRV_ENV}",
        )

    async def namesrv_call_each(
        self, method: str, request: object, timeout_s: float = 5
    ) -> dict[str, object]:
        """Call a NameServer method on every configured name server; replies by address.

        For changes each name server must hold (they never tell each other anything, RocketMQ's
        mqadmin calls each too): one that cannot be reached fails the call, naming it, after
        the others were asked, so a retry finishes the job.
        """
        replies: dict[str, object] = {}
        failures: list[str] = []
        for address in self.namesrv_addrs:
            try:
                call = getattr(self._namesrv_stub(address), method)
                replies[address] = await call(request, timeout=timeout_s)
            except grpc.aio.AioRpcError as error:
                if error.code() not in _UNREACHABLE:
                    raise
                failures.append(f"{address} {error.code().name.lower()}")
        if failures:
            raise RpcFailure(
                ErrorReason.SERVICE_NOT_AVAILABLE,
                f"NameServer.{method} reached {len(replies)} of {len(self.namesrv_addrs)} name servers "
                f"({'; '.join(failures)}); retry once they answer",
            )
        return replies

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        self._brokers.clear()
        self._namesrvs.clear()
