"""Users and ACLs of a cluster (RocketMQ 5.3's ``mqadmin createUser`` … ``listAcl``), mixed
into :class:`orbitmq.client.admin.Admin`.

Every broker stores its own users and ACLs (copied to its slaves), so a change goes to every
master of the cluster, as a subscription group does, and a read asks every master: a broker
that missed a change (down at the time, or added later) shows up as one whose answer differs.

Documents are RocketMQ's JSON (:mod:`orbitmq.auth.model`) and are checked here before anything
is sent, so a bad one is refused naming the field and the rule (:class:`InvalidAuthDocument`)
without a cluster. Brokers never answer a secret.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import grpc
from pydantic import ValidationError

from orbitmq.auth.model import Acl, User, UserStatus, UserType, describe_errors
from orbitmq.common.errors import OrbitError
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.v1 import broker_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

if TYPE_CHECKING:
    from orbitmq.client.admin import BrokerInfo
    from orbitmq.client.channels import Channels

Document = dict[str, Any]
PerBroker = dict[str, list[Document]]
"""A master's address → what it answered."""


class InvalidAuthDocument(OrbitError, ValueError):
    """A user or ACL document that breaks a rule; ``problems``: one ``field: rule`` line each."""

    def __init__(self, what: str, problems: list[str]) -> None:
        super().__init__(f"{what} refused: {'; '.join(problems)}")
        self.problems = problems


def check_user(document: Mapping[str, Any]) -> User:
    try:
        return User.model_validate(dict(document))
    except ValidationError as error:
        raise InvalidAuthDocument("user", describe_errors(error)) from None


def check_acl(document: Mapping[str, Any] | Acl) -> Acl:
    if isinstance(document, Acl):
        return document
    try:
        return Acl.model_validate(dict(document))
    except ValidationError as error:
        raise InvalidAuthDocument("ACL", describe_errors(error)) from None


