"""The ``orbitmq proxy`` process: ``apache.rocketmq.v2.MessagingService`` with health, /metrics.

Stateless (see :mod:`orbitmq.proxy` for why it is a separate process): it holds orbitmq's own
producer for sends, the transaction bridge, and the registry of connected v2 clients; a restart
loses nothing but open streams, which the clients reopen.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from orbitmq.auth import audit
from orbitmq.auth.tables import AuthTables
from orbitmq.client.channels import Channels
from orbitmq.client.producer import Producer
from orbitmq.common.auth_sync import SyncedTables, layered_provider
from orbitmq.common.guard import load_users_file
from orbitmq.common.server import GrpcServer
from orbitmq.common.tasks import TaskSet
from orbitmq.proxy.auth import ProxyGuard
from orbitmq.proxy.clients import ClientRegistry
from orbitmq.proxy.metrics import ProxyMetrics
from orbitmq.proxy.reflection import reflection_pool
from orbitmq.proxy.servicer import MessagingService
from orbitmq.proxy.settings import ProxySettings, cluster_credentials
from orbitmq.proxy.transactions import Transactions
from orbitmq.rocketmq_v2 import service_pb2, service_pb2_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["MessagingService"].full_name
PRODUCER_GROUP = "%V2%proxy"
SEND_CALLS_IN_FLIGHT = 1
"""Broker calls per topic on their way at once from the proxy's producer (its coalescing, see
:mod:`orbitmq.client.accumulator`; the library's default is 2). The official clients' sends
reach the proxy one gRPC call each, spread out: with a second call allowed out, 4 000 official
sends at 16 in flight went 1.97-2.46 messages a broker call (broker 165-228 us a message); with
one, 2.27-4.36 (125-223 us), as with the proxy's own coalescer before (3.16-4.13)."""
"""The orbitmq producer group of non-transactional sends (v2 producers have no group)."""


class Proxy:
    """Serves the v2 protocol over the cluster whose name servers ``settings.namesrv`` names.

    Args:
        settings: listen addresses, name servers, send budget, limits (:class:`ProxySettings`).
    """

    def __init__(self, settings: ProxySettings) -> None:
        self.settings = settings
        self.grpc = GrpcServer(
            "proxy",
            settings.listen,
            metrics_listen=settings.metrics_listen,
            reflection_pool=reflection_pool(),
            tls=settings,
        )
        self.channels = Channels(settings.namesrv, credentials=cluster_credentials(settings))
        self.auth_sync = proxy_auth_sync(settings, self.channels)
        """The brokers' users and ACLs, fetched from the name servers (auth on); None with auth off."""
        self.guard = proxy_guard(settings, self.auth_sync)
        self.clients = ClientRegistry()
        self.producer = Producer(
            PRODUCER_GROUP,
            self.channels.namesrv_addrs,
            send_timeout_ms=settings.send_timeout_ms,
            heartbeat_ms=settings.heartbeat_ms,
            default_topic_queue_nums=settings.default_topic_queue_nums,
            auto_batch_in_flight=SEND_CALLS_IN_FLIGHT,
            credentials=self.channels.credentials,
        )
        self.metrics = ProxyMetrics(self.grpc.registry, self.clients)
        if self.guard is not None:
            audit.register_metrics(self.grpc.registry)
        self.transactions = Transactions(settings, self.channels, self.clients, self.metrics.checks_forwarded)
        self._tasks = TaskSet("proxy")
        self._started = False
        self._closed = False

    @property
    def address(self) -> str:
        """The bound gRPC address (127.0.0.1 when listening on every interface)."""
        return self.grpc.address

    async def start(self) -> None:
        """Bind, serve, start the producer and the transaction bridge; raises ListenError."""
        if self._started:
            return
        self._started = True
        self.grpc.bind()
        servicer = self.servicer = MessagingService(
            self.settings,
            self.channels,
            self.producer,
            self.transactions,
            self.clients,
            self.settings.advertise or self.address,
            self.metrics,
            self.guard,
        )
        self.grpc.add_service(
            SERVICE_NAME, lambda s: service_pb2_grpc.add_MessagingServiceServicer_to_server(servicer, s)
        )
        try:
            if self.auth_sync is not None:
                await self.auth_sync.start()  # the brokers' users known before clients connect
            await self.producer.start()
            await self.transactions.start()
            self._tasks.spawn("renewals", servicer.consumers.renewals.run())
            tables = self.grpc.runtime
            tables.table("proxy_clients", lambda: len(self.clients))
            tables.table("proxy_telemetry_streams", self.clients.stream_count)
            tables.table("proxy_held_messages", lambda: len(servicer.consumers.renewals))
            await self.grpc.start()
        except BaseException:
            await self.close()
            raise
        log.info(
            "proxy on %s serves %s for name servers %s",
            self.address,
            SERVICE_NAME,
            self.channels.namesrv_addrs,
        )

    async def close(self) -> None:
        """Health NOT_SERVING, in-flight calls get ``grace_ms``, then stop; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._started:
            await self.grpc.stop(self.settings.grace_ms / 1000)
            await self.servicer.consumers.acks.close()  # acks still waiting for a call fail
        await self._tasks.close()
        if self.auth_sync is not None:
            await self.auth_sync.stop()
        await self.transactions.close()
        await self.producer.close()
        await self.channels.close()


def proxy_auth_sync(settings: ProxySettings, channels: Channels) -> SyncedTables | None:
    """What keeps a proxy with auth on in step with the users stored on the brokers: fetched
    from the name servers as the proxy's cluster user (:func:`cluster_credentials`, always set
    with auth on: the bootstrap super user at least)."""
    if not settings.auth_enabled or channels.credentials is None:
        return None
    namesrv = ";".join(channels.namesrv_addrs)
    return SyncedTables(namesrv, channels.tls, channels.credentials, settings.auth_sync_interval_ms / 1000)


def proxy_guard(settings: ProxySettings, synced: SyncedTables | None) -> ProxyGuard | None:
    """The guard of the v2 calls (None with auth off): the users of ``auth_users_file``, the
    brokers' users over them (``synced``) and the bootstrap super user; a bad file raises
    :class:`~orbitmq.common.guard.AuthUsersError`."""
    if not settings.auth_enabled:
        return None
    tables = load_users_file(settings.auth_users_file) if settings.auth_users_file else AuthTables()
    provider = layered_provider(tables, synced or (lambda: _NO_TABLES), settings.bootstrap_user())
    return ProxyGuard(provider, window_ms=settings.auth_window_ms)


_NO_TABLES = AuthTables()


async def run(settings: ProxySettings) -> None:
    """Run a proxy until SIGTERM or SIGINT; prints ``proxy listening on ADDR metrics URL`` once
    serving (the local supervisor and tests read the bound address from it)."""
    proxy = Proxy(settings)
    await proxy.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        print(
            f"proxy listening on {proxy.address} metrics {proxy.grpc.metrics_url or 'disabled'}", flush=True
        )
        await stop.wait()
        log.info("proxy stopping (grace %s ms)", settings.grace_ms)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await proxy.close()
        print("proxy stopped", file=sys.stderr, flush=True)
