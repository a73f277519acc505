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
    """RocketMQ's messageModel. ``CLUSTERING``: the group's sidecars share the subscribed queues,
    each message goes to one of them, offsets are kept on the brokers and a ``later`` is retried.
    ``BROADCASTING``: every sidecar of the group gets every message; offsets are kept in a local
    file named by the host and ``instance_name`` (``<host>@<instance_name>/<group>/offsets.json``
    under ``$ORBITMQ_LOCAL_OFFSETS_DIR``, else ``~/.orbitmq_offsets``), where a restarted sidecar
    resumes, not on the brokers; a ``later`` drops the message with a warning, and ``orderly`` is
    refused."""
    orderly: bool = False
    consume_from: Literal["first", "last", "timestamp"] = "last"
    """Where the group starts on a queue it has no committed offset for (RocketMQ's
    consumeFromWhere): ``last`` at the queue's end (what was sent before the group first ran is
    skipped), ``first`` at the oldest message retention kept, ``timestamp`` at the messages
    stored from ``consume_timestamp_ms`` on. A queue with a committed offset resumes there
    whatever this says; retry queues always start at their first message."""
    consume_timestamp_ms: int | None = Field(default=None, ge=0)
    """With ``consume_from`` ``timestamp``: where a new group starts, in ms since the Unix epoch
    (RocketMQ's consumeTimestamp); unset, half an hour before the queue is first read. Ignored
    otherwise, and on queues the group has committed an offset for."""
    max_in_flight: int = Field(default=32, ge=1, le=10_000)
    """Most deliveries unacknowledged at once, over all application streams."""
    listen: str = "127.0.0.1:7001"
    """Where applications connect: localhost, as only the pod's own containers should."""
    metrics_listen: str | None = "0.0.0.0:7002"
    drain_timeout_ms: int = Field(default=10_000, ge=0)
    """On SIGTERM: how long to wait for in-flight acknowledgements before leaving the group."""
    instance_name: str = Field(default_factory=socket.gethostname)
    """Client instance name (default: the host name). With ``BROADCASTING`` it names the offsets
    file, so it must stay the same across restarts for a sidecar to resume where it stopped, and
    differ between sidecars of one group sharing a host and offsets directory (the second to
    start is refused)."""
    rebalance_ms: int = Field(default=20_000, ge=100)
    """How often the sidecar recomputes which queues of its subscriptions it consumes (RocketMQ's
    rebalance interval, 20 s). It also rebalances at once when a broker pushes a change of the
    group's members, so this bounds how long a missed change leaves a queue unconsumed or
    consumed by two members; shorter costs more calls to the brokers."""
    persist_ms: int = Field(default=5_000, ge=100)
    """How often consumed offsets are committed to the brokers (to the local file when
    broadcasting), besides the commits pulls carry (RocketMQ's persistConsumerOffsetInterval,
    5 s). A restarted or replaced member resumes from the last commit, so up to this much
    acknowledged work is delivered again; shorter means fewer redeliveries, more commits."""
    heartbeat_ms: int = Field(default=30_000, ge=100)
    """How often the sidecar's consumer and producer tell every broker of their routes that they
    are alive, with the group's subscriptions (RocketMQ's heartbeatBrokerInterval, 30 s). A
    broker drops a client silent for its ``channel_expiry_ms`` (120 s) from its groups: keep
    this well below that, so one or two lost heartbeats never cost a rebalance."""
    lock_renew_ms: int = Field(default=20_000, ge=100)
    """With ``orderly``: how often the sidecar locks (or renews its locks on) the queues it was
    assigned (RocketMQ's lock interval, 20 s). A broker frees a lock not renewed for its
    ``lock_expiry_ms`` (60 s) and another member may take the queue: keep this well below it,
    so a late renewal never lets two members process one queue at once."""
    route_refresh_ms: int = Field(default=30_000, ge=100)
    """How often the routes of the subscribed topics are read from the name servers (RocketMQ's
    pollNameServerInterval, 30 s): how soon the sidecar sees queues added to a topic, a new
    broker group or a master changed by a failover. Every second while a subscribed topic has
    no route yet. Shorter costs more name-server calls."""
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
