"""The Secrets of authentication: the operator's super user of a cluster, and users' credentials.

A credentials Secret is created once, with random values, and read afterwards; it is never
applied again (that would rotate the secret on every reconcile). Two reconciles creating it at
once is harmless: the second create is refused (409) and it reads the first one's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightkube import ApiError, AsyncClient, codecs
from lightkube.generic_resource import create_namespaced_resource
from lightkube.resources.core_v1 import Secret

from orbitmq.common.credentials import Credentials
from orbitmq_operator.builders import auth, names
from orbitmq_operator.builders.common import Cluster
from orbitmq_operator.spec import GROUP, VERSION, ClusterSpec

OrbitMQCluster = create_namespaced_resource(GROUP, VERSION, names.CLUSTER_KIND, "orbitmqclusters")


class SecretProblem(Exception):
    """A credentials Secret missing or unusable; the message names it and what to do."""


async def read_secret(api: AsyncClient, namespace: str, name: str) -> Mapping[str, str] | None:
    """A Secret's ``data`` (base64 values), None when there is no such Secret."""
    try:
        secret = await api.get(Secret, name, namespace=namespace)
    except ApiError as error:
        if error.status.code == 404:
            return None
        raise
    return secret.data or {}


async def create_secret(api: AsyncClient, manifest: Mapping[str, Any]) -> Mapping[str, str]:
    """Create a Secret, or read the one a concurrent reconcile created first; its ``data``."""
    meta = manifest["metadata"]
    try:
        await api.create(codecs.from_dict(dict(manifest)))
    except ApiError as error:
        if error.status.code != 409:
            raise
        found = await read_secret(api, meta["namespace"], meta["name"])
        if found is not None:
            return found
        raise
    return dict(manifest["data"])


def credentials_of(data: Mapping[str, str], namespace: str, name: str) -> Credentials:
    """``accessKey``/``secretKey`` of a Secret; :class:`SecretProblem` names a missing key."""
    try:
        access_key, secret_key = auth.read_credentials(data, f"{namespace}/{name}")
    except ValueError as error:
        raise SecretProblem(str(error)) from None
    return Credentials(access_key, secret_key)


async def operator_credentials(
    api: AsyncClient, namespace: str, cluster: str, spec: ClusterSpec
) -> Credentials | None:
    """The operator's super user of a cluster with authentication on (None when off), from
    ``<cluster>-operator-user``; made with random credentials the first time, owned by the
    cluster (so its pods, which read it, never start before it exists if this runs first)."""
    if not spec.security.authentication.enabled:
        return None
    name = names.operator_user_secret(cluster)
    data = await read_secret(api, namespace, name)
    if data is None:
        body = (await api.get(OrbitMQCluster, cluster, namespace=namespace)).to_dict()
        owner = Cluster(cluster, namespace, body["metadata"]["uid"], spec)
        data = await create_secret(
            api, auth.operator_user_secret(owner, *auth.generate_operator_credentials())
        )
    return credentials_of(data, namespace, name)
