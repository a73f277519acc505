"""Read routes: which queues of a topic can be consumed, and at which master address.

Shared by the push and pull consumers so both see the same queue list in the same order
(allocation depends on every group member sorting identically).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

import grpc

from orbitmq.client.channels import Channels
from orbitmq.client.queue import MessageQueue
from orbitmq.v1 import common_pb2, nameserver_pb2

log = logging.getLogger(__name__)

MASTER_ID = 0
READ = 4
"""The read bit of a topic's permission (RocketMQ's PermName.PERM_READ)."""
ROUTE_WAIT_S = 3.0
"""How long a topic change waits for the name servers to route it. Brokers register a change
in the background at once, so live name servers have it within milliseconds."""
ROUTE_POLL_TIMEOUT_S = 0.5
"""One route query of that wait: a name server that does not answer in time is not waited for."""
_ROUTE_POLL_S = 0.02


@dataclass(frozen=True)
class ReadRoute:
    queues: list[MessageQueue]
    """Readable queues on brokers whose master is registered, sorted."""
    masters: dict[str, str]
    """Broker name -> master address."""
    slaves: dict[str, list[str]]
    """Broker name -> slave addresses by broker id (reads fall back to them)."""


async def fetch_read_route(channels: Channels, topic: str) -> ReadRoute | None:
    """The topic's read route; ``None`` when no name server knows the topic (yet).

    Raises ``AioRpcError`` for other gRPC failures and ``RpcFailure`` when no name server
    answers at all.
    """
    try:
        route = await channels.namesrv_call("QueryRoute", nameserver_pb2.QueryRouteRequest(topic=topic))
    except grpc.aio.AioRpcError as error:
        if error.code() is grpc.StatusCode.NOT_FOUND:
            return None
        raise
    masters = {
        d.broker_name: d.broker_addrs[MASTER_ID]
        for d in route.broker_datas  # type: ignore[attr-defined]
        if MASTER_ID in d.broker_addrs
    }
    queues = sorted(
        MessageQueue(topic, q.broker_name, queue_id)
        for q in route.queue_datas  # type: ignore[attr-defined]
        if q.perm & READ and q.broker_name in masters
        for queue_id in range(q.read_queue_nums)
    )
    slaves = {
        d.broker_name: [d.broker_addrs[i] for i in sorted(d.broker_addrs) if i != MASTER_ID]
        for d in route.broker_datas  # type: ignore[attr-defined]
    }
    return ReadRoute(queues, masters, slaves)


async def await_route(
    channels: Channels,
    topic: str,
    shows: Callable[[common_pb2.TopicRoute | None], bool],
    wait_s: float = ROUTE_WAIT_S,
) -> None:
    """Wait until every name server that answers routes ``topic`` as ``shows`` wants (it is
    given ``None`` when a name server does not know the topic).

    A broker answers a topic change before the name servers know it (it registers in the
    background, so a hung name server never delays the change): this wait lets whoever made
    the change use it at once. Name servers this client already found unreachable or slow
    are not waited for, nor is one that does not answer within :data:`ROUTE_POLL_TIMEOUT_S`;
    one that still routes the old way after ``wait_s`` is logged (the broker's next
    registration brings it)."""
    request = nameserver_pb2.QueryRouteRequest(topic=topic)
    behind: set[str] = set()

    async def watch(address: str) -> None:
        behind.add(address)
        while True:
            try:
                route = await channels.namesrv(address).QueryRoute(request, timeout=ROUTE_POLL_TIMEOUT_S)
            except grpc.aio.AioRpcError as error:
                if error.code() is not grpc.StatusCode.NOT_FOUND:
                    behind.discard(address)  # unreachable or broken: nothing to wait for
                    return
                route = None
            if shows(route):
                behind.discard(address)
                return
            await asyncio.sleep(_ROUTE_POLL_S)

    watched = [a for a in channels.namesrv_addrs if a not in channels.unanswered]
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.gather(*(watch(a) for a in watched)), wait_s)
    if behind:
        log.warning(
            "name servers %s do not route topic %s as changed after %.1f s; the brokers' next "
            "registration brings it",
            ", ".join(sorted(behind)),
            topic,
            wait_s,
        )
