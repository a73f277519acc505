"""Users and ACLs stored on a broker: one JSON file, replaced whole on every change.

``<store root>/config/auth.json`` holds the broker's :class:`~orbitmq.auth.tables.AuthTables`
(its policy version, RocketMQ 5.3's user and ACL documents, secrets included as RocketMQ
stores them), written like the topic table (:class:`~orbitmq.store.config_store.JsonConfigStore`:
temporary file, fsync, rename, ``.bak``) and readable by its owner only: the temporary file is
created with mode 0600 (:class:`PrivateJsonFile`), so no moment exists in which another user of
the machine could open it, as a ``chmod`` after writing would leave::

    {"version": 7, "changed_ms": 1764160000000,
     "users": [{"username": "app", "password": "...", "userType": "Normal", "userStatus": "enable"}],
     "acls": [{"subject": "User:app", "policies": [{"policyType": "Custom", "entries": [...]}]}]}

Changes are rare and requests read the tables constantly, so a change builds new tables (checked
whole: a username once, an ACL for a user only, no overlapping rules), writes them, and only then
replaces the ones requests see: an answered change is on disk, a refused or failed one left
nothing behind. Each change moves the version, which is what decision caches compare, and
stamps ``changed_ms`` (this broker's clock, never below the previous stamp plus one): name
servers keep the newest tables of a cluster by that stamp (:class:`~orbitmq.auth.tables.Stamp`),
and the store's ``on_change`` makes the broker register with them at once.

Slaves copy the master's tables with the other config tables (``GetReplicaConfig``) and write
them at once, so a slave promoted after its master died enforces the same users and ACLs. A copy
is taken when its users or ACLs differ from the slave's (keeping the master's ``changed_ms``: it
is the same change), and the slave's version then still only grows (the larger of the master's
and its own plus one): a demoted master whose last change never reached the new master must not
keep verdicts cached under a version number that now means something else.

The edits themselves (:func:`user_created`, :func:`acl_updated`, ...) are pure functions from
tables to tables; :class:`AuthStore` serializes them and does the I/O.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import logging
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from orbitmq.auth.model import (
    SUBJECT_PREFIX,
    Acl,
    Policy,
    PolicyEntry,
    PolicyType,
    Resource,
    User,
    describe_errors,
)
from orbitmq.auth.tables import AuthTables
from orbitmq.common.rpc import RpcFailure
from orbitmq.store.config_store import ConfigPersistError, JsonConfigStore
from orbitmq.v1.broker_pb2 import ErrorReason

log = logging.getLogger(__name__)

AUTH_FILE = Path("config/auth.json")
"""Where the users and ACLs live, relative to the broker's store root."""
FILE_MODE = 0o600
"""The file holds secrets: readable by the broker's user only."""

Entries = dict[tuple[PolicyType, Resource], PolicyEntry]


# -- documents ----------------------------------------------------------------------------------


def invalid(what: str, problems: Iterable[str]) -> RpcFailure:
    return RpcFailure(ErrorReason.INVALID_ARGUMENT, f"{what} refused: {'; '.join(problems)}")


def parse_document(raw: str, what: str) -> dict[str, Any]:
    """A JSON object from a request; INVALID_ARGUMENT naming ``what`` otherwise."""
    try:
        document = json.loads(raw)
    except json.JSONDecodeError as error:
        raise invalid(what, [f"not JSON: {error}"]) from None
    if not isinstance(document, dict):
        raise invalid(what, [f"a JSON object is expected, not {type(document).__name__}"])
    return document


def parse_user(document: dict[str, Any]) -> User:
    try:
        return User.model_validate(document)
    except ValidationError as error:
        raise invalid("user", describe_errors(error)) from None


def parse_acl(document: dict[str, Any]) -> Acl:
    try:
        return Acl.model_validate(document)
    except ValidationError as error:
        raise invalid("ACL", describe_errors(error)) from None


