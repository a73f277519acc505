"""Every user and ACL at one policy version: what a server authenticates and decides with.

A server holds one :class:`AuthTables` and replaces it whole when users or ACLs change (they
change rarely, requests read them constantly): lookups are dictionary reads built once, and the
version number is what :class:`orbitmq.auth.decide.DecisionCache` compares to drop its verdicts.

Consistency across documents is checked here, each refusal naming the documents involved: a
username appears once, a subject has one ACL, and an ACL's subject is a user of the tables.
"""

from __future__ import annotations

from functools import cached_property

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orbitmq.auth.model import Acl, User


class AuthTables(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = Field(0, ge=0)
    """Moves on every change of users or ACLs (the stored tables' version)."""
    users: tuple[User, ...] = ()
    acls: tuple[Acl, ...] = ()

    @model_validator(mode="after")
    def _check_consistency(self) -> AuthTables:
        seen_users: dict[str, int] = {}
        for i, user in enumerate(self.users):
            if user.username in seen_users:
                raise ValueError(
                    f"users[{i}] and users[{seen_users[user.username]}] are both named {user.username!r} "
                    "(a username is unique: it is the access key)"
                )
            seen_users[user.username] = i
        seen_subjects: dict[str, int] = {}
        for i, acl in enumerate(self.acls):
            if acl.subject in seen_subjects:
                raise ValueError(
                    f"acls[{i}] and acls[{seen_subjects[acl.subject]}] are both for {acl.subject} "
                    "(one ACL per subject: merge their policies)"
                )
            seen_subjects[acl.subject] = i
            if acl.username not in seen_users:
                raise ValueError(
                    f"acls[{i}] is for {acl.subject}, which is not a user (create the user first)"
                )
        return self

    @cached_property
    def _users(self) -> dict[str, User]:
        return {user.username: user for user in self.users}

    @cached_property
    def _acls(self) -> dict[str, Acl]:
        return {acl.username: acl for acl in self.acls}

    def user(self, username: str) -> User | None:
        return self._users.get(username)

    def acl_of(self, username: str) -> Acl | None:
        return self._acls.get(username)

    def secret_of(self, access_key: str) -> str | None:
        """The secret signatures of ``access_key`` are checked with (a disabled user's too:
        authentication proves who calls, authorization then refuses a disabled user everything)."""
        user = self._users.get(access_key)
        return user.password if user is not None else None
