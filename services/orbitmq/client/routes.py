"""Read routes: which queues of a topic can be consumed, and at which master address.

Shared by the push and pull consumers so both see the same queue list in the same order
(allocation depends on every group member sorting identically).
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from orbitmq.client.channels import Channels
from orbitmq.client.queue import MessageQueue
from orbitmq.v1 import nameserver_pb2

MASTER_ID = 0
READ = 4
"""The read bit of a topic's permission (RocketMQ's PermName.PERM_READ)."""


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
