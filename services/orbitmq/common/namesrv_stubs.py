"""One signed channel per name server, opened on first use and kept: what a broker's
registration and a server's auth-table sync both need to call their name servers."""

from __future__ import annotations

from typing import Any

from orbitmq.common.credentials import Credentials, signed
from orbitmq.common.server import GRPC_OPTIONS
from orbitmq.common.tls import TlsFiles, open_channel
from orbitmq.v1 import nameserver_pb2_grpc


class NameServerStubs:
    """``stubs(address)`` is a NameServer stub on that address's channel (TLS from ``tls``, every
    call signed with ``credentials`` when set); :meth:`close` closes every channel opened."""

    def __init__(self, tls: TlsFiles | None, credentials: Credentials | None) -> None:
        self._tls = tls
        self._credentials = credentials
        self._channels: dict[str, Any] = {}

    def __call__(self, address: str) -> nameserver_pb2_grpc.NameServerStub:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = signed(
                open_channel(address, self._tls, GRPC_OPTIONS), self._credentials
            )
        return nameserver_pb2_grpc.NameServerStub(channel)

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()
