"""Typed name server settings, loaded by :func:`orbitmq.common.settings.load_settings`.

Sources, later winning field by field: a YAML/JSON file (``--config``), environment variables
``ORBITMQ_NAMESRV_<FIELD>`` (e.g. ``ORBITMQ_NAMESRV_BROKER_EXPIRY_MS``), then command-line flags.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field, field_validator

from orbitmq.common.guard import UsersFileAuth
from orbitmq.common.server import split_host_port
from orbitmq.common.tls import ServerTls
from orbitmq.nameserver.routes import DEFAULT_BROKER_EXPIRY_MS

ENV_PREFIX = "ORBITMQ_NAMESRV_"


class NameServerSettings(ServerTls, UsersFileAuth):
    """TLS (``tls_cert``, ``tls_key``, ``tls_ca``, ``tls_require_client_cert``) comes from
    :class:`~orbitmq.common.tls.ServerTls`: off unless a certificate is given. Auth
    (``auth_enabled``, the bootstrap super user) from :class:`~orbitmq.common.guard.ServerAuth`.

    Users and ACLs are stored on brokers, which send them with their registrations
    (:mod:`orbitmq.nameserver.auth_tables`): with auth on, a name server decides with those, over
    the users of ``auth_users_file`` (optional: users only the name server knows, e.g. a route
    reader), and with the bootstrap super user (brokers register as it)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: str = "DefaultCluster"
    """With auth on, the cluster its cluster-wide RPCs (cluster info, topic lists, write-perm
    changes) are decided against (``Cluster:<name>`` in ACLs): those requests name no cluster.
    The operator sets it to the resource's name, as its brokers' ``cluster``."""

    listen: str = "0.0.0.0:9876"
    """gRPC address for brokers and clients (RocketMQ's name server port 9876)."""
    metrics_listen: str | None = "0.0.0.0:9877"
    """Prometheus /metrics HTTP address, next to the gRPC port; None or empty disables it."""
    broker_expiry_ms: int = Field(default=DEFAULT_BROKER_EXPIRY_MS, ge=1)
    """A broker silent this long is dropped: 120 s is four missed 30 s heartbeats, so one lost
    heartbeat or a short pause never unroutes a healthy broker. A broker may ask for less."""
    scan_interval_ms: int = Field(default=5_000, ge=10)
    """How often expired brokers are dropped (routes already skip them between scans)."""
    grace_ms: int = Field(default=5_000, ge=0)
    """On SIGTERM, how long in-flight calls may finish after health turns NOT_SERVING."""

    @field_validator("listen")
    @classmethod
    def _check_listen(cls, value: str) -> str:
        split_host_port(value)
        return value

    @field_validator("metrics_listen")
    @classmethod
    def _check_metrics_listen(cls, value: str | None) -> str | None:
        if value:
            split_host_port(value)
        return value or None
