"""The user and ACL RPCs of the Broker service (mixed into its servicer), RocketMQ 5.3's
``createUser`` … ``listAcl``.

Documents travel as JSON in RocketMQ's shape and are checked by :mod:`orbitmq.auth.model`, so a
refusal names the field and the rule (INVALID_ARGUMENT). Changes are made on a master only (a
slave takes the master's copy) and each successful one is an audit record. No answer carries a
secret: a user's password is known to whoever set it, and reading it back would turn every
``Cluster Get`` grant into the keys of every user.

A caller that is not a super user may not create, change or delete a super user, nor make a
user super (RocketMQ refuses the same): a ``Cluster Update`` grant would otherwise be a way to
every permission.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import grpc

from orbitmq.auth import audit
from orbitmq.auth.model import User
from orbitmq.auth.tables import AuthTables
from orbitmq.broker.auth_store import (
    AuthStore,
    acl_created,
    acl_deleted,
    acl_json,
    acl_updated,
    acls_matching,
    existing_acl,
    existing_user,
    parse_acl,
    parse_document,
    parse_user,
    user_created,
    user_deleted,
    user_json,
    user_updated,
    users_matching,
)
from orbitmq.common.guard import current_user, request_id_of
from orbitmq.common.rpc import RpcFailure
from orbitmq.v1 import broker_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

if TYPE_CHECKING:
    from orbitmq.broker.server import Broker

log = logging.getLogger(__name__)


class AuthAdminServicer:
    """Users and ACLs of the broker's :class:`~orbitmq.broker.auth_store.AuthStore`."""

    b: Broker

    def _store_for_change(self, rpc: str) -> AuthStore:
        if self.b.is_slave:
            raise RpcFailure(
                ErrorReason.SLAVE_READ_ONLY,
                f"{self.b.address} is a slave: {rpc} goes to its master (users and ACLs are copied from it)",
            )
        return self.b.auth_store

    def _check_super_change(self, context: grpc.aio.ServicerContext, rpc: str, *users: User | None) -> None:
        if not self.b.settings.auth_enabled:
            return
        caller = current_user()  # verified by the guard before the handler runs
        if caller is not None and caller.is_super:
            return
        for user in users:
            if user is not None and user.is_super:
                who = caller.username if caller is not None else "an unknown caller"
                refusal = (
                    f"{who} may not {rpc} super user {user.username!r}: only a super user changes super users"
                )
                # A denied decision of its own (the guard allowed the RPC): audited like the guard's.
                action = rpc.capitalize()
                self._audit(context, "denied", f"{action}User", action, "Deny", refusal)
                raise RpcFailure(ErrorReason.NO_PERMISSION, refusal)

    def _audit_change(self, context: grpc.aio.ServicerContext, rpc: str, action: str, reason: str) -> None:
        self._audit(context, "allowed_admin_change", rpc, action, "Allow", reason)

    def _audit(
        self, context: grpc.aio.ServicerContext, kind: str, rpc: str, action: str, decision: str, reason: str
    ) -> None:
        caller = current_user()  # verified by the guard before the handler runs
        request_id = request_id_of(context)
        audit.record(
            audit.AuditEvent(
                kind=kind,  # type: ignore[arg-type]
                who=caller.username if caller is not None else "",
                source=context.peer(),
                action=action,
                resource=f"Cluster:{self.b.settings.cluster}",
                resource_type="Cluster",
                decision=decision,
                request_id=request_id,
                rpc=f"/orbitmq.v1.Broker/{rpc}",
                reason=reason,
            )
        )

    # -- users --

    async def CreateUser(
        self, request: broker_pb2.CreateUserRequest, context: Any
    ) -> broker_pb2.UserResponse:
        store = self._store_for_change("CreateUser")
        user = parse_user(parse_document(request.user, "user"))
        self._check_super_change(context, "create", user)
        await store.change(lambda tables: user_created(tables, user))
        self._audit_change(context, "CreateUser", "Create", f"user {user.username} created ({_kind(user)})")
        return broker_pb2.UserResponse(user=user_json(user), version=store.version)

    async def UpdateUser(
        self, request: broker_pb2.UpdateUserRequest, context: Any
    ) -> broker_pb2.UserResponse:
        store = self._store_for_change("UpdateUser")
        changes = parse_document(request.user, "user update")

        def edit(tables: AuthTables) -> tuple[AuthTables, User]:
            updated_tables, updated = user_updated(tables, changes)
            self._check_super_change(context, "update", tables.user(updated.username), updated)
            return updated_tables, updated

        user = await store.change(edit)
        fields = ", ".join(sorted(k for k in changes if k != "username"))
        self._audit_change(
            context, "UpdateUser", "Update", f"user {user.username} updated: {fields} ({_kind(user)})"
        )
        return broker_pb2.UserResponse(user=user_json(user), version=store.version)

    async def DeleteUser(
        self, request: broker_pb2.DeleteUserRequest, context: Any
    ) -> broker_pb2.UserResponse:
        store = self._store_for_change("DeleteUser")

        def edit(tables: AuthTables) -> tuple[AuthTables, tuple[User, bool]]:
            self._check_super_change(context, "delete", existing_user(tables, request.username))
            left, user, had_acl = user_deleted(tables, request.username)
            return left, (user, had_acl)

        user, had_acl = await store.change(edit)
        with_acl = " with its ACL" if had_acl else ""
        self._audit_change(context, "DeleteUser", "Delete", f"user {user.username} deleted{with_acl}")
        return broker_pb2.UserResponse(user=user_json(user), version=store.version, acl_deleted=had_acl)

    async def GetUser(self, request: broker_pb2.GetUserRequest, context: Any) -> broker_pb2.UserResponse:
        tables = self.b.auth_store.tables
        user = existing_user(tables, request.username)
        return broker_pb2.UserResponse(user=user_json(user), version=tables.version)

    async def ListUsers(
        self, request: broker_pb2.ListUsersRequest, context: Any
    ) -> broker_pb2.ListUsersResponse:
        tables = self.b.auth_store.tables
        users = users_matching(tables, request.filter)
        return broker_pb2.ListUsersResponse(users=[user_json(u) for u in users], version=tables.version)

    # -- ACLs --

    async def CreateAcl(self, request: broker_pb2.CreateAclRequest, context: Any) -> broker_pb2.AclResponse:
        store = self._store_for_change("CreateAcl")
        acl = parse_acl(parse_document(request.acl, "ACL"))
        merged = await store.change(lambda tables: acl_created(tables, acl))
        self._audit_change(context, "CreateAcl", "Create", f"ACL of {acl.subject}: {_resources(acl)} added")
        return broker_pb2.AclResponse(acl=acl_json(merged), version=store.version)

    async def UpdateAcl(self, request: broker_pb2.UpdateAclRequest, context: Any) -> broker_pb2.AclResponse:
        store = self._store_for_change("UpdateAcl")
        acl = parse_acl(parse_document(request.acl, "ACL"))
        merged = await store.change(lambda tables: acl_updated(tables, acl))
        self._audit_change(context, "UpdateAcl", "Update", f"ACL of {acl.subject}: {_resources(acl)} set")
        return broker_pb2.AclResponse(acl=acl_json(merged), version=store.version)

    async def DeleteAcl(self, request: broker_pb2.DeleteAclRequest, context: Any) -> broker_pb2.AclResponse:
        store = self._store_for_change("DeleteAcl")
        resources = list(request.resources)
        left = await store.change(
            lambda tables: acl_deleted(tables, request.subject, resources, request.policy_type)
        )
        what = ", ".join(resources) + " removed" if resources else "deleted"
        self._audit_change(context, "DeleteAcl", "Delete", f"ACL of {request.subject}: {what}")
        return broker_pb2.AclResponse(acl=acl_json(left) if left is not None else "", version=store.version)

    async def GetAcl(self, request: broker_pb2.GetAclRequest, context: Any) -> broker_pb2.AclResponse:
        tables = self.b.auth_store.tables
        return broker_pb2.AclResponse(
            acl=acl_json(existing_acl(tables, request.subject)), version=tables.version
        )

    async def ListAcls(
        self, request: broker_pb2.ListAclsRequest, context: Any
    ) -> broker_pb2.ListAclsResponse:
        tables = self.b.auth_store.tables
        acls = acls_matching(tables, request.subject_filter, request.resource_filter)
        return broker_pb2.ListAclsResponse(acls=[acl_json(a) for a in acls], version=tables.version)


def _kind(user: User) -> str:
    return f"{user.user_type.value}, {user.user_status.value}"


def _resources(acl: Any) -> str:
    return ", ".join(f"{p.policy_type.value} {e.resource}" for p in acl.policies for e in p.entries)
