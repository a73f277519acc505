"""Posting Kubernetes Events on a resource: the operator's deliberate record of scaling steps,
role changes and refusals.

``kopf.event`` rather than ``kopf.info``/``kopf.warn``: those obey ``settings.posting.level``,
which the operator raises to WARNING so that kopf's per-handler log lines do not become an
Event on every resync; the events posted here must never be filtered out with them.
"""

from __future__ import annotations

import kopf


def normal(body: kopf.Body, reason: str, message: str) -> None:
    kopf.event(body, type="Normal", reason=str(reason), message=message)


def warning(body: kopf.Body, reason: str, message: str) -> None:
    kopf.event(body, type="Warning", reason=str(reason), message=message)
