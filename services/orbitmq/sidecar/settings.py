"""Typed sidecar settings: file < ``ORBITMQ_SIDECAR_*`` environment < flags."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass
from typing import Literal

from pydantic import ConfigDict, Field, field_validator

from orbitmq.common.guard import SyncedAuth
from orbitmq.common.names import validate_group_name, validate_topic_name
from orbitmq.common.namesrv_list import parse_namesrv_list
from orbitmq.common.server import split_host_port
from orbitmq.common.tls import ServerTls

ENV_PREFIX = "ORBITMQ_SIDECAR_"
SQL_PREFIX = "sql:"


@dataclass(frozen=True)
class SubscriptionSpec:
    """``TOPIC``, ``TOPIC:TagA || TagB`` or ``TOPIC:sql:a > 5``."""

    topic: str
    expression: str = "*"
    sql: bool = False

    @classmethod
    def parse(cls, text: str) -> SubscriptionSpec:
        topic, _, expression = text.partition(":")
        validate_topic_name(topic.strip())
        expression = expression.strip()
        if expression.startswith(SQL_PREFIX):
            condition = expression[len(SQL_PREFIX) :].strip()
            from orbitmq.filter.sql92 import validate_sql92

            validate_sql92(condition)
            return cls(topic.strip(), condition, True)
        return cls(topic.strip(), expression or "*")


class SidecarSettings(ServerTls, SyncedAuth):
    """TLS toward the applications (``tls_cert``, ``tls_key``, ``tls_ca``,
    ``tls_require_client_cert``) comes from :class:`~orbitmq.common.tls.ServerTls`: off unless a
    certificate is given (applications reach it over localhost). The sidecar's consumer reaches
    the cluster as any orbitmq client does, over TLS when ``ORBITMQ_TLS_*`` says so, signing as
    ``ORBITMQ_ACCESS_KEY``. Auth toward the applications (``auth_enabled``, the bootstrap super
    user) from :class:`~orbitmq.common.guard.ServerAuth`; their users are the brokers' (fetched from
    the name servers every ``auth_sync_interval_ms``) over those of ``auth_users_file``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    namesrv: str = "127.0.0.1:9876"
    """Name servers, ``host:port;host:port`` (``,`` works too; also ``ORBITMQ_NAMESRV``)."""
    group: str
    """The consumer group this sidecar (and the application behind it) belongs to."""
    subscriptions: list[str] = Field(min_length=1)
    """``TOPIC``, ``TOPIC:TagA || TagB`` or ``TOPIC:sql:<condition>``; in the environment a JSON list."""
    message_model: Literal["CLUSTERING", "BROADCASTING"] = "CLUSTERING"
    orderly: bool = False
    consume_from: Literal["first", "last", "timestamp"] = "last"
    consume_timestamp_ms: int | None = Field(default=None, ge=0)
    max_in_flight: int = Field(default=32, ge=1, le=10_000)
    """Most deliveries unacknowledged at once, over all application streams."""
    listen: str = "127.0.0.1:7001"
    """Where applications connect: localhost, as only the pod's own containers should."""
    metrics_listen: str | None = "0.0.0.0:7002"
    drain_timeout_ms: int = Field(default=10_000, ge=0)
    """On SIGTERM: how long to wait for in-flight acknowledgements before leaving the group."""
    instance_name: str = Field(default_factory=socket.gethostname)
    rebalance_ms: int = Field(default=20_000, ge=100)
    persist_ms: int = Field(default=5_000, ge=100)
    heartbeat_ms: int = Field(default=30_000, ge=100)
    lock_renew_ms: int = Field(default=20_000, ge=100)
    route_refresh_ms: int = Field(default=30_000, ge=100)
    send_timeout_ms: int = Field(default=10_000, ge=1)
    """Budget of one ``Send`` from an application, retries included: longer than a master
    failover, so an application's send rides one out (the producer's ``send_timeout_ms``)."""

    @field_validator("subscriptions", mode="before")
    @classmethod
    def _json_or_single(cls, value: object) -> object:
        if isinstance(value, str):
            text = value.strip()
            return json.loads(text) if text.startswith("[") else [text]
        return value

    @field_validator("subscriptions")
    @classmethod
    def _check_subscriptions(cls, value: list[str]) -> list[str]:
        specs = [SubscriptionSpec.parse(text) for text in value]
        topics = [s.topic for s in specs]
        duplicated = sorted({t for t in topics if topics.count(t) > 1})
        if duplicated:
            raise ValueError(f"topic(s) {duplicated} subscribed more than once; one expression per topic")
        return value

    @field_validator("group")
    @classmethod
    def _check_group(cls, value: str) -> str:
        return validate_group_name(value)

    @field_validator("namesrv")
    @classmethod
    def _check_namesrv(cls, value: str) -> str:
        parse_namesrv_list(value)
        return value

    @field_validator("listen", "metrics_listen")
    @classmethod
    def _check_address(cls, value: str | None) -> str | None:
        if value:
            split_host_port(value)
        return value or None

    @property
    def specs(self) -> list[SubscriptionSpec]:
        return [SubscriptionSpec.parse(text) for text in self.subscriptions]
