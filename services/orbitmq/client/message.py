"""The message type applications build, and what a send returns."""

from __future__ import annotations

import itertools
import os
import random
import time
from dataclasses import dataclass, field
from enum import Enum

from orbitmq.common.properties import SYSTEM_PROPERTIES, check_user_properties
from orbitmq.common.topics import KEY_SEPARATOR, Property
from orbitmq.v1 import common_pb2
from orbitmq.v1.broker_pb2 import SendStatus as _WireSendStatus


@dataclass(slots=True)
class Message:
    """A message to send: ``tags`` filter on the broker, ``keys`` are indexed for queries.

    ``properties`` are the application's own (SQL92 filters read them); a name the system uses
    (``TAGS``, ``UNIQ_KEY``, ``DELAY``, ... :data:`orbitmq.common.properties.SYSTEM_PROPERTIES`)
    is refused when the message is sent (:class:`~orbitmq.common.properties.SystemPropertyError`,
    a ``ValueError``): tags, keys and timing have their own fields.
    """

    topic: str
    body: bytes
    tags: str | None = None
    keys: list[str] | str | None = None
    properties: dict[str, str] = field(default_factory=dict)
    delay_level: int = 0
    """1..18: deliver after 1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h."""
    flag: int = 0
    deliver_at_ms: int | None = None
    """Deliver at this epoch millisecond (the broker's timer, any time up to its
    ``timer_max_delay_ms``, 3 days by default; a time already past is delivered now)."""
    delay_ms: int | None = None
    """Deliver this many milliseconds after the broker stores it (the broker's timer)."""
    system_properties: dict[str, str] = field(default_factory=dict)
    """System properties set by orbitmq's own components, not checked (the RocketMQ 5 proxy: a
    client's message id as ``UNIQ_KEY``, a FIFO group as ``__SHARDINGKEY``); not for
    applications."""
    born_host: str | None = None
    """Where the message was born, ``address:port``, when that is not this producer's own
    connection (the RocketMQ 5 proxy: the sending client's address). None: the broker records
    the connection the send came on. Sends with different born hosts still share calls: a call
    mixing them names each message's own (which the broker stores on its Python path)."""

    def to_proto(self, unique_key: str) -> common_pb2.Message:
        """The wire message; raises ``ValueError`` for a user property with a system name or a
        bad delay."""
        if not SYSTEM_PROPERTIES.isdisjoint(self.properties):
            check_user_properties(self.properties)
        properties = dict(self.properties)
        properties.update(self.system_properties)
        if self.tags:
            properties[Property.TAGS] = self.tags
        if self.keys:
            keys = self.keys if isinstance(self.keys, str) else KEY_SEPARATOR.join(self.keys)
            properties[Property.KEYS] = keys
        self._time_properties(properties)
        properties.setdefault(Property.UNIQ_KEY, unique_key)
        return common_pb2.Message(topic=self.topic, body=self.body, properties=properties, flag=self.flag)

    def _time_properties(self, properties: dict[str, str]) -> None:
        """The one way of timing the message that is set, as the property the broker reads."""
        timing = {
            name: value
            for name, value in (
                ("delay_level", self.delay_level or None),
                ("deliver_at_ms", self.deliver_at_ms),
                ("delay_ms", self.delay_ms),
            )
            if value is not None
        }
        if len(timing) > 1:
            raise ValueError(f"set one of delay_level, deliver_at_ms and delay_ms, not {', '.join(timing)}")
        for name, value in timing.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} {value!r} must be a non-negative whole number")
        if self.delay_level:
            if not 0 < self.delay_level <= 18:
                raise ValueError(f"delay level {self.delay_level} must be between 1 and 18")
            properties[Property.DELAY] = str(self.delay_level)
        elif self.deliver_at_ms is not None:
            properties[Property.TIMER_DELIVER_MS] = str(self.deliver_at_ms)
        elif self.delay_ms is not None:
            properties[Property.TIMER_DELAY_MS] = str(self.delay_ms)


class SendStatus(Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"

    @classmethod
    def from_wire(cls, status: int) -> SendStatus:
        return cls[_WireSendStatus.Name(status)]  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class SendResult:
    status: SendStatus
    msg_id: str
    """The producer's unique key (RocketMQ's msgId)."""
    offset_msg_id: str
    """Where the broker stored it (broker address + commit-log offset)."""
    broker_name: str
    queue_id: int
    queue_offset: int
    transaction_id: str = ""
    commit_log_offset: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "status": self.status.value,
            "msg_id": self.msg_id,
            "offset_msg_id": self.offset_msg_id,
            "broker": self.broker_name,
            "queue": self.queue_id,
            "queue_offset": self.queue_offset,
        }


class UniqueKeys:
    """RocketMQ-style unique keys: a per-process prefix, then time and a counter (32 hex)."""

    def __init__(self) -> None:
        self._prefix = f"{os.getpid() & 0xFFFF:04X}{random.getrandbits(48):012X}"
        self._start_ms = int(time.time() * 1000)
        self._counter = itertools.count()

    def next(self) -> str:
        elapsed = int(time.time() * 1000) - self._start_ms
        return f"{self._prefix}{elapsed & 0xFFFFFFFF:08X}{next(self._counter) & 0xFFFFFFFF:08X}"
