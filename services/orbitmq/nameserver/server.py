"""A name server process: the route table served over gRPC, plus the broker expiry scan.

:class:`NameServer` holds no state worth keeping across restarts: brokers re-register with
every name server every 30 s, so a restarted name server has full routes again within one
heartbeat period. That is why there is no persistence and no talk between name servers.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from orbitmq.auth.tables import AuthTables
from orbitmq.common.clock import MONOTONIC_CLOCK, Clock
from orbitmq.common.guard import load_users_file, namesrv_guard
from orbitmq.common.heap import freeze_startup_heap
from orbitmq.common.server import GrpcServer
from orbitmq.common.tasks import TaskSet
from orbitmq.nameserver.auth_tables import ClusterAuthTables
from orbitmq.nameserver.routes import RouteTable
from orbitmq.nameserver.servicer import NameServerMetrics, NameServerServicer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.v1 import nameserver_pb2, nameserver_pb2_grpc

log = logging.getLogger(__name__)

SERVICE_NAME = nameserver_pb2.DESCRIPTOR.services_by_name["NameServer"].full_name


class NameServer:
    """Serves ``orbitmq.v1.NameServer`` with health, reflection and /metrics.

    Args:
        settings: listen addresses, broker expiry, scan interval and grace period.
        clock: source of "now" for the brokers' liveness (registration times and expiry):
            monotonic, so a step of the wall clock neither expires every broker at once nor
            keeps a dead one routed (tests pass a ManualClock).
    """

    def __init__(self, settings: NameServerSettings, *, clock: Clock = MONOTONIC_CLOCK) -> None:
        self.settings = settings
        self.clock = clock
        self.table = RouteTable(clock, broker_expiry_ms=settings.broker_expiry_ms)
        self.auth = namesrv_auth_tables(settings)
        """The users and ACLs brokers register, with the users file; None with auth off."""
        self.grpc = GrpcServer(
            "namesrv",
            settings.listen,
            metrics_listen=settings.metrics_listen,
            tls=settings,
            guard=namesrv_guard(settings, self.auth.decision_tables if self.auth is not None else None),
        )
        self.metrics = NameServerMetrics(self.grpc.registry)
        for table in self.table.sizes():
            self.grpc.runtime.table(f"namesrv_{table}", lambda table=table: self.table.sizes()[table])
        self._tasks = TaskSet("namesrv")
        self._started = False
        self._closed = False

    @property
    def address(self) -> str:
        """The bound gRPC address (127.0.0.1 when listening on every interface)."""
        return self.grpc.address

    @property
    def metrics_url(self) -> str | None:
        """``http://host:port/metrics``, or None when metrics are disabled."""
        return self.grpc.metrics_url

    async def start(self) -> None:
        """Bind, serve, start the expiry scan. Raises ListenError when an address cannot be bound."""
        if self._started:
            return
        self._started = True
        servicer = NameServerServicer(self.table, self.metrics, self.auth)
        self.grpc.add_service(
            SERVICE_NAME, lambda s: nameserver_pb2_grpc.add_NameServerServicer_to_server(servicer, s)
        )
        try:
            await self.grpc.start()
        except BaseException:
            await self.close()
            raise
        self._tasks.spawn("expire-brokers", self._scan_loop())
        log.info(
            "namesrv on %s drops brokers silent for %s ms, scanning every %s ms",
            self.address,
            self.settings.broker_expiry_ms,
            self.settings.scan_interval_ms,
        )

    async def close(self) -> None:
        """Health NOT_SERVING, in-flight calls get ``grace_ms``, then stop; idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._started:
            await self.grpc.stop(self.settings.grace_ms / 1000)
        await self._tasks.close()

    def scan(self) -> list[str]:
        """Drop brokers past their timeout now; returns their addresses."""
        expired = self.table.expire(self.clock.now_ms())
        if expired:
            self.metrics.brokers_expired.inc(len(expired))
            self.metrics.show_brokers(self.table.live_keys())
        return expired

    async def _scan_loop(self) -> None:
        interval_s = self.settings.scan_interval_ms / 1000
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.scan()
            except Exception:
                # Keep scanning: a name server that stops expiring brokers routes to dead ones.
                log.exception("namesrv expiry scan failed; retrying in %s ms", self.settings.scan_interval_ms)


def namesrv_auth_tables(settings: NameServerSettings) -> ClusterAuthTables | None:
    """The users a name server with auth on decides with: its users file and bootstrap super
    user until brokers register theirs (None with auth off)."""
    if not settings.auth_enabled:
        return None
    local = load_users_file(settings.auth_users_file) if settings.auth_users_file else AuthTables()
    return ClusterAuthTables(local, settings.bootstrap_user())


async def run(settings: NameServerSettings) -> None:
    """Run a name server until SIGTERM or SIGINT, then stop gracefully within ``grace_ms``.

    Prints one line to stdout once serving (``namesrv listening on ADDR metrics URL``); the
    local supervisor and tests read the bound address from it.
    """
    server = NameServer(settings)
    await server.start()
    freeze_startup_heap()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    try:
        print(f"namesrv listening on {server.address} metrics {server.metrics_url or 'disabled'}", flush=True)
        await stop.wait()
        log.info("namesrv stopping (grace %s ms)", settings.grace_ms)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await server.close()
        print("namesrv stopped", file=sys.stderr, flush=True)
