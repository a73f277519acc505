"""Typed proxy settings, loaded by :func:`orbitmq.common.settings.load_settings`.

Sources, later winning field by field: a YAML/JSON file (``--config``), environment variables
``ORBITMQ_PROXY_<FIELD>`` (e.g. ``ORBITMQ_PROXY_LISTEN``), then command-line flags.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, field_validator, model_validator

from orbitmq.common.credentials import Credentials, credentials_of, own_credentials
from orbitmq.common.guard import SyncedAuth
from orbitmq.common.namesrv_list import parse_namesrv_list
from orbitmq.common.server import split_host_port
from orbitmq.common.tls import ServerTls
from orbitmq.common.topics import DELAY_LEVELS, parse_delay_levels

ENV_PREFIX = "ORBITMQ_PROXY_"
MIB = 1024 * 1024


class ProxySettings(ServerTls, SyncedAuth):
    """TLS toward the RocketMQ 5 clients (``tls_cert``, ``tls_key``, ``tls_ca``,
    ``tls_require_client_cert``) comes from :class:`~orbitmq.common.tls.ServerTls`: off unless a
    certificate is given. The proxy reaches the cluster as any orbitmq client does, over TLS
    when ``ORBITMQ_TLS_*`` says so (the clients' certificate and the cluster's may differ).

    Auth toward the clients (``auth_enabled``, the bootstrap super user, ``auth_window_ms``)
    comes from :class:`~orbitmq.common.guard.ServerAuth`: with it on, every v2 call must carry
    the client's session credentials (RocketMQ 5's ``MQv2-HMAC-SHA1`` signature) and is decided
    against the users and ACLs of ``auth_users_file``. Toward the cluster the proxy signs as
    itself: :func:`cluster_credentials`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    access_key: str | None = None
    """The user the proxy signs its own calls to name servers and brokers as (a super user, or
    one granted ``Pub``/``Sub`` on what its clients use and ``Get`` on ``Cluster``); unset:
    ``ORBITMQ_ACCESS_KEY``, then the bootstrap super user."""
    secret_key: str | None = Field(default=None, repr=False)
    """``access_key``'s secret (prefer ``ORBITMQ_PROXY_SECRET_KEY`` to a config file)."""

    listen: str = "0.0.0.0:8081"
    """gRPC address of ``apache.rocketmq.v2.MessagingService`` (RocketMQ 5 proxy's gRPC port)."""
    metrics_listen: str | None = "0.0.0.0:8082"
    """Prometheus /metrics HTTP address; None or empty disables it."""
    namesrv: str | None = None
    """Name servers ``host:port;host:port`` (or ``,``-separated); None reads ``ORBITMQ_NAMESRV``,
    then 127.0.0.1:9876."""
    advertise: str | None = None
    """``host:port`` put into routes when a client's QueryRoute names no access point (clients
    normally do, and then get back the address they used, which works behind a Service)."""
    send_timeout_ms: int = Field(default=10_000, ge=100)
    """Budget of one send through orbitmq's producer (retries on re-fetched routes included),
    cut to the client's own deadline when that is shorter (the Python client's default is 3 s)."""
    max_body_bytes: int = Field(default=4 * MIB, ge=1)
    """Largest message body, told to clients in their settings (the brokers' default 4 MiB)."""
    default_topic_queue_nums: int = Field(default=4, ge=1)
    """Queues per broker of a topic that the first send creates (as orbitmq's producer)."""
    delay_levels: str = DELAY_LEVELS
    """The brokers' delay levels: a delivery timestamp maps to the shortest level not shorter
    than the time left, so this must equal the brokers' ``delay_levels``."""
    heartbeat_ms: int = Field(default=30_000, ge=10)
    """How often the proxy heartbeats its transaction producer groups to every master, and its
    own producer each broker it sends to (below the brokers' ``channel_expiry_ms``)."""
    auto_renew_slice_ms: int = Field(default=30_000, ge=1_000)
    """How long a push consumer's message (received with ``auto_renew``) is hidden at a time;
    the proxy renews it shortly before each slice ends until the client acks it or goes away,
    so a shorter slice only costs more renewals, and a client that vanished without a word
    gets its messages back sooner."""
    grace_ms: int = Field(default=5_000, ge=0)
    """On SIGTERM, how long in-flight calls may finish after health turns NOT_SERVING."""

    @field_validator("listen", "advertise")
    @classmethod
    def _check_address(cls, value: str | None) -> str | None:
        if value:
            split_host_port(value)
        return value or None

    @field_validator("metrics_listen")
    @classmethod
    def _check_metrics_listen(cls, value: str | None) -> str | None:
        if value:
            split_host_port(value)
        return value or None

    @field_validator("namesrv")
    @classmethod
    def _check_namesrv(cls, value: str | None) -> str | None:
        if value:
            parse_namesrv_list(value)
        return value or None

    @field_validator("delay_levels")
    @classmethod
    def _check_delay_levels(cls, value: str) -> str:
        parse_delay_levels(value)
        return value

    @model_validator(mode="after")
    def _check_access_key(self) -> ProxySettings:
        credentials_of(self.access_key, self.secret_key, "access_key", "secret_key")
        return self


def cluster_credentials(settings: ProxySettings) -> Credentials | None:
    """What the proxy signs its calls to the cluster with: ``access_key``/``secret_key``, else
    ``ORBITMQ_ACCESS_KEY``/``ORBITMQ_SECRET_KEY``, else its bootstrap super user (the cluster's
    servers share theirs, as ``orbitmq local up --auth`` sets it); None signs nothing."""
    return (
        credentials_of(settings.access_key, settings.secret_key, "access_key", "secret_key")
        or Credentials.from_env()
        or own_credentials(settings)
    )
