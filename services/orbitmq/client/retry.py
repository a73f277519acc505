"""How a send rides out a broker failure: the producer's one retry policy, pure and testable.

A send has one time budget, ``send_timeout_ms`` (default 10 s). It is longer than a failover on
purpose: the local supervisor declares a master dead after 3 s, promotes the slave, and the new
master registers with the name servers at once, so a send that keeps trying for 10 s reaches the
new master instead of failing in the user's face. Within the budget a retriable failure is tried
again after a backoff that doubles from ``retry_backoff_ms`` up to ``retry_backoff_max_ms``
(each pause drawn between half and all of that, so many producers do not query the name server
in step), on a route fetched again from the name servers. One attempt waits at most
``attempt_timeout_ms`` for a broker's answer, so a hung (not dead) master cannot eat the whole
budget; it is longer than a SYNC_MASTER's default wait for its slave (3 s), whose outcome is an
answer, not a timeout.

What is retried (:func:`classify`): a broker or name server that cannot be reached or is
shutting down (``UNAVAILABLE``, which also carries ``SERVICE_NOT_AVAILABLE``), an attempt that
timed out (``DEADLINE_EXCEEDED``), and a broker that is no longer master (``SLAVE_READ_ONLY``).
Everything else (a bad message, a missing permission) fails at once: it would fail the same way.

What goes to another broker group at once (:data:`MOVING_REASONS`): a broker's refusal for a
reason of its own, ``DISK_FULL``. RocketMQ's broker answers a full disk with SERVICE_NOT_AVAILABLE
("the broker's disk is full"), one of the producer's ``retryResponseCodes``, and the retry picks a
queue on another broker; so here a send not bound to its queue tries each broker group of the
route once, and fails at once (``DISK_FULL``, not retriable: nothing was stored) when every group
refused it, rather than waiting out its budget on a disk an operator has to free. A send with a
sharding key or an explicit queue is never moved (RocketMQ's selector sends are not retried
either): it fails at once.

What is *not* retried: a SYNC_MASTER's ``FLUSH_SLAVE_TIMEOUT`` and ``SLAVE_NOT_AVAILABLE``. They
are send statuses, not errors: the master has stored the message and only its copy on a slave is
missing, so sending again would store it twice. The caller gets the result with that status
(RocketMQ's default, ``retryAnotherBrokerWhenNotStoreOK = false``).

Duplicates: a retry after ``DEADLINE_EXCEEDED`` or a connection lost mid-call may repeat a send
the broker did store. Delivery is at least once, as in RocketMQ; the producer's unique key
(``msg_id``, the same on every attempt of one send) lets consumers drop repeats.
"""

from __future__ import annotations

from dataclasses import dataclass

import grpc

from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.v1.broker_pb2 import ErrorReason

RETRIABLE_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
RETRIABLE_REASONS = frozenset({ErrorReason.SERVICE_NOT_AVAILABLE, ErrorReason.SLAVE_READ_ONLY})
MOVING_REASONS = frozenset({ErrorReason.DISK_FULL})
"""Refusals that say nothing of other broker groups: tried on another one at once (see above)."""
MIN_ATTEMPT_MS = 100
"""No retry starts with less of the budget left than this: it could not get an answer."""


@dataclass(frozen=True, slots=True)
class SendRetryPolicy:
    """The budget and pacing of one send's attempts (see the module docstring for the defaults)."""

    send_timeout_ms: int = 10_000
    """Budget of one send, every attempt and pause included (≥ the failover window of ~3 s)."""
    attempt_timeout_ms: int = 5_000
    """Longest wait for one broker's answer (> a SYNC_MASTER's 3 s wait for its slave)."""
    retry_backoff_ms: int = 50
    """Pause before the first retry; doubles on each further retry."""
    retry_backoff_max_ms: int = 1_000
    """Longest pause: how late, at worst, a producer notices that a new master is registered."""

    def __post_init__(self) -> None:
        for name in ("send_timeout_ms", "attempt_timeout_ms", "retry_backoff_ms", "retry_backoff_max_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, not {getattr(self, name)}")

    def with_budget(self, send_timeout_ms: int | None) -> SendRetryPolicy:
        """This policy with another budget (a per-call ``timeout_ms``); itself when None."""
        if send_timeout_ms is None or send_timeout_ms == self.send_timeout_ms:
            return self
        return SendRetryPolicy(
            send_timeout_ms, self.attempt_timeout_ms, self.retry_backoff_ms, self.retry_backoff_max_ms
        )

    def attempt_timeout_s(self, elapsed_ms: float) -> float:
        """How long the next attempt may wait, ``elapsed_ms`` into the send."""
        remaining = self.send_timeout_ms - elapsed_ms
        return max(MIN_ATTEMPT_MS, min(self.attempt_timeout_ms, remaining)) / 1000

    def pause_ms(self, retry: int, elapsed_ms: float, jitter: float) -> float | None:
        """The pause before retry number ``retry`` (1 = the first), ``elapsed_ms`` into the send;
        None when the budget is spent (the send fails). ``jitter`` in [0, 1) picks the pause
        between half and all of the doubled backoff; a pause that would overrun the budget is
        cut short, so the last attempt comes just before the deadline."""
        room = self.send_timeout_ms - elapsed_ms - MIN_ATTEMPT_MS
        if room <= 0:
            return None
        backoff = min(self.retry_backoff_max_ms, self.retry_backoff_ms * 2 ** min(retry - 1, 30))
        return min(backoff * (0.5 + jitter / 2), room)