class AuthAdmin:
    """The user and ACL operations of :class:`~orbitmq.client.admin.Admin`."""

    _channels: Channels
    masters: Callable[[str | None], Awaitable[list[BrokerInfo]]]
    """Admin's: the masters of a cluster (of any cluster when None)."""

    async def _masters(self, cluster: str | None) -> list[str]:
        return [b.address for b in await self.masters(cluster)]

    # -- users --

    async def create_user(
        self,
        username: str,
        password: str,
        *,
        user_type: UserType | str = UserType.NORMAL,
        user_status: UserStatus | str = UserStatus.ENABLE,
        cluster: str | None = None,
    ) -> list[str]:
        """Create a user on every master (of ``cluster``); returns their addresses. A username
        one of them already has is refused (:meth:`update_user` changes it)."""
        user = check_user(
            {"username": username, "password": password, "userType": user_type, "userStatus": user_status}
        )
        raw = user.model_dump_json(by_alias=True)
        targets = await self._masters(cluster)
        for address in targets:
            await self._channels.broker(address).CreateUser(broker_pb2.CreateUserRequest(user=raw))
        return targets

    async def update_user(
        self,
        username: str,
        *,
        password: str | None = None,
        user_type: UserType | str | None = None,
        user_status: UserStatus | str | None = None,
        cluster: str | None = None,
    ) -> list[str]:
        """Change the fields given (None: kept) of a user on every master that has it; returns
        their addresses. A user no master has is refused (USER_NOT_EXIST)."""
        changes: Document = {"username": username}
        for key, value in (("password", password), ("userType", user_type), ("userStatus", user_status)):
            if value is not None:
                changes[key] = value
        if len(changes) == 1:
            raise InvalidAuthDocument(
                "user update", ["nothing to change: give a password, a type or a status"]
            )
        check_user({"password": "-", **changes})  # each given field's rule, before any broker
        raw = json.dumps(changes)
        return await self._on_masters_having(
            cluster,
            lambda stub: stub.UpdateUser(broker_pb2.UpdateUserRequest(user=raw)),
            ErrorReason.USER_NOT_EXIST,
        )

    async def delete_user(self, username: str, cluster: str | None = None) -> list[str]:
        """Delete a user (and its ACL) on every master that has it; returns their addresses."""
        return await self._on_masters_having(
            cluster,
            lambda stub: stub.DeleteUser(broker_pb2.DeleteUserRequest(username=username)),
            ErrorReason.USER_NOT_EXIST,
        )

    async def users(self, contains: str = "", cluster: str | None = None) -> PerBroker:
        """Every master's users whose name contains ``contains``, without secrets."""
        found: PerBroker = {}
        for address in await self._masters(cluster):
            reply = await self._channels.broker(address).ListUsers(
                broker_pb2.ListUsersRequest(filter=contains)
            )
            found[address] = [json.loads(u) for u in reply.users]
        return found

    async def user(self, username: str, cluster: str | None = None) -> PerBroker:
        """The user as each master that has it holds it (USER_NOT_EXIST when none does)."""
        return await self._read_from_masters_having(
            cluster,
            lambda stub: stub.GetUser(broker_pb2.GetUserRequest(username=username)),
            lambda reply: reply.user,
            ErrorReason.USER_NOT_EXIST,
        )

    # -- ACLs --

    async def create_acl(self, acl: Mapping[str, Any] | Acl, cluster: str | None = None) -> PerBroker:
        """Add the entries of ``acl`` to its subject's ACL on every master (created where there
        is none); an entry for a resource the stored ACL already has is refused as an overlap.
        Returns each master's ACL after the change."""
        raw = check_acl(acl).model_dump_json(by_alias=True)
        return await self._acl_change(
            cluster, lambda stub: stub.CreateAcl(broker_pb2.CreateAclRequest(acl=raw))
        )

    async def update_acl(self, acl: Mapping[str, Any] | Acl, cluster: str | None = None) -> PerBroker:
        """Set the entries of ``acl`` in its subject's ACL on every master, replacing those for
        the same policy type and resource (RocketMQ's updateAcl)."""
        raw = check_acl(acl).model_dump_json(by_alias=True)
        return await self._acl_change(
            cluster, lambda stub: stub.UpdateAcl(broker_pb2.UpdateAclRequest(acl=raw))
        )

    async def delete_acl(
        self, subject: str, resources: Iterable[str] = (), policy_type: str = "", cluster: str | None = None
    ) -> list[str]:
        """Remove the entries for ``resources`` (all of the ACL when none) on every master that
        has the ACL; returns their addresses."""
        request = broker_pb2.DeleteAclRequest(
            subject=subject, resources=list(resources), policy_type=policy_type
        )
        return await self._on_masters_having(
            cluster, lambda stub: stub.DeleteAcl(request), ErrorReason.ACL_NOT_EXIST
        )

    async def acls(self, subject: str = "", resource: str = "", cluster: str | None = None) -> PerBroker:
        """Every master's ACLs whose subject contains ``subject`` and that have an entry whose
        resource contains ``resource``."""
        found: PerBroker = {}
        for address in await self._masters(cluster):
            reply = await self._channels.broker(address).ListAcls(
                broker_pb2.ListAclsRequest(subject_filter=subject, resource_filter=resource)
            )
            found[address] = [json.loads(a) for a in reply.acls]
        return found

    async def acl(self, subject: str, cluster: str | None = None) -> PerBroker:
        return await self._read_from_masters_having(
            cluster,
            lambda stub: stub.GetAcl(broker_pb2.GetAclRequest(subject=subject)),
            lambda reply: reply.acl,
            ErrorReason.ACL_NOT_EXIST,
        )

    # -- helpers --

    async def _acl_change(self, cluster: str | None, call: Any) -> PerBroker:
        done: PerBroker = {}
        for address in await self._masters(cluster):
            reply = await call(self._channels.broker(address))
            done[address] = [json.loads(reply.acl)]
        return done

    async def _on_masters_having(self, cluster: str | None, call: Any, missing: int) -> list[str]:
        """``call`` on every master; those answering ``missing`` are skipped, all of them is an error."""
        done, refusal = [], ""
        for address in await self._masters(cluster):
            try:
                await call(self._channels.broker(address))
            except grpc.aio.AioRpcError as error:
                if not _is_reason(error, missing):
                    raise
                refusal = error.details() or ""
                continue
            done.append(address)
        if not done:
            raise RpcFailure(missing, f"on every master: {refusal}")
        return done

    async def _read_from_masters_having(
        self, cluster: str | None, call: Any, document_of: Any, missing: int
    ) -> PerBroker:
        found: PerBroker = {}
        refusal = ""
        for address in await self._masters(cluster):
            try:
                reply = await call(self._channels.broker(address))
            except grpc.aio.AioRpcError as error:
                if not _is_reason(error, missing):
                    raise
                refusal = error.details() or ""
                continue
            found[address] = [json.loads(document_of(reply))]
        if not found:
            raise RpcFailure(missing, f"on every master: {refusal}")
        return found


def _is_reason(error: grpc.aio.AioRpcError, reason: int) -> bool:
    failure = failure_of(error)
    return failure is not None and failure.reason == reason
