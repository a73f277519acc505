"""``OrbitMQUser`` handlers: the user and its ACL applied on every master of its cluster on
create, update, resume and a resync timer (a broker group added later gets them too); deleted
from every master by a finalizer.

What goes wrong is a status and a retry, never a crash: a bad policy is ``InvalidSpec`` naming
the field (``spec.authorization.policies[1].sourceIps``); a missing cluster
``ClusterNotFound``; a cluster without ``spec.security.authentication`` is
``AuthenticationDisabled`` (its brokers keep no users); a missing or incomplete Secret
``SecretNotFound``/``InvalidSecret``; brokers not answering ``BrokersUnreachable``.

Credentials: ``authentication.type: generated`` makes the Secret named after the resource
(``accessKey`` = the resource's name, ``secretKey`` random), owned by it so it goes with it;
``type: secret`` reads ``secretName``'s ``accessKey`` and ``secretKey`` (the access key is the
username, as in RocketMQ). Changing the Secret's secret re-applies it on the next resync;
changing the access key replaces the user (the old one is deleted).
"""

from __future__ import annotations

import time
from typing import Any

import kopf
from lightkube import AsyncClient
from pydantic import ValidationError

from orbitmq.common.credentials import Credentials
from orbitmq_operator import metrics
from orbitmq_operator.builders import auth, names
from orbitmq_operator.builders.errors import SpecError
from orbitmq_operator.handlers import events
from orbitmq_operator.handlers.clusters import RESYNC_S, write_status
from orbitmq_operator.handlers.resources import (
    RESOURCE_RESYNC_S,
    RETRY_S,
    cluster_access_or_refuse,
    find_cluster,
)
from orbitmq_operator.reconcile import conditions
from orbitmq_operator.reconcile.cluster import now_rfc3339
from orbitmq_operator.reconcile.conditions import Reason
from orbitmq_operator.reconcile.namesrv import namesrv_for
from orbitmq_operator.reconcile.resources import ResourceRefused
from orbitmq_operator.reconcile.secrets import SecretProblem, create_secret, credentials_of, read_secret
from orbitmq_operator.reconcile.users import DesiredUser, apply_user, delete_user
from orbitmq_operator.spec import API_VERSION, GROUP, VERSION
from orbitmq_operator.user_spec import CredentialsType, UserSpec, check_username

KIND = "OrbitMQUser"
USERS = "orbitmqusers"


def _parse(body: kopf.Body) -> UserSpec:
    try:
        return UserSpec.model_validate(body.spec)
    except ValidationError as error:
        issue = error.errors()[0]
        path = ".".join(["spec", *(str(part) for part in issue["loc"])])
        raise SpecError(path, str(issue["msg"]).removeprefix("Value error, ")) from None


def _owner(body: kopf.Body) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": body.metadata.name,
        "uid": body.metadata.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


async def user_credentials(client: AsyncClient, body: kopf.Body, spec: UserSpec) -> tuple[Credentials, str]:
    """The user's credentials and the Secret they are in; a generated Secret is made here."""
    namespace, name = body.metadata.namespace or "", body.metadata.name or ""
    if spec.authentication.type is CredentialsType.SECRET:
        secret = spec.authentication.secret_name or ""
        data = await read_secret(client, namespace, secret)
        if data is None:
            raise SecretProblem(
                f"Secret {namespace}/{secret} (spec.authentication.secretName) does not exist; create it "
                f"with {names.ACCESS_KEY} and {names.SECRET_KEY}"
            )
        credentials = credentials_of(data, namespace, secret)
        check_username(credentials.access_key, f"Secret {namespace}/{secret} {names.ACCESS_KEY}")
        return credentials, secret
    username = check_username(name, "metadata.name")
    name = names.user_secret(name)
    data = await read_secret(client, namespace, name)
    if data is None:
        labels = {
            names.LABEL_NAME: names.APP,
            names.LABEL_INSTANCE: spec.cluster,
            names.LABEL_MANAGED_BY: names.MANAGED_BY,
        }
        manifest = auth.credentials_secret(
            name, namespace, username, auth.generate_secret(), labels, _owner(body)
        )
        data = await create_secret(client, manifest)
    credentials = credentials_of(data, namespace, name)
    if credentials.access_key != username:
        raise SecretProblem(
            f"Secret {namespace}/{name} holds {names.ACCESS_KEY} {credentials.access_key!r}, not this "
            f"user's name: it is not the Secret this OrbitMQUser generated (delete or rename it)"
        )
    return credentials, name


def _refuse(body: kopf.Body, patch: kopf.Patch, reason: Reason, message: str, *, retriable: bool) -> None:
    metrics.RECONCILE_ERRORS.labels(KIND, reason).inc()
    verdicts = (conditions.waiting if retriable else conditions.refused)(reason, message)
    generation = int(body.metadata.get("generation") or 0)
    write_status(
        patch, body.status, conditions.generation_status(verdicts, generation, body.status, now_rfc3339())
    )
    events.warning(body, reason, message)


