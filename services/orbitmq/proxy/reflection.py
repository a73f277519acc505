"""Server reflection for ``apache.rocketmq.v2.MessagingService`` (``grpcurl``-style listing).

The proxy's generated v2 code lives in a private descriptor pool (:mod:`orbitmq.rocketmq_v2`),
so that the official Python client, which registers the same full names in protobuf's default
pool, can be imported beside it. Reflection looks descriptors up in one pool; :class:`ChainedPool`
answers from the v2 pool first and from the default pool (health, reflection itself) next.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pool

from orbitmq.rocketmq_v2._pool import POOL as V2_POOL


class ChainedPool:
    """The lookups grpc_reflection makes, tried in each pool in turn (the first that knows the
    name answers; a name none knows raises the last pool's ``KeyError``)."""

    def __init__(self, *pools: Any) -> None:
        self._pools = pools

    def _first(self, method: str, *args: Any) -> Any:
        for pool in self._pools[:-1]:
            try:
                return getattr(pool, method)(*args)
            except KeyError:
                continue
        return getattr(self._pools[-1], method)(*args)

    # named as protobuf's DescriptorPool methods, which grpc_reflection calls
    def FindFileByName(self, name: str) -> Any:
        return self._first("FindFileByName", name)

    def FindFileContainingSymbol(self, symbol: str) -> Any:
        return self._first("FindFileContainingSymbol", symbol)

    def FindMessageTypeByName(self, name: str) -> Any:
        return self._first("FindMessageTypeByName", name)

    def FindExtensionByNumber(self, message: Any, number: int) -> Any:
        return self._first("FindExtensionByNumber", message, number)

    def FindAllExtensions(self, message: Any) -> Any:
        return self._first("FindAllExtensions", message)


def reflection_pool() -> ChainedPool:
    """The v2 pool, then protobuf's default pool."""
    return ChainedPool(V2_POOL, descriptor_pool.Default())
