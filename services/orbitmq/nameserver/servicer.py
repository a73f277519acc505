"""The NameServer gRPC service: validates requests, calls the route table, builds protos.

All route logic lives in :mod:`orbitmq.nameserver.routes`; this module only checks what
comes off the wire (names, addresses, ids — each error names the field, the value and the
rule), converts between protos and the table's values, and counts what happened.
"""

from __future__ import annotations

import enum
import re

import grpc
from prometheus_client import CollectorRegistry, Counter, Gauge

from orbitmq.common.auth_sync import stamp_of, version_of
from orbitmq.common.guard import audit_denial, current_user
from orbitmq.common.names import validate_topic_name
from orbitmq.common.rpc import RpcFailure
from orbitmq.common.server import split_host_port
from orbitmq.nameserver.auth_tables import ClusterAuthTables
from orbitmq.nameserver.routes import (
    BrokerData,
    BrokerKey,
    DataVersion,
    Registration,
    RouteTable,
    StaleEpochError,
    TopicQueues,
    TopicRoute,
)
from orbitmq.v1 import common_pb2, nameserver_pb2, nameserver_pb2_grpc
from orbitmq.v1.broker_pb2 import ErrorReason

BROKER_NAME_RULE = "^[a-zA-Z0-9_-]+$"
"""Cluster and broker names: they appear in metric labels, Kubernetes names and file paths."""
_BROKER_NAME_RE = re.compile(r"[a-zA-Z0-9_-]+")
MAX_PERM = 7
"""READ (4) | WRITE (2) | INHERIT (1)."""


class RouteOutcome(enum.Enum):
    FOUND = "found"
    NOT_FOUND = "not_found"


