"""gRPC channels to name servers and brokers, one per address, shared by a client's parts."""

from __future__ import annotations

import grpc

from orbitmq.common.rpc import RpcFailure
from orbitmq.common.server import GRPC_OPTIONS, split_host_port
from orbitmq.v1 import broker_pb2_grpc, nameserver_pb2_grpc
from orbitmq.v1.broker_pb2 import ErrorReason


def parse_addresses(value: str | list[str]) -> list[str]:
    addresses = value if isinstance(value, list) else [a.strip() for a in value.split(";") if a.strip()]
    if not addresses:
        raise ValueError(
            "name server address list is empty; give 'host:port;host:port' or set ORBITMQ_NAMESRV"
        )
    for address in addresses:
        split_host_port(address)
    return addresses


class Channels:
    def __init__(self, namesrv: str | list[str]) -> None:
        self.namesrv_addrs = parse_addresses(namesrv)
        self._channels: dict[str, grpc.aio.Channel] = {}
        self._brokers: dict[str, broker_pb2_grpc.BrokerStub] = {}
        """Stubs are cached: building one creates a callable per RPC method, too dear per call."""
        self._next_namesrv = 0

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

    async def namesrv_call(self, method: str, request: object, timeout_s: float = 5) -> object:
        """Call a NameServer method on the first name server that answers (any is as good)."""
        last: grpc.aio.AioRpcError | None = None
        count = len(self.namesrv_addrs)
        for attempt in range(count):
            address = self.namesrv_addrs[(self._next_namesrv + attempt) % count]
            stub = nameserver_pb2_grpc.NameServerStub(self.channel(address))
            try:
                return await getattr(stub, method)(request, timeout=timeout_s)
            except grpc.aio.AioRpcError as error:
                if error.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                    raise
                last = error
                self._next_namesrv = (self._next_namesrv + 1) % count
        raise RpcFailure(
            ErrorReason.SERVICE_NOT_AVAILABLE,
            f"no name server answered ({';'.join(self.namesrv_addrs)}): {last.details() if last else ''}",
        )

    async def close(self) -> None:
        for channel in self._channels.values():
            await channel.close()
        self._channels.clear()
        self._brokers.clear()
