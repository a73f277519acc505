"""A producer's routes: each topic's write queues, from the name servers, cached and refreshed.

One name-server query serves every send of a topic; after a failed attempt the route is fetched
again, once for all the sends that failed on the same route. A topic no broker has yet is spread
over every registered master, which create it on its first send.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import grpc

from orbitmq.client.channels import Channels
from orbitmq.client.faults import LatencyFaults
from orbitmq.client.retry import classify
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.v1 import nameserver_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

log = logging.getLogger(__name__)

MASTER_ID = 0
WRITE = 2


@dataclass(frozen=True, slots=True)
class WriteQueue:
    broker_name: str
    queue_id: int
    address: str


class WriteRoutes:
    """The write queues of the topics a producer sends to (see the module docstring)."""

    def __init__(self, channels: Channels, faults: LatencyFaults, default_queue_nums: int) -> None:
        self._channels = channels
        self._faults = faults
        self._default_queue_nums = default_queue_nums
        self._routes: dict[str, list[WriteQueue]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def get(self, topic: str) -> list[WriteQueue] | None:
        """The cached route of ``topic``, or None."""
        return self._routes.get(topic)

    def addresses(self) -> dict[str, str]:
        """Broker name -> master address, over every cached route."""
        return {q.broker_name: q.address for queues in self._routes.values() for q in queues}

    async def write_queues(self, topic: str, *, refresh: bool = False) -> list[WriteQueue]:
        """The topic's write queues, from the cache unless ``refresh`` (or not cached yet)."""
        if refresh or topic not in self._routes:
            return await self.refresh(topic, self._routes.get(topic))
        return self._routes[topic]

    async def refresh(self, topic: str, stale: list[WriteQueue] | None) -> list[WriteQueue]:
        """Fetch the route again, unless another send already replaced ``stale`` (the route its
        attempt failed on) while this one waited: sends that fail together during a failover
        make one name server query, not one each."""
        lock = self._locks.setdefault(topic, asyncio.Lock())
        async with lock:
            current = self._routes.get(topic)
            if current is not None and current is not stale:
                return current
            queues = await self._fetch(topic)
            self._store(topic, queues)
            return queues

    def _store(self, topic: str, queues: list[WriteQueue]) -> None:
        """Keep ``queues``; a broker whose master moved (a failover), or that is back in the
        route after it had left it (a restart that outlasted its registration), is no longer
        avoided."""
        previous = self._routes.get(topic)
        old = {q.broker_name: q.address for q in previous or ()}
        for queue in queues:
            if previous is not None and old.get(queue.broker_name) != queue.address:
                self._faults.forget(queue.broker_name)
        self._routes[topic] = queues

    async def _fetch(self, topic: str) -> list[WriteQueue]:
        try:
            route = await self._channels.namesrv_call(
                "QueryRoute", nameserver_pb2.QueryRouteRequest(topic=topic)
            )
        except grpc.aio.AioRpcError as error:
            failure = failure_of(error)
            if failure is None or failure.reason != ErrorReason.TOPIC_NOT_EXIST:
                raise
            return await self._new_topic_queues()
        masters = {
            d.broker_name: d.broker_addrs[MASTER_ID]
            for d in route.broker_datas
            if MASTER_ID in d.broker_addrs
        }  # type: ignore[attr-defined]
        writable = [q for q in route.queue_datas if q.perm & WRITE]  # type: ignore[attr-defined]
        queues = [
            WriteQueue(q.broker_name, queue_id, masters[q.broker_name])
            for q in writable
            if q.broker_name in masters
            for queue_id in range(q.write_queue_nums)
        ]
        if not writable:
            raise RpcFailure(ErrorReason.NO_PERMISSION, f"topic {topic} has no writable queue")
        if not queues:  # a failover in progress: retriable
            names = ", ".join(sorted({q.broker_name for q in writable}))
            raise RpcFailure(
                ErrorReason.SERVICE_NOT_AVAILABLE,
                f"no master of topic {topic}'s brokers ({names}) is registered",
            )
        return queues

    async def _new_topic_queues(self) -> list[WriteQueue]:
        """A topic no broker has yet: spread over every master, which create it on first send."""
        info = await self._channels.namesrv_call("GetClusterInfo", nameserver_pb2.GetClusterInfoRequest())
        queues = [
            WriteQueue(name, queue_id, data.broker_addrs[MASTER_ID])
            for name, data in sorted(info.broker_addr_table.items())  # type: ignore[attr-defined]
            if MASTER_ID in data.broker_addrs
            for queue_id in range(self._default_queue_nums)
        ]
        if not queues:
            raise RpcFailure(
                ErrorReason.SERVICE_NOT_AVAILABLE, "no master broker is registered with the name servers"
            )
        return queues

    async def refresh_all(self) -> None:
        """Fetch every cached topic's route again (the periodic refresh); a failure is logged
        and the cached route kept."""
        for topic in list(self._routes):
            try:
                self._store(topic, await self._fetch(topic))
            except (grpc.aio.AioRpcError, RpcFailure) as error:
                failure = classify(error)
                log.warning("route refresh of topic %s failed: %s (%s)", topic, failure.label, failure.detail)