def user_json(user: User) -> str:
    """The user document as answered over the wire: never its secret."""
    return json.dumps(user.model_dump(mode="json", by_alias=True, exclude={"password"}))


def acl_json(acl: Acl) -> str:
    return json.dumps(acl.model_dump(mode="json", by_alias=True))


# -- pure edits ---------------------------------------------------------------------------------


def _tables(base: AuthTables, users: Iterable[User], acls: Iterable[Acl]) -> AuthTables:
    """The next version of ``base``; a consistency rule broken is INVALID_ARGUMENT naming it."""
    try:
        return AuthTables(version=base.version + 1, users=tuple(users), acls=tuple(acls))
    except ValidationError as error:
        raise invalid("change", describe_errors(error)) from None


def _no_user(username: str) -> RpcFailure:
    return RpcFailure(
        ErrorReason.USER_NOT_EXIST,
        f"user {username!r} does not exist; 'orbitmq admin user list' shows the users",
    )


def _no_acl(subject: str) -> RpcFailure:
    return RpcFailure(
        ErrorReason.ACL_NOT_EXIST, f"{subject} has no ACL; 'orbitmq admin acl list' shows the ACLs"
    )


def existing_user(tables: AuthTables, username: str) -> User:
    user = tables.user(username)
    if user is None:
        raise _no_user(username)
    return user


def existing_acl(tables: AuthTables, subject: str) -> Acl:
    acl = tables.acl_of(subject.removeprefix(SUBJECT_PREFIX)) if subject.startswith(SUBJECT_PREFIX) else None
    if acl is None:
        raise _no_acl(subject)
    return acl


def user_created(tables: AuthTables, user: User) -> tuple[AuthTables, User]:
    if tables.user(user.username) is not None:
        raise RpcFailure(
            ErrorReason.INVALID_ARGUMENT,
            f"user {user.username!r} exists (a username is unique; 'orbitmq admin user update' changes it)",
        )
    return _tables(tables, (*tables.users, user), tables.acls), user


def user_updated(tables: AuthTables, changes: dict[str, Any]) -> tuple[AuthTables, User]:
    """``changes``: ``username`` and the fields to change, in the user document's spelling."""
    username = changes.get("username")
    if not isinstance(username, str) or not username:
        raise invalid("user update", ["username: required (the user to change)"])
    if len(changes) == 1:
        raise invalid(
            "user update", ["nothing to change: give password, userType or userStatus besides username"]
        )
    current = existing_user(tables, username)
    updated = parse_user({**current.model_dump(by_alias=True), **changes})
    users = tuple(updated if u.username == username else u for u in tables.users)
    return _tables(tables, users, tables.acls), updated


def user_deleted(tables: AuthTables, username: str) -> tuple[AuthTables, User, bool]:
    """Without the user and its ACL (an ACL is for a user of the tables); also whether it had one."""
    user = existing_user(tables, username)
    acl = tables.acl_of(username)
    users = (u for u in tables.users if u.username != username)
    acls = (a for a in tables.acls if a is not acl)
    return _tables(tables, users, acls), user, acl is not None


def _entries_of(acl: Acl) -> Entries:
    return {(p.policy_type, e.resource): e for p in acl.policies for e in p.entries}


def _acl_from(subject: str, entries: Entries) -> Acl | None:
    """One policy per type, custom first; None when no entry is left."""
    policies = []
    for policy_type in PolicyType:
        kept = tuple(e for (t, _), e in entries.items() if t is policy_type)
        if kept:
            policies.append(Policy(policy_type=policy_type, entries=kept))
    return Acl(subject=subject, policies=tuple(policies)) if policies else None


