"""The gRPC server every orbitmq process runs, with what operators expect of each.

:class:`GrpcServer` adds to a ``grpc.aio`` server: standard health checking, server
reflection, the error mapping of :mod:`orbitmq.common.rpc`, a Prometheus ``/metrics`` HTTP
port, and a graceful stop — health flips to NOT_SERVING first (so load balancers and
Kubernetes stop sending), then in-flight calls get a grace period to finish.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection, reflection_pb2_grpc
from prometheus_client import CollectorRegistry, start_http_server

from orbitmq.auth import audit
from orbitmq.common.errors import OrbitError
from orbitmq.common.guard import Guard
from orbitmq.common.procs import command_of, port_listeners
from orbitmq.common.rpc import GenericRegistrar, error_mapping_registrar, with_error_mapping
from orbitmq.common.runtime_metrics import register_runtime
from orbitmq.common.tls import CertificateReloader, ServerTls, server_credentials

log = logging.getLogger(__name__)

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
HEALTH_PATH = "/health"
"""The metrics port's plaintext health answer (200 SERVING, 503 NOT_SERVING): what a
Kubernetes probe asks when the gRPC port serves TLS only, which the kubelet's gRPC probe cannot
speak (as etcd's ``/health`` on its metrics port)."""

MAX_MESSAGE_BYTES = 64 * 1024 * 1024
"""Largest gRPC message: a 4 MiB body and a full batch fit with room to spare."""

GRPC_OPTIONS = [
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
    # A client channel to a server that was down retries its connection with exponential
    # backoff, by default up to 120 s: a name server or a new master back after a minute would
    # stay unused for another two. Five seconds keeps the retries cheap and the return quick.
    ("grpc.max_reconnect_backoff_ms", 5_000),
    # A name that did not resolve (a pod's DNS record before its pod has an IP: a broker
    # starting beside its name server) is looked up again only after 30 s by default, so a
    # new broker group registered half a minute late. One second still spares the resolver.
    ("grpc.dns_min_time_between_resolutions_ms", 1_000),
]


def split_host_port(address: str) -> tuple[str, int]:
    """``"host:port"`` → (host, port); the error names the value and the rule."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"address {address!r} must be 'host:port' with a port from 0 to 65535")
    return host.strip("[]"), int(port)


class StartupError(OrbitError):
    """A process cannot start as configured; the message is one line that names the value,
    the rule it broke and what to do, because the command line prints it instead of a traceback."""


class ListenError(StartupError):
    """An address could not be bound (port in use, no such local address, no permission)."""


def bind_problem(host: str, port: int) -> str:
    """Why ``host:port`` cannot be bound, found by trying it with a plain socket.

    gRPC reports a failed bind only as "Failed to bind" (the reason goes to its C-core log,
    which the CLI silences), so the reason is asked of the operating system directly.
    """
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, kind, proto, _, address = infos[0]
        with socket.socket(family, kind, proto) as probe:
            probe.bind(address)
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            return port_in_use(port)
        return error.strerror or str(error)
    return "the address could not be bound"


def port_in_use(port: int) -> str:
    """The reason for a busy port, naming the process that listens on it when /proc tells."""
    holders = port_listeners(port)
    if not holders:
        return f"port {port} is already in use by another process"
    command = command_of(holders[0])
    return f"port {port} is already in use by PID {holders[0]}" + (f" ({command})" if command else "")


def listen_error(what: str, address: str, flag: str, reason: str) -> ListenError:
    """One line: what could not listen where, why, and the flag that chooses another address."""
    stop = "stop that process or " if "in use" in reason else ""
    return ListenError(
        f"{what} cannot listen on {address}: {reason}; {stop}choose another address with {flag} "
        "(port 0 picks a free one)"
    )


class GrpcServer:
    def __init__(
        self,
        name: str,
        listen: str,
        *,
        metrics_listen: str | None = None,
        registry: CollectorRegistry | None = None,
        reflection_pool: Any = None,
        tls: ServerTls | None = None,
        guard: Guard | None = None,
    ) -> None:
        """``reflection_pool``: where server reflection looks descriptors up (protobuf's default
        pool when None; a service generated into a private pool passes one that finds it).
        ``tls``: serve TLS (only) when it has a certificate, re-reading its files when they
        change (:class:`~orbitmq.common.tls.CertificateReloader`); plaintext otherwise.
        ``guard``: authenticate and authorize every call of the services added (auth off: None,
        and handlers are registered without it); with one, ``/metrics`` also serves the audit
        counter (``orbitmq_auth_decisions_total``) of what it refuses."""
        self.name = name
        self.guard = guard
        self._tls = tls
        self.tls_reloader: CertificateReloader | None = None
        self._reflection_pool = reflection_pool
        self._listen = listen
        split_host_port(listen)
        self._metrics_listen = metrics_listen
        self.registry = registry or CollectorRegistry()
        self.runtime = register_runtime(self.registry)
        """Process, thread and event-loop task gauges; servers add their per-client tables
        (:meth:`~orbitmq.common.runtime_metrics.RuntimeCollector.table`)."""
        if guard is not None:
            audit.register_metrics(self.registry)
        self.server = grpc.aio.server(options=GRPC_OPTIONS)
        self._health = health.aio.HealthServicer()
        self._services: list[str] = []
        self._metrics_http: Any = None
        self.serving = False
        """What the health service answers for the whole server (and ``/health`` with it)."""
        self.port = 0
        self.metrics_port = 0

    def add_service(self, full_name: str, register: Callable[[grpc.aio.Server], None]) -> None:
        """``register`` is the generated ``add_XServicer_to_server`` bound to a servicer; its
        handlers are registered with orbitmq's error mapping (:func:`error_mapping_registrar`),
        checked by the guard inside it (so its refusals are mapped like any failure)."""
        guard = self.guard
        registrar = (
            error_mapping_registrar(self.server)
            if guard is None
            else GenericRegistrar(self.server, lambda h, m: with_error_mapping(guard.wrap(h, m), m))
        )
        self._register(full_name, register, registrar)
        self._services.append(full_name)

    def _register(
        self,
        full_name: str,
        register: Callable[[grpc.aio.Server], None],
        registrar: GenericRegistrar | None = None,
    ) -> None:
        """Run generated registration code through ``registrar`` (generic handlers only)."""
        registrar = registrar or GenericRegistrar(self.server)
        register(registrar)  # type: ignore[arg-type]
        registrar.check(full_name)

    @property
    def address(self) -> str:
        host, _ = split_host_port(self._listen)
        host = "127.0.0.1" if host in ("0.0.0.0", "") else host
        return f"[{host}]:{self.port}" if ":" in host else f"{host}:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        if not self.metrics_port:
            return None
        host, _ = split_host_port(self._metrics_listen or "")
        host = "127.0.0.1" if host in ("0.0.0.0", "") else host
        return f"http://{host}:{self.metrics_port}/metrics"

    def bind(self) -> int:
        """Reserve the listening port (before start, so the address can be advertised)."""
        if not self.port:
            secure = server_credentials(self._tls) if self._tls is not None else None
            try:
                if secure is None:
                    self.port = self.server.add_insecure_port(self._listen)
                else:
                    credentials, self.tls_reloader = secure
                    self.port = self.server.add_secure_port(self._listen, credentials)
            except RuntimeError:  # grpc's only word for a failed bind
                self.port = 0
            if self.port == 0:
                host, port = split_host_port(self._listen)
                raise listen_error(self.name, self._listen, "--listen", bind_problem(host, port))
        return self.port

    async def start(self) -> None:
        self.bind()
        self.runtime.loop = asyncio.get_running_loop()
        # grpc.aio asks generic handlers in the order they were added, one Python call each:
        # the orbitmq services come first, health and reflection after them.
        self._register(
            HEALTH_SERVICE, lambda s: health_pb2_grpc.add_HealthServicer_to_server(self._health, s)
        )
        services = [*self._services, HEALTH_SERVICE, reflection.SERVICE_NAME]
        self._register(
            reflection.SERVICE_NAME,
            lambda s: reflection_pb2_grpc.add_ServerReflectionServicer_to_server(
                reflection.aio.ReflectionServicer(services, pool=self._reflection_pool), s
            ),
        )
        if self._metrics_listen is not None:
            self._start_metrics(self._metrics_listen)  # before serving: a bad port stops nothing
        await self.server.start()
        for service in ["", *self._services]:
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        self.serving = True
        log.info(
            "%s serving on %s%s (metrics %s)",
            self.name,
            self.address,
            " with TLS" if self.tls_reloader else "",
            self.metrics_url,
        )

    def _start_metrics(self, listen: str) -> None:
        host, port = split_host_port(listen)
        try:
            server, _thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as error:
            reason = port_in_use(port) if error.errno == errno.EADDRINUSE else error.strerror or str(error)
            raise listen_error(f"{self.name} metrics", listen, "--metrics-listen", reason) from None
        server.set_app(self._with_health(server.get_app()))
        self._metrics_http = server
        self.metrics_port = server.server_port

    def _with_health(self, metrics: Callable[..., Any]) -> Callable[..., Any]:
        """The metrics WSGI app, answering :data:`HEALTH_PATH` from :attr:`serving` too."""

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            if environ.get("PATH_INFO") != HEALTH_PATH:
                return metrics(environ, start_response)
            status = "200 OK" if self.serving else "503 Service Unavailable"
            start_response(status, [("Content-Type", "text/plain")])
            return [b"SERVING\n" if self.serving else b"NOT_SERVING\n"]

        return app

    async def set_serving(self, serving: bool) -> None:
        status = (
            health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for service in ["", *self._services]:
            await self._health.set(service, status)
        self.serving = serving

    async def stop(self, grace_s: float = 5.0) -> None:
        """NOT_SERVING, then let in-flight calls finish for up to ``grace_s``; idempotent."""
        await self.set_serving(False)
        await self.server.stop(grace_s)
        if self._metrics_http is not None:
            self._metrics_http.shutdown()
            self._metrics_http.server_close()
            self._metrics_http = None
        log.info("%s stopped", self.name)
