"""Every user and ACL at one policy version: what a server authenticates and decides with.

A server holds one :class:`AuthTables` and replaces it whole when users or ACLs change (they
change rarely, requests read them constantly): lookups are dictionary reads built once, and the
version number is what :class:`orbitmq.auth.decide.DecisionCache` compares to drop its verdicts.

Consistency across documents is checked here, each refusal naming the documents involved: a
username appears once, a subject has one ACL, and an ACL's subject is a user of the tables.

``version`` is local to one process (each broker counts its own changes, a name server or a
sidecar counts the tables it took), so it cannot say which of two brokers' tables is newer.
:attr:`AuthTables.stamp` can: the time of the last change (``changed_ms``, stamped by the broker
that made it) and a digest of the content, compared in that order (see :class:`Stamp`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from functools import cached_property
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from orbitmq.auth.model import Acl, User


class Stamp(NamedTuple):
    """Which users and ACLs: compared as a tuple, the later change first, the digest a tie-break.

    Brokers of one cluster each get every change from ``orbitmq admin`` (it writes to every
    master), each stamping it with its own clock, so the same content arrives under stamps a few
    milliseconds apart; a broker group that missed a change (it was down) has an older stamp and
    loses. What this cannot order is two different changes made on two groups closer together
    than the skew of their clocks; NTP keeps that to milliseconds, and the next change settles it.
    Tables written before stamps existed have ``changed_ms`` 0: among those the digest alone
    decides (arbitrary but the same on every name server) until the next change.
    """

    changed_ms: int
    digest: str


class AuthTables(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    version: int = Field(0, ge=0)
    """Moves on every change of users or ACLs (the stored tables' version)."""
    changed_ms: int = Field(0, ge=0)
    """When the users or ACLs last changed (Unix ms, the clock of the broker that changed them);
    0: never (tables written before this field existed, a users file)."""
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

    @cached_property
    def digest(self) -> str:
        """Hex SHA-256 of the users and ACLs, sorted by name (the order they were created in does
        not matter), secrets included (a changed secret is a change)."""
        document = {
            "users": [u.model_dump(mode="json", by_alias=True) for u in sorted(self.users, key=_username)],
            "acls": [a.model_dump(mode="json", by_alias=True) for a in sorted(self.acls, key=_subject)],
        }
        encoded = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(encoded.encode()).hexdigest()

    @property
    def stamp(self) -> Stamp:
        return Stamp(self.changed_ms, self.digest)

    def content_json(self) -> bytes:
        """``{"changed_ms": .., "users": [...], "acls": [...]}``: what crosses the wire between
        servers (secrets included; the local ``version`` left out, it means nothing elsewhere)."""
        return self.model_dump_json(by_alias=True, exclude={"version"}).encode()

    def user(self, username: str) -> User | None:
        return self._users.get(username)

    def acl_of(self, username: str) -> Acl | None:
        return self._acls.get(username)

    def secret_of(self, access_key: str) -> str | None:
        """The secret signatures of ``access_key`` are checked with (a disabled user's too:
        authentication proves who calls, authorization then refuses a disabled user everything)."""
        user = self._users.get(access_key)
        return user.password if user is not None else None


def layered(layers: Iterable[AuthTables], version: int, changed_ms: int = 0) -> AuthTables:
    """One set of tables from ``layers``: a user (with its ACL, or without one) of a later layer
    replaces the same username of an earlier one."""
    users: dict[str, User] = {}
    acls: dict[str, Acl] = {}
    for layer in layers:
        for user in layer.users:
            users[user.username] = user
            acl = layer.acl_of(user.username)
            if acl is None:
                acls.pop(user.username, None)
            else:
                acls[user.username] = acl
    return AuthTables(
        version=version, changed_ms=changed_ms, users=tuple(users.values()), acls=tuple(acls.values())
    )


def _username(user: User) -> str:
    return user.username


def _subject(acl: Acl) -> str:
    return acl.subject
