"""``OrbitMQUser``: a user and its ACL reconciled onto every master of its cluster through the
brokers' user and ACL RPCs (:class:`~orbitmq.client.admin_auth.AuthAdmin`), signed by the
operator's super user.

Each reconcile reads first and changes only what differs, so an unchanged user costs reads on
a resync and writes nothing (every change the brokers make is an audited admin event, and a
resync must not fill the audit trail):

* the user: created on masters that lack it (a broker group added later, or one that was down),
  updated where its type differs or its credentials changed since the last apply (the brokers
  never answer a secret, so the status keeps a digest of what was applied);
* the ACL: where a master's differs from the spec, the spec's entries replace those for the
  same resources, then entries the spec no longer names are deleted; no policy at all deletes
  the ACL.

Deleting the resource deletes the user, and its ACL with it, on every master at once: clients
signing as that user are refused from their next call (brokers keep no sessions).

The pure halves (:func:`credentials_digest`, :func:`acl_differs`, :func:`stale_resources`) are
apart from the calls and unit-tested.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc

from orbitmq.auth.model import SUBJECT_PREFIX, Acl, PolicyType, UserType
from orbitmq.client.admin import Admin
from orbitmq.client.channels import Channels
from orbitmq.common.errors import OrbitError
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.v1 import broker_pb2
from orbitmq.v1.broker_pb2 import ErrorReason
from orbitmq_operator.reconcile.access import Access
from orbitmq_operator.reconcile.resources import Applied, refusal_of


@dataclass(frozen=True)
class DesiredUser:
    """What an ``OrbitMQUser`` asks the brokers to hold."""

    username: str
    secret: str
    user_type: UserType
    acl: Acl | None

    @property
    def subject(self) -> str:
        return f"{SUBJECT_PREFIX}{self.username}"

    @property
    def digest(self) -> str:
        return credentials_digest(self.username, self.secret, self.user_type)


def credentials_digest(username: str, secret: str, user_type: UserType) -> str:
    """A digest of what identifies the applied user, for ``status.credentialsHash``: it tells a
    changed Secret apart without keeping the secret (nor anything it could be guessed from:
    SHA-256 of a 256-bit random secret)."""
    material = "\0".join((username, secret, user_type.value)).encode()
    return hashlib.sha256(material).hexdigest()[:32]


def _entries(document: Mapping[str, Any] | Acl | None) -> dict[str, Any]:
    """The custom entries of an ACL document by resource, in a comparable form."""
    if document is None:
        return {}
    acl = document if isinstance(document, Acl) else Acl.model_validate(dict(document))
    return {
        str(e.resource): (
            sorted(a.value for a in e.actions),
            e.decision.value,
            sorted(map(str, e.source_ips)),
        )
        for e in acl.entries_of(PolicyType.CUSTOM)
    }


def acl_differs(current: Mapping[str, Any] | None, desired: Acl | None) -> bool:
    """Whether a master's ACL (its document, None without one) says other than ``desired``."""
    return _entries(current) != _entries(desired)


def stale_resources(current: Mapping[str, Any] | None, desired: Acl | None) -> list[str]:
    """Custom entries of a master's ACL that the spec no longer names."""
    wanted = _entries(desired)
    return sorted(r for r in _entries(current) if r not in wanted)


def _is_reason(error: BaseException, reason: int) -> bool:
    failure = failure_of(error) if isinstance(error, grpc.aio.AioRpcError) else error
    return isinstance(failure, RpcFailure) and failure.reason == reason


async def _users_on(admin: Admin, username: str, cluster: str) -> dict[str, dict[str, Any]]:
    """The masters holding ``username`` (address → its document, without secret)."""
    listed = await admin.users(username, cluster=cluster)
    return {
        address: document
        for address, documents in listed.items()
        for document in documents
        if document.get("username") == username
    }


async def _acls_on(admin: Admin, subject: str, cluster: str) -> dict[str, dict[str, Any] | None]:
    listed = await admin.acls(subject=subject, cluster=cluster)
    return {
        address: next((d for d in documents if d.get("subject") == subject), None)
        for address, documents in listed.items()
    }


async def _create_on(
    access: Access, namesrv: str | list[str], addresses: Sequence[str], user: DesiredUser
) -> None:
    """Create the user on these masters only (others have it: Admin.create_user would refuse)."""
    raw = json.dumps({"username": user.username, "password": user.secret, "userType": user.user_type.value})
    channels = Channels(namesrv, tls=access.tls, credentials=access.credentials)
    try:
        for address in addresses:
            await channels.broker(address).CreateUser(broker_pb2.CreateUserRequest(user=raw))
    finally:
        await channels.close()


async def apply_user(
    access: Access, namesrv: str | list[str], cluster: str, user: DesiredUser, applied_digest: str
) -> Applied:
    """Bring every master of ``cluster`` to ``user``; ``applied_digest``: the status's digest
    of the credentials applied last (empty: never applied)."""
    what = f"user {user.username!r}"
    changed: list[str] = []
    try:
        async with access.admin(namesrv) as admin:
            masters = {b.address: b.broker_name for b in await admin.masters(cluster)}
            having = await _users_on(admin, user.username, cluster)
            missing = [a for a in masters if a not in having]
            if missing and not having:
                await admin.create_user(user.username, user.secret, user_type=user.user_type, cluster=cluster)
            elif missing:
                await _create_on(access, namesrv, missing, user)
            if missing:
                changed.append("created on " + ", ".join(sorted(masters[a] for a in missing)))
            wrong_type = any(d.get("userType") != user.user_type.value for d in having.values())
            if having and (wrong_type or applied_digest != user.digest):
                await admin.update_user(
                    user.username, password=user.secret, user_type=user.user_type, cluster=cluster
                )
                changed.append("credentials updated" if not wrong_type else "type and credentials updated")
            changed += await _apply_acl(admin, cluster, user)
    except (grpc.aio.AioRpcError, OrbitError) as error:
        raise refusal_of(error, what) from error
    return Applied(sorted(masters.values()), changed)


async def _apply_acl(admin: Admin, cluster: str, user: DesiredUser) -> list[str]:
    current = await _acls_on(admin, user.subject, cluster)
    if user.acl is None:
        if any(document is not None for document in current.values()):
            await _delete_acl(admin, user.subject, cluster)
            return ["ACL deleted"]
        return []
    if not any(acl_differs(document, user.acl) for document in current.values()):
        return []
    after = await admin.update_acl(user.acl, cluster=cluster)
    stale = sorted({r for documents in after.values() for r in stale_resources(documents[0], user.acl)})
    if stale:
        await admin.delete_acl(user.subject, stale, PolicyType.CUSTOM.value, cluster=cluster)
    return ["ACL updated"]


async def _delete_acl(admin: Admin, subject: str, cluster: str) -> None:
    try:
        await admin.delete_acl(subject, cluster=cluster)
    except (grpc.aio.AioRpcError, RpcFailure) as error:
        if not _is_reason(error, ErrorReason.ACL_NOT_EXIST):
            raise


async def delete_user(access: Access, namesrv: str | list[str], cluster: str, username: str) -> list[str]:
    """Delete the user and its ACL from every master holding it; one no master holds is fine
    (a finalizer retried after a partial deletion, or a user deleted by hand)."""
    try:
        async with access.admin(namesrv) as admin:
            return await admin.delete_user(username, cluster=cluster)
    except (grpc.aio.AioRpcError, OrbitError) as error:
        if _is_reason(error, ErrorReason.USER_NOT_EXIST):
            return []
        raise refusal_of(error, f"deleting user {username!r}") from error
