"""The operator's own settings: typed, documented, loaded once from flags or the environment.

The command line (:mod:`orbitmq_operator.__main__`) sets these from its flags, each of which
also reads an ``ORBITMQ_OPERATOR_*`` variable (click's ``envvar``); an operator started some
other way (``kopf run -m orbitmq_operator.handlers``, the tests' ``KopfRunner``) reads the same
variables through :meth:`OperatorConfig.from_env`. One loader, whichever way it starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from orbitmq.common.namesrv_list import NamesrvListError, parse_namesrv_list
from orbitmq_operator.builders.errors import SpecError

ENV_PREFIX = "ORBITMQ_OPERATOR_"


class NamesrvMode(StrEnum):
    SERVICE = "service"
    """``<cluster>-namesrv.<ns>.svc:9876``: right for an operator running in the cluster."""
    POD_IP = "pod-ip"
    """The Running name-server pods' IPs: for an operator outside the cluster whose host routes
    to pod IPs but cannot resolve the cluster's DNS names (a laptop beside kind, a CI host)."""


@dataclass(frozen=True)
class OperatorConfig:
    namesrv_mode: NamesrvMode = NamesrvMode.SERVICE
    """How the operator reaches a cluster's name servers for topic and group admin calls."""
    namesrv_overrides: Mapping[str, str] = field(default_factory=dict)
    """``{"<namespace>/<cluster>": "host:port[;host:port]"}``, winning over ``namesrv_mode``:
    e.g. a port-forward or an ingress to one cluster's name servers."""
    cluster_resync_s: float = 15.0
    """How often every cluster is reconciled again without a change: the status follows the
    pods and brokers, and a deleted child object is re-created. A resync of an unchanged
    cluster writes nothing (see reconcile.apply), so the period is about freshness only."""
    resource_resync_s: float = 30.0
    """How often topics and groups are re-applied, so a broker group added later gets them."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OperatorConfig:
        env = os.environ if environ is None else environ
        get = lambda name, default: env.get(ENV_PREFIX + name, default)  # noqa: E731
        return cls(
            namesrv_mode=NamesrvMode(get("NAMESRV_MODE", NamesrvMode.SERVICE.value)),
            namesrv_overrides=parse_overrides(get("NAMESRV_OVERRIDES", "")),
            cluster_resync_s=float(get("CLUSTER_RESYNC_S", "15")),
            resource_resync_s=float(get("RESOURCE_RESYNC_S", "30")),
        )


def parse_overrides(text: str) -> dict[str, str]:
    """``ns/cluster=addr,ns2/other=addr2``; an address may list name servers with ``;`` or
    ``,`` (an item without ``=`` continues the list of the override before it), checked by
    orbitmq's one name-server list parser."""
    field_path = f"{ENV_PREFIX}NAMESRV_OVERRIDES"
    lists: dict[str, list[str]] = {}
    key = ""
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, address = item.partition("=")
        if sep:
            key = name.strip()
            if key.count("/") != 1 or not address.strip():
                raise SpecError(field_path, f"{item!r} is not <namespace>/<cluster>=<host:port>")
            lists[key] = [address]
        elif key:
            lists[key].append(item)
        else:
            raise SpecError(field_path, f"{item!r} is not <namespace>/<cluster>=<host:port>")
    out = {}
    for key, parts in lists.items():
        try:
            out[key] = ";".join(parse_namesrv_list(";".join(parts)))
        except NamesrvListError as error:
            raise SpecError(field_path, f"{key}: {error}") from None
    return out
