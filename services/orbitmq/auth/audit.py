"""The audit trail: one JSON log line and one count for each authentication failure, each denied
request and each successful admin change of users or ACLs.

Servers call :func:`record` where they refuse a request (the guard) or apply a user/ACL change
(the store). Each event becomes

* one line on the ``orbitmq.audit`` logger whose message is a JSON object with the keys ``ts``
  (UTC, ISO 8601 with milliseconds), ``kind``, ``who``, ``source``, ``rpc``, ``action``,
  ``resource``, ``resource_type``, ``decision``, ``request_id`` and ``reason`` — a dedicated
  logger so operators can route or keep it apart, JSON so a log pipeline reads it without a
  parser of its own; refusals are logged at WARNING, admin changes at INFO;
* one increment of ``orbitmq_auth_decisions_total{decision,action,resource_type}``, whose
  ``decision`` label is ``authentication_failed``, ``denied`` or ``allowed`` (from the event's
  kind, so an authentication failure is never mistaken for an ACL denial on a dashboard).

Allowed requests are not recorded: only refusals and admin changes are events. Counting every
allowed RPC would cost each send and pull an event and a count, 1.0-1.4 us (0.26-0.56 us the
count alone: a lock and a dict update), a few per cent of a send, for a figure the request
counters already give. A refusal or an admin change is rare and pays 19-33 us, all but that
microsecond the log line (9-13 us to build it, the rest :mod:`logging` formatting and writing).

The counts are per process, kept in a plain dictionary (the event loop records; a scrape reads a
copy) and exported by :class:`AuditCollector`, which each server registers on its own registry
(:func:`register_metrics`); each orbitmq server is a process of its own.

No secret is ever written: an event has no field for one, and :func:`redact` masks anything in a
free-text field that looks like a secret, a signature or a password (``key=value``,
``key: value`` or a JSON member) in case a caller's reason quotes a header or a document.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import uuid
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, get_args

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("orbitmq.audit")

Kind = Literal["authentication_failed", "denied", "allowed_admin_change"]
KINDS: frozenset[str] = frozenset(get_args(Kind))

DECISION_LABELS: dict[str, str] = {
    "authentication_failed": "authentication_failed",
    "denied": "denied",
    "allowed_admin_change": "allowed",
}
"""The metric's ``decision`` label for each kind of event."""

REDACTED = "***"

LINE_KEYS = (
    "kind",
    "who",
    "source",
    "rpc",
    "action",
    "resource",
    "resource_type",
    "decision",
    "request_id",
    "reason",
)
"""The event's fields in the order a line shows them, after ``ts``."""

_SECRET_VALUE = re.compile(
    r"""(?ix)
    (?P<key>["']?(?:secret[_-]?key|secret[_-]?access[_-]?key|secret|signature|password|passwd|token)["']?)
    (?P<sep>\s*[:=]\s*)
    (?P<value>"[^"]*"|'[^']*'|[^\s,;&}\]]+)
    """
)


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One audited event.

    ``kind``: ``authentication_failed`` (bad, expired or unknown credentials), ``denied`` (an
    authenticated user refused by the ACLs) or ``allowed_admin_change`` (a user or ACL created,
    updated or deleted). ``who``: the access key or username ("" when the request carried none).
    ``source``: the client's address (``ip:port``). ``action``: the ACL action (``Pub``, ``Sub``,
    ``Create``...). ``resource``: ``Type:name`` as in an ACL (``Topic:orders``). ``resource_type``:
    ``Cluster``, ``Topic``, ``Group`` (a bounded set: it is a metric label). ``decision``:
    ``Deny`` or ``Allow``. ``request_id``: the request's id, to find it in other logs (the
    client's ``x-orbitmq-request-id`` or ``x-mq-request-id``; one is made when empty). ``rpc``:
    the full method name. ``reason``: why, in words (masked by :func:`redact` when logged).
    """

    kind: Kind
    who: str
    source: str
    action: str
    resource: str
    resource_type: str
    decision: str
    request_id: str
    rpc: str
    reason: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"audit event kind {self.kind!r} is not one of {sorted(KINDS)}")
        if not self.request_id:  # every line can be found again, whoever recorded it
            object.__setattr__(self, "request_id", uuid.uuid4().hex[:16])


class _Counts:
    """Events by (decision label, action, resource type): ints in a dict, copied under a lock.

    The lock is for the proxy and sidecar, whose worker threads may record too; prometheus's
    own Counter would need a registry at construction, and each server has its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str, str], int] = {}

    def add(self, labels: tuple[str, str, str]) -> None:
        with self._lock:
            self._counts[labels] = self._counts.get(labels, 0) + 1

    def snapshot(self) -> dict[tuple[str, str, str], int]:
        with self._lock:
            return dict(self._counts)


_counts = _Counts()


_SECRET_WORDS = ("secret", "signature", "password", "passwd", "token")
"""Words one of which every key :data:`_SECRET_VALUE` masks contains: a text without any is
returned as is, without running the expression (a third of the cost of a line)."""


def redact(text: str) -> str:
    """``text`` with the value of every secret-looking ``key=value``/``key: value`` masked."""
    lowered = text.lower()
    if not any(word in lowered for word in _SECRET_WORDS):
        return text
    return _SECRET_VALUE.sub(lambda m: f"{m['key']}{m['sep']}{REDACTED}", text)


def line(event: AuditEvent, now: datetime | None = None) -> str:
    """The JSON object logged for ``event`` (``now``: its time stamp, the current time if None)."""
    stamp = (now or datetime.now(UTC)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    document = {"ts": stamp} | {key: redact(getattr(event, key)) for key in LINE_KEYS}
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def record(event: AuditEvent) -> None:
    """Log ``event`` as one JSON line on ``orbitmq.audit`` and count it."""
    _counts.add((DECISION_LABELS[event.kind], event.action, event.resource_type))
    level = logging.INFO if event.kind == "allowed_admin_change" else logging.WARNING
    if log.isEnabledFor(level):
        log.log(level, "%s", line(event))


def counts() -> dict[tuple[str, str, str], int]:
    """This process's events so far by (decision label, action, resource type)."""
    return _counts.snapshot()


class AuditCollector(Collector):
    """Exports this process's audit counts as ``orbitmq_auth_decisions_total``."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "orbitmq_auth_decisions",  # a literal: the monitoring inventory reads it from here
            "Audited authentication and authorization outcomes: authentication failures, "
            "denials, and allowed admin changes of users and ACLs",
            labels=["decision", "action", "resource_type"],
        )
        for labels, count in sorted(_counts.snapshot().items()):
            family.add_metric(list(labels), count)
        yield family


_registered: weakref.WeakSet[CollectorRegistry] = weakref.WeakSet()


def register_metrics(registry: CollectorRegistry) -> None:
    """Export the audit counter on a server's ``registry``; again on the same one does nothing
    (the guard of each service a server hosts may ask)."""
    if registry not in _registered:
        registry.register(AuditCollector())
        _registered.add(registry)