@dataclass(frozen=True, slots=True)
class Failure:
    """One failed attempt, as the retry loop and the final error message need it."""

    reason: int
    """The ``ErrorReason``; SERVICE_NOT_AVAILABLE for a transport failure that carries none."""
    label: str
    """What a user reads first: the reason's name, or the gRPC code's when there is no reason."""
    detail: str
    """One line saying what happened (the broker's message, or the transport's last words)."""
    retriable: bool
    moves: bool = False
    """Another broker group may take what this one refused (:data:`MOVING_REASONS`)."""


def classify(error: BaseException) -> Failure:
    """The :class:`Failure` of an attempt that raised ``error`` (a gRPC error from a broker, or
    an :class:`RpcFailure` from the route lookup)."""
    if isinstance(error, grpc.aio.AioRpcError):
        code = error.code()
        failure = failure_of(error)
        if failure is not None:
            return _of_rpc_failure(failure, code in RETRIABLE_CODES)
        retriable = code in RETRIABLE_CODES
        reason = ErrorReason.SERVICE_NOT_AVAILABLE if retriable else ErrorReason.ERROR_REASON_UNSPECIFIED
        return Failure(reason, code.name, _last_words(error.details() or ""), retriable)
    if isinstance(error, RpcFailure):
        return _of_rpc_failure(error, False)
    raise TypeError(f"not a send failure: {error!r}")


def _of_rpc_failure(failure: RpcFailure, transport_retriable: bool) -> Failure:
    retriable = transport_retriable or failure.reason in RETRIABLE_REASONS
    moves = not retriable and failure.reason in MOVING_REASONS
    return Failure(failure.reason, failure.reason_name, _one_line(failure.message), retriable, moves)


def _last_words(details: str) -> str:
    """gRPC's transport details end with the cause after a chain of prefixes ("failed to connect
    to all addresses; last error: UNKNOWN: ipv4:…: Connection refused"): keep the cause."""
    return _one_line(details.rsplit(": ", 1)[-1])


def _one_line(text: str) -> str:
    return " ".join(text.split())


class SendFailed(RpcFailure):
    """A send that failed for good: at once (not retriable) or when its budget was spent.

    The message is one line naming the topic, the broker tried last and the reason, e.g.
    ``send to topic Orders failed on broker broker-a (127.0.0.1:10911): UNAVAILABLE (Connection
    refused) after 10.0 s of retries (23 attempts)``. ``reason`` is the last failure's, so a caller
    (or the sidecar, which returns it as its own status) decides by it as for any ``RpcFailure``.
    """

    def __init__(
        self,
        topic: str,
        broker_name: str | None,
        address: str | None,
        failure: Failure,
        elapsed_s: float,
        attempts: int,
    ) -> None:
        where = f" on broker {broker_name} ({address})" if broker_name else ""
        what = f"{failure.label} ({failure.detail})" if failure.detail else failure.label
        tail = f" after {elapsed_s:.1f} s of retries ({attempts} attempts)" if attempts > 1 else ""
        super().__init__(
            failure.reason,
            f"send to topic {topic} failed{where}: {what}{tail}",
            topic=topic,
            broker=broker_name or "",
        )
        self.topic = topic
        self.broker_name = broker_name
        self.address = address
        self.failure = failure
        self.elapsed_s = elapsed_s
        self.attempts = attempts

    @property
    def retriable(self) -> bool:  # type: ignore[override]
        """Whether sending again later may succeed (the last failure was a retriable one)."""
        return self.failure.retriable