def _with_acl(tables: AuthTables, subject: str, acl: Acl | None) -> AuthTables:
    """``tables`` with the ACL of ``subject`` replaced (kept in place), added, or removed (None)."""
    acls = [a for a in tables.acls if a.subject != subject or acl is not None]
    if acl is not None:
        at = next((i for i, a in enumerate(acls) if a.subject == subject), None)
        if at is None:
            acls.append(acl)
        else:
            acls[at] = acl
    return _tables(tables, tables.users, acls)


def _stored_acl(tables: AuthTables, acl: Acl) -> Acl | None:
    if tables.user(acl.username) is None:
        raise invalid("ACL", [f"subject: {acl.subject} is not a user (create the user first)"])
    return tables.acl_of(acl.username)


def acl_created(tables: AuthTables, acl: Acl) -> tuple[AuthTables, Acl]:
    """The subject's ACL with ``acl``'s entries added; an entry for a resource the stored ACL
    already has (same policy type) is refused as an overlap, naming both."""
    stored = _stored_acl(tables, acl)
    entries = _entries_of(stored) if stored is not None else {}
    for p, policy in enumerate(acl.policies):
        for e, entry in enumerate(policy.entries):
            if (policy.policy_type, entry.resource) in entries:
                raise invalid(
                    "ACL",
                    [
                        f"policies.{p}.entries.{e}: overlapping rules: {acl.subject}'s stored "
                        f"{policy.policy_type.value} policy already has an entry for {entry.resource} "
                        "(one entry per resource: 'orbitmq admin acl update' replaces it)"
                    ],
                )
    entries.update(_entries_of(acl))
    merged = _acl_from(acl.subject, entries)
    assert merged is not None  # acl has at least one entry
    return _with_acl(tables, acl.subject, merged), merged


def acl_updated(tables: AuthTables, acl: Acl) -> tuple[AuthTables, Acl]:
    """The subject's ACL (created if absent) with ``acl``'s entries replacing those for the same
    policy type and resource, others kept (RocketMQ's ``updateAcl``)."""
    stored = _stored_acl(tables, acl)
    entries = _entries_of(stored) if stored is not None else {}
    entries.update(_entries_of(acl))
    merged = _acl_from(acl.subject, entries)
    assert merged is not None
    return _with_acl(tables, acl.subject, merged), merged


def acl_deleted(
    tables: AuthTables, subject: str, resources: Iterable[str] = (), policy_type: str = ""
) -> tuple[AuthTables, Acl | None]:
    """Without the entries for ``resources`` (of ``policy_type``, or either type); without the
    whole ACL when no resource is named or none is left. A resource the ACL has no entry for is
    refused (ACL_NOT_EXIST), so a typo is not reported as done."""
    stored = existing_acl(tables, subject)
    names = list(resources)
    if not names:
        return _with_acl(tables, stored.subject, None), None
    types = _policy_types(policy_type)
    entries = _entries_of(stored)
    for i, name in enumerate(names):
        try:
            resource = Resource.parse(name)
        except ValueError as error:
            raise invalid("ACL delete", [f"resources.{i}: {error}"]) from None
        keys = [(t, resource) for t in types if (t, resource) in entries]
        if not keys:
            raise RpcFailure(
                ErrorReason.ACL_NOT_EXIST,
                f"{stored.subject}'s ACL has no {'/'.join(t.value for t in types)} entry for {resource}",
            )
        for key in keys:
            del entries[key]
    left = _acl_from(stored.subject, entries)
    return _with_acl(tables, stored.subject, left), left


def _policy_types(name: str) -> tuple[PolicyType, ...]:
    if not name:
        return tuple(PolicyType)
    try:
        return (PolicyType(name),)
    except ValueError:
        known = ", ".join(t.value for t in PolicyType)
        raise invalid("ACL delete", [f"policy_type: {name!r} is not one of {known}"]) from None


def users_matching(tables: AuthTables, text: str = "") -> builtins.list[User]:
    return sorted((u for u in tables.users if text in u.username), key=lambda u: u.username)


