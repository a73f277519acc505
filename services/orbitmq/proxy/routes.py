"""Pure translation of orbitmq routes into v2 ``MessageQueue`` lists (no I/O).

Every queue of the answer names its real broker and queue id, so clients balance and hash over
the same queues orbitmq clients see, but its endpoints are the proxy's (cluster mode, see
:mod:`orbitmq.proxy`): the v2 client sends everything to the proxy, and the proxy reaches the
broker's current master itself. A broker without a registered master is left out, as orbitmq's
producers leave it out (a failover is in progress; the next route refresh brings it back).

Permissions follow RocketMQ's proxy: of a broker's ``max(read, write)`` queue ids, those below
both counts are ``READ_WRITE``, the rest only ``READ`` or only ``WRITE``, and the topic's
permission bits mask them.
"""

from __future__ import annotations

from collections.abc import Iterable

from orbitmq.rocketmq_v2 import definition_pb2 as v2
from orbitmq.v1 import common_pb2

MASTER_ID = 0
PERM_READ = 4
PERM_WRITE = 2
"""orbitmq's (RocketMQ's) topic permission bits."""

_PERMISSIONS = {
    (True, True): v2.READ_WRITE,
    (True, False): v2.READ,
    (False, True): v2.WRITE,
    (False, False): v2.NONE,
}


def message_queues(
    route: common_pb2.TopicRoute,
    topic: v2.Resource,
    endpoints: v2.Endpoints,
    accept: Iterable[int],
) -> list[v2.MessageQueue]:
    """The v2 queues of ``route``, all reached through ``endpoints``."""
    masters = {d.broker_name for d in route.broker_datas if MASTER_ID in d.broker_addrs}
    accept = list(accept)
    queues = []
    for data in sorted(route.queue_datas, key=lambda d: d.broker_name):
        if data.broker_name not in masters:
            continue
        for queue_id in range(max(data.read_queue_nums, data.write_queue_nums)):
            readable = queue_id < data.read_queue_nums and bool(data.perm & PERM_READ)
            writable = queue_id < data.write_queue_nums and bool(data.perm & PERM_WRITE)
            queues.append(
                _queue(topic, data.broker_name, queue_id, _PERMISSIONS[readable, writable], endpoints, accept)
            )
    return queues


def new_topic_queues(
    broker_names: Iterable[str],
    queue_nums: int,
    topic: v2.Resource,
    endpoints: v2.Endpoints,
    accept: Iterable[int],
) -> list[v2.MessageQueue]:
    """Queues for a topic no broker has yet: ``queue_nums`` on every master, which creates the
    topic on the first send (as orbitmq's producers do when topics are auto-created)."""
    accept = list(accept)
    return [
        _queue(topic, name, queue_id, v2.READ_WRITE, endpoints, accept)
        for name in sorted(broker_names)
        for queue_id in range(queue_nums)
    ]


def _queue(
    topic: v2.Resource,
    broker: str,
    queue_id: int,
    permission: int,
    endpoints: v2.Endpoints,
    accept: list[int],
) -> v2.MessageQueue:
    return v2.MessageQueue(
        topic=topic,
        id=queue_id,
        permission=permission,  # type: ignore[arg-type]
        broker=v2.Broker(name=broker, id=MASTER_ID, endpoints=endpoints),
        accept_message_types=accept,  # type: ignore[arg-type]
    )


def endpoints_of(address: str) -> v2.Endpoints:
    """``host:port`` as v2 endpoints (IPv4, IPv6 or a domain name, as the clients tell them)."""
    import ipaddress

    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        scheme = v2.IPv6 if ipaddress.ip_address(host).version == 6 else v2.IPv4
    except ValueError:
        scheme = v2.DOMAIN_NAME
    return v2.Endpoints(scheme=scheme, addresses=[v2.Address(host=host, port=int(port))])  # type: ignore[arg-type]
