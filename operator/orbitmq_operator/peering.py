"""kopf's peering resources, which the operator's leader election stands on.

kopf has no leases: replicas of an operator announce themselves (identity, priority, lifetime)
in the status of a peering object, ``ClusterKopfPeering`` for an operator watching every
namespace, ``KopfPeering`` in each watched namespace otherwise, and an operator that sees a
peer of *higher* priority pauses until that peer's keep-alives stop. Two replicas with the same
priority would both pause and warn, so each replica starts with a distinct random priority
(``--priority`` overrides it): exactly one acts, and when it dies another takes over once the
dead one's lifetime (60 s) has run out.

The CRDs are cluster-wide and installed with the chart (or ``orbitmq-operator
--print-peering-crds | kubectl apply -f -``); the operator creates its peering *object* at
start when it is missing, as kopf needs one to exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lightkube import ApiError, Client
from lightkube.generic_resource import create_global_resource, create_namespaced_resource

PEERING_GROUP = "kopf.dev"
PEERING_VERSION = "v1"

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


def ensure_peering(client: Client, name: str, namespaces: Sequence[str]) -> None:
    """Create the peering object(s) if missing: cluster-wide when ``namespaces`` is empty."""
    objects = (
        [KopfPeering(metadata={"name": name, "namespace": ns}) for ns in namespaces]
        if namespaces
        else [ClusterKopfPeering(metadata={"name": name})]
    )
    for obj in objects:
        try:
            client.create(obj)
        except ApiError as error:
            if error.status.code != 409:  # already there
                raise