def acls_matching(tables: AuthTables, subject: str = "", resource: str = "") -> builtins.list[Acl]:
    """ACLs whose subject contains ``subject`` and that have an entry whose resource contains
    ``resource`` (mqadmin listAcl's filters)."""
    return sorted(
        (
            a
            for a in tables.acls
            if subject in a.subject and (not resource or any(resource in str(r) for _, r in _entries_of(a)))
        ),
        key=lambda a: a.subject,
    )


def same_content(a: AuthTables, b: AuthTables) -> bool:
    return a.users == b.users and a.acls == b.acls


# -- the store ----------------------------------------------------------------------------------


class PrivateJsonFile(JsonConfigStore[AuthTables]):
    """A :class:`JsonConfigStore` whose file and ``.bak`` are created readable by their owner
    only (:data:`FILE_MODE`; the process umask can only narrow it further)."""

    file_mode = FILE_MODE


class AuthStore:
    """A broker's users and ACLs: :attr:`tables` for requests, ``change`` for admin RPCs.

    Construct it in a worker thread (it reads the file); a file that exists but is not valid
    raises :class:`~orbitmq.store.config_store.ConfigFileError` naming it, as the other tables.
    ``on_change`` is called (on the event loop) after each change is written and served: the
    broker registers with its name servers then, so they know of a deleted user at once.
    """

    def __init__(
        self,
        store_root: Path | str,
        *,
        on_change: Callable[[], None] | None = None,
        now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._file = PrivateJsonFile(Path(store_root) / AUTH_FILE, AuthTables, AuthTables)
        self._tables = self._file.load()
        self._lock = asyncio.Lock()
        self._on_change = on_change
        self._now_ms = now_ms

    @property
    def tables(self) -> AuthTables:
        """The current users and ACLs (replaced whole on a change: hold on to it for one call)."""
        return self._tables

    @property
    def version(self) -> int:
        return self._tables.version

    @property
    def path(self) -> Path:
        return self._file.path

    async def change(self, edit: Callable[[AuthTables], tuple[AuthTables, Any]]) -> Any:
        """Apply ``edit`` to the current tables, write the result, then serve it; returns what
        ``edit`` returned beside the tables. Changes are serialized: none is lost to another."""
        async with self._lock:
            current = self._tables
            edited, result = edit(current)
            tables = AuthTables(
                version=edited.version,
                changed_ms=max(self._now_ms(), current.changed_ms + 1),
                users=edited.users,
                acls=edited.acls,
            )
            await self._persist(tables)
            self._tables = tables
        self._changed()
        return result

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()

    async def _persist(self, tables: AuthTables) -> None:
        try:
            await asyncio.to_thread(self._file.persist, tables)
        except ConfigPersistError as error:
            raise RpcFailure(
                ErrorReason.SERVICE_NOT_AVAILABLE, f"the broker could not write its users and ACLs: {error}"
            ) from None

    # -- replication --

    def export_json(self) -> bytes:
        """The tables as their file's JSON, secrets included: what a master hands its slaves."""
        return self._file.encode(self._tables)

    async def import_json(self, raw: bytes, source: str) -> bool:
        """Take a master's users and ACLs when they differ from ours, and write them before they
        are served; returns whether anything changed. The version moves past both ours and the
        master's. Raises ConfigFileError naming ``source`` for an invalid document."""
        master = await asyncio.to_thread(self._file.decode, raw, source)
        async with self._lock:
            current = self._tables
            if same_content(master, current) and master.changed_ms == current.changed_ms:
                return False
            version = max(master.version, current.version + 1)
            tables = AuthTables(
                version=version, changed_ms=master.changed_ms, users=master.users, acls=master.acls
            )
            await self._persist(tables)
            self._tables = tables
        self._changed()
        log.info(
            "users and ACLs copied from %s: %d users, %d ACLs, version %d",
            source,
            len(tables.users),
            len(tables.acls),
            version,
        )
        return True