class NameServerMetrics:
    """The name server's Prometheus families (docs/reference/metrics.md), on the server's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.brokers = Gauge(
            "orbitmq_nameserver_brokers",
            "1 while a broker address is registered and live",
            ["cluster", "broker_name", "broker_id"],
            registry=registry,
        )
        self.registrations = Counter(
            "orbitmq_nameserver_registrations_total",
            "Broker registrations and heartbeats accepted",
            registry=registry,
        )
        self.brokers_expired = Counter(
            "orbitmq_nameserver_brokers_expired_total",
            "Broker addresses dropped after missing heartbeats",
            registry=registry,
        )
        self.route_queries = Counter(
            "orbitmq_nameserver_route_queries_total",
            "QueryRoute calls by outcome",
            ["outcome"],
            registry=registry,
        )
        for outcome in RouteOutcome:
            self.route_queries.labels(outcome.value)  # both series exist from the start, at 0
        self._shown: set[BrokerKey] = set()

    def show_brokers(self, live: set[BrokerKey]) -> None:
        """Make the brokers gauge list exactly ``live`` (label sets of gone brokers removed)."""
        for cluster, name, broker_id in self._shown - live:
            self.brokers.remove(cluster, name, str(broker_id))
        for cluster, name, broker_id in live - self._shown:
            self.brokers.labels(cluster, name, str(broker_id)).set(1)
        self._shown = set(live)


class NameServerServicer(nameserver_pb2_grpc.NameServerServicer):
    """Serves ``orbitmq.v1.NameServer`` over a :class:`RouteTable`.

    Args:
        table: the route table (shared with the server's expiry scan).
        metrics: where to count registrations and route queries; None counts nothing.
        auth: the users and ACLs brokers register (a name server with auth on); None: auth is
            off, registrations' tables are ignored and ``GetAuthTables`` is refused.
    """

    def __init__(
        self,
        table: RouteTable,
        metrics: NameServerMetrics | None = None,
        auth: ClusterAuthTables | None = None,
    ) -> None:
        self._table = table
        self._metrics = metrics
        self._auth = auth

    async def RegisterBroker(
        self, request: nameserver_pb2.RegisterBrokerRequest, context: grpc.aio.ServicerContext
    ) -> nameserver_pb2.RegisterBrokerResponse:
        registration = registration_from_proto(request)
        auth = self._auth
        if auth is not None and request.auth_tables:  # refused: the registration changes nothing
            self._check_super(context, "RegisterBroker", "Update", "send the users and ACLs it decides with")
            auth.offer(request.cluster, request.auth_version, request.auth_tables)
        try:
            master_addr, ha_addr = self._table.register(registration)
        except StaleEpochError as error:
            raise RpcFailure(
                ErrorReason.INVALID_ARGUMENT,
                str(error),
                broker_name=request.broker_name,
                epoch=str(request.epoch),
            ) from None
        if self._metrics is not None:
            self._metrics.registrations.inc()
            self._metrics.show_brokers(self._table.live_keys())
        reply = nameserver_pb2.RegisterBrokerResponse(master_addr=master_addr, ha_server_addr=ha_addr)
        if auth is not None:
            reply.takes_auth_tables = True
            reply.auth_version.CopyFrom(version_of(auth.stamp(request.cluster)))
        return reply

    async def GetAuthTables(
        self, request: nameserver_pb2.GetAuthTablesRequest, context: grpc.aio.ServicerContext
    ) -> nameserver_pb2.GetAuthTablesResponse:
        auth = self._auth
        if auth is None:
            raise RpcFailure(
                ErrorReason.NO_PERMISSION,
                "this name server has auth off: it keeps no users or ACLs to hand out (start it with "
                "--auth-enabled, as the brokers)",
            )
        self._check_super(context, "GetAuthTables", "Get", "read users and ACLs (secrets included)")
        if request.cluster:
            _check_broker_name("cluster", request.cluster)
        tables = auth.of(request.cluster)
        if tables is None:
            which = f"of cluster {request.cluster} " if request.cluster else ""
            raise RpcFailure(
                ErrorReason.SERVICE_NOT_AVAILABLE,
                f"no broker {which}has registered its users and ACLs with this name server yet (it "
                "started moments ago, or the brokers have auth off): ask another name server or again",
            )
        if stamp_of(request.known_version) == tables.stamp:
            return nameserver_pb2.GetAuthTablesResponse(version=request.known_version, changed=False)
        return nameserver_pb2.GetAuthTablesResponse(
            version=version_of(tables.stamp), changed=True, tables=tables.content_json()
        )

    @staticmethod
    def _check_super(context: grpc.aio.ServicerContext, rpc: str, action: str, what: str) -> None:
        """Refuse (NO_PERMISSION, audited) a caller that is not a super user: a Cluster grant lets
        a normal user register brokers, not make users the name server decides with."""
        user = current_user()  # the guard verified it before the handler runs
        if user is not None and user.is_super:
            return
        who = user.username if user is not None else "an unknown caller"
        refusal = f"{who} may not {what} ({rpc}): super users only"
        audit_denial(context, f"/orbitmq.v1.NameServer/{rpc}", action, "Cluster:*", "Cluster", refusal)
        raise RpcFailure(ErrorReason.NO_PERMISSION, refusal)

    async def UnregisterBroker(
        self, request: nameserver_pb2.UnregisterBrokerRequest, context: grpc.aio.ServicerContext
    ) -> nameserver_pb2.UnregisterBrokerResponse:
        _check_broker_name("cluster", request.cluster)
        _check_broker_name("broker_name", request.broker_name)
        _check_address("broker_addr", request.broker_addr)
        _check_not_negative("broker_id", request.broker_id)
        self._table.unregister(request.broker_name, request.broker_addr)
        if self._metrics is not None:
            self._metrics.show_brokers(self._table.live_keys())
        return nameserver_pb2.UnregisterBrokerResponse()

    async def QueryRoute(
        self, request: nameserver_pb2.QueryRouteRequest, context: grpc.aio.ServicerContext
    ) -> common_pb2.TopicRoute:
        topic = validate_topic_name(request.topic)
        route = self._table.route(topic)
        if self._metrics is not None:
            outcome = RouteOutcome.NOT_FOUND if route is None else RouteOutcome.FOUND
            self._metrics.route_queries.labels(outcome.value).inc()
        if route is None:
            raise RpcFailure(
                ErrorReason.TOPIC_NOT_EXIST,
                f"no route for topic {topic!r}: no live broker serves it",
                topic=topic,
            )
        return route_to_proto(route)

    async def GetClusterInfo(
        self, request: nameserver_pb2.GetClusterInfoRequest, context: grpc.aio.ServicerContext
    ) -> nameserver_pb2.ClusterInfo:
        info = self._table.cluster_info()
        return nameserver_pb2.ClusterInfo(
            broker_addr_table={name: _broker_data_to_proto(d) for name, d in info.broker_addr_table.items()},
            cluster_addr_table={
                cluster: nameserver_pb2.BrokerNames(broker_names=names)
                for cluster, names in info.cluster_addr_table.items()
            },
            live_brokers={
                addr: nameserver_pb2.BrokerLiveInfo(
                    broker_addr=addr,
                    last_update_ms=live.last_update_ms,
                    data_version=common_pb2.DataVersion(
                        timestamp_ms=live.data_version.timestamp_ms, counter=live.data_version.counter
                    ),
                )
                for addr, live in info.live_brokers.items()
            },
        )

    async def GetTopicList(
        self, request: nameserver_pb2.GetTopicListRequest, context: grpc.aio.ServicerContext
    ) -> nameserver_pb2.TopicList:
        return nameserver_pb2.TopicList(topics=self._table.topics())

    async def DeleteTopic(
        self, request: nameserver_pb2.DeleteTopicInNameServerRequest, context: grpc.aio.ServicerContext
    ) -> nameserver_pb2.DeleteTopicInNameServerResponse:
        # Deleting a topic the table does not know is not an error: admin tools retry deletes.
        self._table.delete_topic(validate_topic_name(request.topic))
        return nameserver_pb2.DeleteTopicInNameServerResponse()

    async def WipeWritePerm(
        self, request: nameserver_pb2.WipeWritePermRequest, context: grpc.aio.ServicerContext
    ) -> nameserver_pb2.WipeWritePermResponse:
        # A broker name not registered (yet) is accepted: a drain may start while its master
        # restarts, and the wipe must hold when it registers again.
        _check_broker_name("broker_name", request.broker_name)
        count = self._table.wipe_write_perm(request.broker_name)
        return nameserver_pb2.WipeWritePermResponse(wipe_topic_count=count)

    async def AddWritePerm(
        self, request: nameserver_pb2.AddWritePermRequest, context: grpc.aio.ServicerContext
    ) -> nameserver_pb2.AddWritePermResponse:
        _check_broker_name("broker_name", request.broker_name)
        count = self._table.add_write_perm(request.broker_name)
        return nameserver_pb2.AddWritePermResponse(add_topic_count=count)


# -- conversions -----------------------------------------------------------------------------


def registration_from_proto(request: nameserver_pb2.RegisterBrokerRequest) -> Registration:
    """Validate a RegisterBroker request; raises :class:`RpcFailure` naming the bad field."""
    _check_broker_name("cluster", request.cluster)
    _check_broker_name("broker_name", request.broker_name)
    _check_address("broker_addr", request.broker_addr)
    if request.ha_addr:
        _check_address("ha_addr", request.ha_addr)
    _check_not_negative("broker_id", request.broker_id)
    _check_not_negative("heartbeat_timeout_ms", request.heartbeat_timeout_ms)
    _check_not_negative("epoch", request.epoch)
    topics = {topic: _topic_queues(topic, config) for topic, config in request.topic_configs.items()}
    return Registration(
        cluster=request.cluster,
        broker_name=request.broker_name,
        broker_addr=request.broker_addr,
        broker_id=request.broker_id,
        ha_addr=request.ha_addr,
        topics=topics,
        data_version=DataVersion(request.data_version.timestamp_ms, request.data_version.counter),
        heartbeat_timeout_ms=request.heartbeat_timeout_ms,
        epoch=request.epoch,
    )


def route_to_proto(route: TopicRoute) -> common_pb2.TopicRoute:
    return common_pb2.TopicRoute(
        topic=route.topic,
        queue_datas=[
            common_pb2.QueueData(
                broker_name=q.broker_name,
                read_queue_nums=q.read_queue_nums,
                write_queue_nums=q.write_queue_nums,
                perm=q.perm,
            )
            for q in route.queue_datas
        ],
        broker_datas=[_broker_data_to_proto(d) for d in route.broker_datas],
        order_topic=route.order_topic,
    )


def _broker_data_to_proto(data: BrokerData) -> common_pb2.BrokerData:
    return common_pb2.BrokerData(
        cluster=data.cluster, broker_name=data.broker_name, broker_addrs=dict(data.broker_addrs)
    )


def _topic_queues(topic: str, config: common_pb2.TopicConfig) -> TopicQueues:
    validate_topic_name(topic)
    if config.topic_name and config.topic_name != topic:
        raise RpcFailure(
            ErrorReason.INVALID_ARGUMENT,
            f"topic_configs[{topic!r}] has topic_name {config.topic_name!r}; they must match",
        )
    _check_not_negative(f"topic_configs[{topic!r}].read_queue_nums", config.read_queue_nums)
    _check_not_negative(f"topic_configs[{topic!r}].write_queue_nums", config.write_queue_nums)
    if not 0 <= config.perm <= MAX_PERM:
        raise RpcFailure(
            ErrorReason.INVALID_ARGUMENT,
            f"topic_configs[{topic!r}].perm {config.perm} must be a bit set of READ 4, WRITE 2, "
            f"INHERIT 1 (0 to {MAX_PERM})",
        )
    return TopicQueues(config.read_queue_nums, config.write_queue_nums, config.perm, config.order)


# -- validation ------------------------------------------------------------------------------


def _check_broker_name(field: str, value: str) -> None:
    if not _BROKER_NAME_RE.fullmatch(value):
        problem = "must not be empty" if not value else "has characters outside [a-zA-Z0-9_-]"
        raise RpcFailure(
            ErrorReason.INVALID_NAME, f"invalid {field} {value!r}: {problem} (rule: {BROKER_NAME_RULE})"
        )


def _check_address(field: str, value: str) -> None:
    try:
        _, port = split_host_port(value)
    except ValueError as error:
        raise RpcFailure(ErrorReason.INVALID_ARGUMENT, f"{field}: {error}") from None
    if port == 0:
        raise RpcFailure(
            ErrorReason.INVALID_ARGUMENT, f"{field}: address {value!r} has port 0, which cannot be dialled"
        )


def _check_not_negative(field: str, value: int) -> None:
    if value < 0:
        raise RpcFailure(ErrorReason.INVALID_ARGUMENT, f"{field} {value} must be 0 or more")
