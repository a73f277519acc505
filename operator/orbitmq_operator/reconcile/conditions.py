"""Status conditions (``Ready``, ``Progressing``, ``Degraded``) as pure functions of what was
observed: the reconcilers gather facts, these functions say what a user reads in ``status``.

Conditions follow the Kubernetes conventions: one entry per type, a CamelCase ``reason`` for
scripts, a ``message`` that says what to do, and a ``lastTransitionTime`` that moves only when
the condition's ``status`` flips (so ``kubectl wait`` and alerting see real transitions, and an
unchanged status patch is an equal dict the reconciler can skip writing).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from orbitmq_operator.spec import ConditionType


class Reason(StrEnum):
    """Every reason the operator puts in a condition (one vocabulary for docs and alerts)."""

    RECONCILED = "Reconciled"
    INVALID_SPEC = "InvalidSpec"
    BROKERS_NOT_READY = "BrokersNotReady"
    REPLICAS_NOT_READY = "ReplicasNotReady"
    DRAIN_REQUIRED = "DrainRequired"
    DRAINING = "Draining"
    DRAIN_STUCK = "DrainStuck"
    ROLLING_UPDATE = "RollingUpdate"
    APPLY_FAILED = "ApplyFailed"
    CLUSTER_NOT_FOUND = "ClusterNotFound"
    BROKERS_UNREACHABLE = "BrokersUnreachable"
    WOULD_HIDE_MESSAGES = "WouldHideMessages"
    REFUSED = "Refused"
    APPLIED = "Applied"
    AUTHENTICATION_DISABLED = "AuthenticationDisabled"
    SECRET_NOT_FOUND = "SecretNotFound"
    INVALID_SECRET = "InvalidSecret"
    CERTIFICATE_PENDING = "CertificatePending"


@dataclass(frozen=True)
class Verdict:
    """One condition as decided now, before transition times are carried over."""

    type: ConditionType
    status: bool | None
    """True, False, or None for Unknown."""
    reason: Reason
    message: str = ""

    @property
    def status_text(self) -> str:
        return "Unknown" if self.status is None else str(self.status)


def conditions(
    verdicts: Iterable[Verdict], previous: Sequence[Mapping[str, Any]], generation: int, now: str
) -> list[dict[str, Any]]:
    """The ``status.conditions`` list (camelCase, sorted by type) for ``verdicts``.

    ``previous`` is what the resource's status holds now: a condition whose status did not flip
    keeps its ``lastTransitionTime``, so reconciling an unchanged resource gives an equal list.
    ``now`` is an RFC 3339 time, passed in so the function stays pure.
    """
    before = {c.get("type"): c for c in previous}
    out = []
    for verdict in sorted(verdicts, key=lambda v: v.type.value):
        old = before.get(verdict.type.value, {})
        same = old.get("status") == verdict.status_text
        out.append(
            {
                "type": verdict.type.value,
                "status": verdict.status_text,
                "reason": verdict.reason.value,
                "message": verdict.message,
                "lastTransitionTime": old.get("lastTransitionTime", now) if same else now,
                "observedGeneration": generation,
            }
        )
    return out


def _verdicts(
    reason: Reason, message: str, *, ready: bool, progressing: bool, degraded: bool
) -> list[Verdict]:
    """The three conditions with one reason; a ``Degraded`` that is False says nothing."""
    return [
        Verdict(ConditionType.READY, ready, reason, message),
        Verdict(ConditionType.PROGRESSING, progressing, reason, message),
        Verdict(ConditionType.DEGRADED, degraded, reason, message if degraded else ""),
    ]


def ready(reason: Reason, message: str) -> list[Verdict]:
    """All is as the spec says: Ready, not progressing, not degraded."""
    return _verdicts(reason, message, ready=True, progressing=False, degraded=False)


def waiting(reason: Reason, message: str) -> list[Verdict]:
    """Applied, and waiting for the world to catch up (pods starting, brokers registering):
    not ready, progressing, not degraded — nothing for the user to fix yet."""
    return _verdicts(reason, message, ready=False, progressing=True, degraded=False)


def progressing(reason: Reason, message: str) -> list[Verdict]:
    """Serving while the operator works toward the spec (a broker group draining)."""
    return _verdicts(reason, message, ready=True, progressing=True, degraded=False)


def refused(reason: Reason, message: str) -> list[Verdict]:
    """Something the user must change (a bad spec, a missing cluster, a change that would hide
    messages): not ready, not progressing (retrying alone will not help), degraded."""
    return _verdicts(reason, message, ready=False, progressing=False, degraded=True)


def degraded(reason: Reason, message: str) -> list[Verdict]:
    """Serving, but short of the spec (a slave down, surplus groups waiting for a drain)."""
    return _verdicts(reason, message, ready=True, progressing=False, degraded=True)


def generation_status(
    verdicts: Iterable[Verdict], generation: int, previous: Mapping[str, Any] | None, now: str
) -> dict[str, Any]:
    """``observedGeneration`` and ``conditions`` of a status; ``previous`` is the resource's
    whole status now (None when it has none), whose conditions give the transition times."""
    return {
        "observedGeneration": generation,
        "conditions": conditions(verdicts, (previous or {}).get("conditions", []), generation, now),
    }


def condition_of(status: Mapping[str, Any] | None, kind: ConditionType) -> Mapping[str, Any]:
    """A condition of a status dict by type ({} when absent)."""
    for condition in (status or {}).get("conditions", []) or []:
        if condition.get("type") == kind.value:
            return condition
    return {}
