"""The brokers' settings file (``broker.yaml``): what the operator decides, plus the user's
``spec.brokers.settings``, checked with the broker's own model before anything is applied.

Checking here, with :class:`~orbitmq.broker.settings.BrokerSettings` and the store's rules,
means a bad setting is a ``Ready=False`` condition naming the key and the rule, instead of
broker pods crash-looping on start. The file holds only settings that differ from the broker's
defaults (or that the operator decides), so the defaults stay in one place: the broker's code.

Settings that identify a broker or wire the cluster together are the operator's, and refused in
``spec.brokers.settings`` (:data:`OWNED_SETTINGS`); per-pod values (broker name, id, role,
advertised address) are command-line flags of each pod, the rest shared by every group.
"""

from __future__ import annotations

import difflib
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic.alias_generators import to_snake

from orbitmq.broker.settings import BrokerSettings
from orbitmq.store.config import MIB
from orbitmq_operator.builders import names
from orbitmq_operator.builders.common import Cluster
from orbitmq_operator.builders.errors import SpecError

SETTINGS_PATH = "spec.brokers.settings"

OWNED_SETTINGS: dict[str, str] = {
    "listen": f"every broker listens on port {names.BROKER_PORT}",
    "metrics_listen": "set spec.metrics.port instead",
    "advertise_addr": "each pod advertises its own IP",
    "namesrv": "brokers register with the cluster's own name servers",
    "cluster": "it is the resource's name",
    "broker_name": "it is the broker group's name",
    "broker_id": "it is the pod's ordinal, then what failovers record",
    "broker_role": "set spec.brokers.replicationMode instead; slaves and failovers decide the rest",
    "master_addr": "slaves find their master through the name servers",
    "data_dir": "it is the broker's volume",
    "flush_mode": "set spec.brokers.flushMode instead",
    "segment_bytes": "set spec.brokers.segmentMib instead",
    "auto_create_topic": "set spec.brokers.autoCreateTopic instead",
}
"""Settings the operator decides, and why a user cannot (the message a refusal carries)."""

_SPEC_PATHS = {
    "flush_mode": "spec.brokers.flushMode",
    "segment_bytes": "spec.brokers.segmentMib",
    "metrics_listen": "spec.metrics.port",
    "broker_role": "spec.brokers.replicationMode",
    "auto_create_topic": "spec.brokers.autoCreateTopic",
}
"""Where an owned setting's value comes from, to name the right field when it is refused."""

_CHECK_ADDRESS = f"127.0.0.1:{names.BROKER_PORT}"
"""Stands in for a pod's address (known only when it runs) while the settings are checked."""


def operator_settings(cluster: Cluster) -> dict[str, Any]:
    """The shared settings the operator decides (per-pod ones are flags, see brokers.py)."""
    brokers = cluster.spec.brokers
    namesrv = names.namesrv_pod_addresses(cluster.name, cluster.namespace, cluster.spec.name_servers.replicas)
    return {
        "cluster": cluster.name,
        "listen": f"0.0.0.0:{names.BROKER_PORT}",
        "metrics_listen": f"0.0.0.0:{cluster.spec.metrics.port}",
        "namesrv": ";".join(namesrv),
        "data_dir": names.BROKER_DATA_DIR,
        # ordinal 0 of each group; the other pods are started as SLAVE (--broker-id-from-hostname)
        "broker_role": brokers.replication_mode.value,
        "flush_mode": brokers.flush_mode.value,
        "segment_bytes": brokers.segment_mib * MIB,
        # off unless the spec says so, where the broker's own default is on (see its docstring)
        "auto_create_topic": brokers.auto_create_topic,
    }


def broker_settings(cluster: Cluster) -> dict[str, Any]:
    """The contents of ``broker.yaml``, checked: raises :class:`SpecError` naming the first bad
    key of ``spec.brokers.settings`` (or the spec field an owned setting comes from)."""
    user = cluster.spec.brokers.settings
    for key in sorted(user):
        _check_key(key)
    values = {**user, **operator_settings(cluster)}
    check(cluster, values)
    return values


def broker_config_text(cluster: Cluster) -> str:
    """``broker.yaml`` as stored in the ConfigMap: keys sorted, so equal settings give an equal
    file (and an equal config hash: no needless roll of the brokers)."""
    return yaml.safe_dump(broker_settings(cluster), sort_keys=True, default_flow_style=False)


def effective(cluster: Cluster) -> BrokerSettings:
    """The settings a broker of ``cluster`` runs with (defaults filled in), checked."""
    return check(cluster, broker_settings(cluster))


def check(cluster: Cluster, values: dict[str, Any]) -> BrokerSettings:
    """Load ``values`` as a broker of ``cluster`` would, with the store's rules on top (a
    segment must hold the largest message), as ``orbitmq broker`` does at start."""
    given = {**values, "broker_name": names.broker_group(cluster.name, 0), "advertise_addr": _CHECK_ADDRESS}
    try:
        settings = BrokerSettings(**given)
        settings.store_config(_CHECK_ADDRESS)
    except ValidationError as error:
        raise _spec_error(error, set(cluster.spec.brokers.settings)) from None
    return settings


def _check_key(key: str) -> None:
    path = f"{SETTINGS_PATH}.{key}"
    if key in OWNED_SETTINGS:
        raise SpecError(path, f"{key} is set by the operator ({OWNED_SETTINGS[key]})")
    if key not in BrokerSettings.model_fields:
        raise SpecError(
            path,
            f"{key!r} is not a broker setting{_suggestion(key)} "
            "(settings are the fields of orbitmq.broker.settings.BrokerSettings)",
        )


def _suggestion(key: str) -> str:
    candidates = [name for name in BrokerSettings.model_fields if name not in OWNED_SETTINGS]
    snake = to_snake(key).replace("-", "_")
    if snake in candidates:
        return f"; settings are snake_case: {snake}"
    close = difflib.get_close_matches(snake, candidates, n=1)
    return f"; did you mean {close[0]}?" if close else ""


def _spec_error(error: ValidationError, user_keys: set[str]) -> SpecError:
    """The first problem, at the field a user wrote: a settings key, or the spec field an
    operator-owned setting was derived from; a rule across fields names the settings."""
    issue = error.errors()[0]
    key = str(issue["loc"][0]) if issue["loc"] else ""
    message = str(issue["msg"]).removeprefix("Value error, ")
    if key in user_keys:
        return SpecError(f"{SETTINGS_PATH}.{key}", f"{message} (got {issue.get('input')!r})")
    if key in _SPEC_PATHS:
        return SpecError(_SPEC_PATHS[key], message)
    return SpecError(SETTINGS_PATH, message)