async def reconcile_user(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo) -> None:
    client: AsyncClient = memo["client"]
    generation = int(body.metadata.get("generation") or 0)
    started = time.monotonic()
    try:
        spec = _parse(body)
        cluster = await find_cluster(client, body.metadata.namespace or "", spec.cluster)
        if cluster is None:
            message = (
                f"OrbitMQCluster {spec.cluster!r} does not exist in namespace {body.metadata.namespace!r}; "
                f"create it or fix spec.cluster (retried every {RETRY_S} s)"
            )
            raise ResourceRefused(Reason.CLUSTER_NOT_FOUND, message)
        if not (cluster.get("spec") or {}).get("security", {}).get("authentication", {}).get("enabled"):
            raise ResourceRefused(
                Reason.AUTHENTICATION_DISABLED,
                f"OrbitMQCluster {spec.cluster!r} has spec.security.authentication.enabled false: its "
                "brokers keep no users; turn it on to apply this user",
            )
        credentials, secret_name = await user_credentials(client, body, spec)
        desired = DesiredUser(
            credentials.access_key, credentials.secret_key, spec.user_type, spec.acl(credentials.access_key)
        )
        access = await cluster_access_or_refuse(client, cluster)
        namesrv = await namesrv_for(client, memo["config"], cluster)
        previous = (body.status or {}).get("username", "")
        if previous and previous != desired.username:
            await delete_user(access, namesrv, spec.cluster, previous)
        applied_digest = (
            (body.status or {}).get("credentialsHash", "") if previous == desired.username else ""
        )
        applied = await apply_user(access, namesrv, spec.cluster, desired, applied_digest)
    except SpecError as error:
        _refuse(body, patch, Reason.INVALID_SPEC, str(error), retriable=False)
        return  # nothing to retry until the spec changes (an update runs the handler again)
    except SecretProblem as error:
        reason = Reason.SECRET_NOT_FOUND if "does not exist" in str(error) else Reason.INVALID_SECRET
        _refuse(body, patch, reason, str(error), retriable=False)
        raise kopf.TemporaryError(str(error), delay=RETRY_S) from error
    except ResourceRefused as error:
        _refuse(body, patch, error.reason, error.message, retriable=error.retriable)
        raise kopf.TemporaryError(error.message, delay=RETRY_S) from error
    finally:
        metrics.RECONCILE_SECONDS.labels(KIND).observe(time.monotonic() - started)
    if applied.changed:
        events.normal(body, "Applied", f"user {desired.username!r}: {'; '.join(applied.changed)}")
    where = ", ".join(applied.broker_names)
    verdicts = conditions.ready(
        Reason.APPLIED, f"user {desired.username!r} is on every master of the cluster: {where}"
    )
    status = conditions.generation_status(verdicts, generation, body.status, now_rfc3339())
    status |= {
        "username": desired.username,
        "secretName": secret_name,
        "appliedTo": sorted(applied.broker_names),
        "credentialsHash": desired.digest,
    }
    write_status(patch, body.status, status)


@kopf.on.resume(GROUP, VERSION, USERS)
@kopf.on.create(GROUP, VERSION, USERS)
@kopf.on.update(GROUP, VERSION, USERS, field="spec")
@kopf.timer(GROUP, VERSION, USERS, interval=RESOURCE_RESYNC_S, initial_delay=RESOURCE_RESYNC_S, idle=RESYNC_S)
async def user_changed(body: kopf.Body, patch: kopf.Patch, memo: kopf.Memo, **_: Any) -> None:
    await reconcile_user(body, patch, memo)


@kopf.on.delete(GROUP, VERSION, USERS)
async def user_deleted(body: kopf.Body, memo: kopf.Memo, logger: kopf.Logger, **_: Any) -> None:
    """Revoke at once: the user and its ACL leave every master before the resource goes."""
    client: AsyncClient = memo["client"]
    spec = body.spec or {}
    generated = (spec.get("authentication") or {}).get("type", "generated") == CredentialsType.GENERATED
    # a user applied whose status was not written yet is still found by its generated name
    username = (body.status or {}).get("username", "") or (body.metadata.name if generated else "")
    cluster_name = spec.get("cluster", "")
    if not username:
        logger.info("user %s was never applied: nothing to delete", body.metadata.name)
        return
    cluster = await find_cluster(client, body.metadata.namespace or "", cluster_name)
    if cluster is None:
        logger.info("user %r: cluster %r is gone, nothing to delete from", username, cluster_name)
        return
    try:
        access = await cluster_access_or_refuse(client, cluster)
        namesrv = await namesrv_for(client, memo["config"], cluster)
        deleted = await delete_user(access, namesrv, cluster_name, username)
    except (ResourceRefused, SecretProblem) as error:
        message = error.message if isinstance(error, ResourceRefused) else str(error)
        events.warning(body, Reason.BROKERS_UNREACHABLE, f"{message}; deletion retried in {RETRY_S} s")
        raise kopf.TemporaryError(message, delay=RETRY_S) from error
    events.normal(body, "Deleted", f"user {username!r} and its ACL deleted from {len(deleted)} master(s)")
