"""kopf's peering resources, which the operator's leader election stands on.

kopf has no leases: replicas of an operator announce themselves (identity, priority, lifetime)
in the status of a peering object, ``ClusterKopfPeering`` for an operator watching every
namespace, ``KopfPeering`` in each watched namespace otherwise, and an operator that sees a
peer of *higher* priority pauses until that peer's keep-alives stop. Two replicas with the same
priority would both pause and warn, so each replica starts with a distinct random priority
(``--priority`` overrides it): exactly one acts, and when it dies another takes over once the
dead one's lifetime (60 s) has run out.

The CRDs are cluster-wide and installed with the chart (or ``orbitmq-operator
--print-peering-crds | kubectl apply -f -``). The peering *objects* have one owner, whoever
installs the operator: the chart makes them (``templates/peering.yaml``; ``helm uninstall``
removes them), ``orbitmq-operator --print-peering`` prints them for an install by hand. The
operator never creates one: it waits for it at start (:func:`wait_for_peering`), since kopf
without its peering object would act beside its peers (a keep-alive to a missing object only
logs "not found"). When the operator created a missing one itself, a ``helm install`` whose
operator pod started first failed on the chart's own object: "already exists".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from lightkube import ApiError, Client
from lightkube.generic_resource import create_global_resource, create_namespaced_resource

PEERING_GROUP = "kopf.dev"
PEERING_VERSION = "v1"
PEERING_WAIT_S = 120.0
"""How long the operator waits at start for its peering object before it gives up (exit 2;
its pod restarts): longer than Helm takes to create a release's objects after the
Deployment's, short enough that a missing object shows as a crash loop, not a silent hang."""
WAIT_LOG_INTERVAL_S = 30.0
"""How often a wait still under way is logged again."""

log = logging.getLogger(__name__)

ClusterKopfPeering = create_global_resource(
    PEERING_GROUP, PEERING_VERSION, "ClusterKopfPeering", "clusterkopfpeerings"
)
KopfPeering = create_namespaced_resource(PEERING_GROUP, PEERING_VERSION, "KopfPeering", "kopfpeerings")


def _crd(kind: str, plural: str, scope: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{PEERING_GROUP}"},
        "spec": {
            "group": PEERING_GROUP,
            "scope": scope,
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": PEERING_VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                            },
                        }
                    },
                }
            ],
        },
    }


def peering_crds() -> list[dict[str, Any]]:
    """The two CRDs kopf's peering uses (as in kopf's own ``peering.yaml``)."""
    return [
        _crd("ClusterKopfPeering", "clusterkopfpeerings", "Cluster"),
        _crd("KopfPeering", "kopfpeerings", "Namespaced"),
    ]


def peering_objects(name: str, namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """The peering object(s) an operator named ``name`` needs: a ``KopfPeering`` in each of
    ``namespaces``, or one ``ClusterKopfPeering`` when ``namespaces`` is empty (every namespace)."""
    version = f"{PEERING_GROUP}/{PEERING_VERSION}"
    if not namespaces:
        return [{"apiVersion": version, "kind": "ClusterKopfPeering", "metadata": {"name": name}}]
    return [
        {"apiVersion": version, "kind": "KopfPeering", "metadata": {"name": name, "namespace": ns}}
        for ns in namespaces
    ]


def describe(obj: dict[str, Any]) -> str:
    """``KopfPeering team-a/mq-operator``, ``ClusterKopfPeering mq-operator``."""
    meta = obj["metadata"]
    where = f"{meta['namespace']}/" if "namespace" in meta else ""
    return f"{obj['kind']} {where}{meta['name']}"


def missing_peerings(client: Client, name: str, namespaces: Sequence[str]) -> list[str]:
    """The peering objects of :func:`peering_objects` not in the cluster, described."""
    missing = []
    for obj in peering_objects(name, namespaces):
        try:
            if namespaces:
                client.get(KopfPeering, name, namespace=obj["metadata"]["namespace"])
            else:
                client.get(ClusterKopfPeering, name)
        except ApiError as error:
            # a 404 naming no object: the kind itself is unknown (the CRDs are not installed)
            details = error.status.details
            if error.status.code != 404 or details is None or details.name != name:
                raise
            missing.append(describe(obj))
    return missing


class PeeringMissing(RuntimeError):
    """The peering object(s) did not appear in time."""


def wait_for_peering(
    missing: Callable[[], list[str]],
    timeout_s: float = PEERING_WAIT_S,
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    poll_s: float = 1.0,
) -> float:
    """Poll ``missing()`` (the objects not there yet) until it is empty; returns the seconds
    waited. Logs what it waits for at once and every :data:`WAIT_LOG_INTERVAL_S`; raises
    :class:`PeeringMissing` naming them after ``timeout_s``."""
    started = clock()
    logged_at: float | None = None
    while absent := missing():
        waited = clock() - started
        if waited >= timeout_s:
            raise PeeringMissing(
                f"peering object(s) {', '.join(absent)} still missing after {timeout_s:.0f} s: the "
                "chart creates them (operator.peering.enabled); without the chart, apply "
                "`orbitmq-operator --print-peering ...` with the same --peering and namespaces"
            )
        if logged_at is None or clock() - logged_at >= WAIT_LOG_INTERVAL_S:
            log.info("waiting for peering object(s) %s (%.0f s so far)", ", ".join(absent), waited)
            logged_at = clock()
        sleep(poll_s)
    return clock() - started
