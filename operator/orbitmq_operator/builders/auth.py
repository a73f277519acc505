"""Authentication of a cluster (``spec.security.authentication``): the operator's super user
and how every server gets it, and the Secrets users' credentials live in.

With authentication on, the operator creates one super user per cluster, with a random access
key and secret, in the Secret ``<cluster>-operator-user`` (owned by the cluster). Name servers,
brokers and proxies get it as their bootstrap super user (``auth_super_user`` /
``auth_super_secret``) through environment variables read from that Secret (``secretKeyRef``),
never through the brokers' ConfigMap, which anyone who may read ConfigMaps could read; the
operator signs its own calls with it (:mod:`orbitmq_operator.reconcile.access`), and brokers
sign their registrations and replication with it. Authorization comes with it: what no
policy allows is denied.

The Secret is made once and kept (a random secret cannot be rebuilt on every reconcile as the
other objects are), so it is not among :func:`~orbitmq_operator.builders.desired_objects`;
:func:`credentials_secret` builds it and the reconciler creates it when it is missing.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import Mapping
from typing import Any

from orbitmq_operator.builders import names
from orbitmq_operator.builders.common import Cluster, Manifest, object_meta

SECRET_BYTES = 32
"""256 bits of randomness per secret (HMAC-SHA1 keys need no more)."""
ACCESS_KEY_PREFIX = "orbitmq-operator-"


def enabled(cluster: Cluster) -> bool:
    return cluster.spec.security.authentication.enabled


def generate_secret() -> str:
    return secrets.token_urlsafe(SECRET_BYTES)


def generate_operator_credentials() -> tuple[str, str]:
    """A random access key (a valid username: letters, digits, ``-``; readable in audit lines
    as the operator's) and a random secret."""
    return f"{ACCESS_KEY_PREFIX}{secrets.token_hex(6)}", generate_secret()


def credentials_secret(
    name: str,
    namespace: str,
    access_key: str,
    secret_key: str,
    labels: Mapping[str, str],
    owner: Mapping[str, Any],
) -> Manifest:
    """A Secret with ``accessKey`` and ``secretKey``: the shape of the operator user's Secret and
    of a generated ``OrbitMQUser``'s (what a client pod mounts or reads with ``secretKeyRef``)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(labels),
            "ownerReferences": [dict(owner)],
        },
        "data": {
            names.ACCESS_KEY: _b64(access_key),
            names.SECRET_KEY: _b64(secret_key),
        },
    }


def operator_user_secret(cluster: Cluster, access_key: str, secret_key: str) -> Manifest:
    """``<cluster>-operator-user``, owned by the cluster (deleted with it)."""
    meta = object_meta(cluster, names.operator_user_secret(cluster.name), names.OPERATOR_USER)
    return credentials_secret(
        meta["name"], meta["namespace"], access_key, secret_key, meta["labels"], meta["ownerReferences"][0]
    )


def read_credentials(data: Mapping[str, str] | None, where: str) -> tuple[str, str]:
    """``accessKey`` and ``secretKey`` of a Secret's (base64) ``data``; ValueError names the
    Secret and the key missing or empty."""
    values = []
    for key in (names.ACCESS_KEY, names.SECRET_KEY):
        raw = (data or {}).get(key)
        value = base64.b64decode(raw).decode() if raw else ""
        if not value.strip():
            raise ValueError(
                f"Secret {where} has no {key} (it needs {names.ACCESS_KEY} and {names.SECRET_KEY})"
            )
        values.append(value)
    return values[0], values[1]


def server_env(cluster: Cluster, env_prefix: str) -> list[dict[str, Any]]:
    """A server's environment for auth (``ORBITMQ_BROKER_``, ``ORBITMQ_NAMESRV_``,
    ``ORBITMQ_PROXY_`` prefixes): on, with the operator's super user as its bootstrap super user
    read from the Secret; nothing when authentication is off (the servers' default: off)."""
    if not enabled(cluster):
        return []
    secret = names.operator_user_secret(cluster.name)
    return [
        {"name": f"{env_prefix}AUTH_ENABLED", "value": "true"},
        _from_secret(f"{env_prefix}AUTH_SUPER_USER", secret, names.ACCESS_KEY),
        _from_secret(f"{env_prefix}AUTH_SUPER_SECRET", secret, names.SECRET_KEY),
    ]


def client_env(cluster: Cluster) -> list[dict[str, Any]]:
    """``ORBITMQ_ACCESS_KEY``/``ORBITMQ_SECRET_KEY`` from the operator user's Secret: what a
    client of the cluster inside a pod (the proxy toward the brokers) signs its calls with."""
    if not enabled(cluster):
        return []
    secret = names.operator_user_secret(cluster.name)
    return [
        _from_secret("ORBITMQ_ACCESS_KEY", secret, names.ACCESS_KEY),
        _from_secret("ORBITMQ_SECRET_KEY", secret, names.SECRET_KEY),
    ]


def _from_secret(variable: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": variable, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()
