"""The user and ACL edits a broker applies (pure functions over tables) and the store around them:
written before served, a refused edit leaving nothing, a master's copy taken under a version
that only grows."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from orbitmq.auth.model import Acl, User
from orbitmq.auth.tables import AuthTables
from orbitmq.broker.auth_store import (
    AUTH_FILE,
    AuthStore,
    acl_created,
    acl_deleted,
    acl_updated,
    user_created,
    user_deleted,
    user_updated,
)
from orbitmq.common.rpc import RpcFailure
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(30)


def acl(*entries: tuple[str, list[str], str], policy_type: str = "Custom") -> Acl:
    return Acl.model_validate(
        {
            "subject": "User:app",
            "policies": [
                {
                    "policyType": policy_type,
                    "entries": [{"resource": r, "actions": a, "decision": d} for r, a, d in entries],
                }
            ],
        }
    )


def entries(tables: AuthTables) -> list[tuple[str, str, tuple[str, ...], str]]:
    found = tables.acl_of("app")
    assert found is not None
    return [
        (p.policy_type.value, str(e.resource), tuple(a.value for a in e.actions), e.decision.value)
        for p in found.policies
        for e in p.entries
    ]


APP = User(username="app", password="pw")
BASE = AuthTables(version=3, users=(APP,))


def refused(reason: int, call: Any, *args: Any) -> str:
    with pytest.raises(RpcFailure) as failure:
        call(*args)
    assert failure.value.reason == reason
    return failure.value.message


def test_acl_create_adds_entries_and_refuses_one_the_stored_acl_has() -> None:
    tables, _ = acl_created(BASE, acl(("Topic:a", ["Pub"], "Allow")))
    tables, merged = acl_created(tables, acl(("Topic:b-*", ["Sub"], "Deny")))
    assert tables.version == 5 and merged == tables.acl_of("app")
    assert entries(tables) == [
        ("Custom", "Topic:a", ("Pub",), "Allow"),
        ("Custom", "Topic:b-*", ("Sub",), "Deny"),
    ]
    message = refused(ErrorReason.INVALID_ARGUMENT, acl_created, tables, acl(("Topic:a", ["Sub"], "Deny")))
    assert (
        "policies.0.entries.0: overlapping rules" in message and "already has an entry for Topic:a" in message
    )
    tables, _ = acl_created(tables, acl(("Topic:a", ["Get"], "Allow"), policy_type="Default"))  # another type
    assert entries(tables)[-1] == ("Default", "Topic:a", ("Get",), "Allow")


def test_acl_update_replaces_the_entry_for_a_resource_in_place() -> None:
    tables, _ = acl_created(BASE, acl(("Topic:a", ["Pub"], "Allow"), ("Topic:b", ["Pub"], "Allow")))
    tables, _ = acl_updated(tables, acl(("Topic:a", ["Sub"], "Deny"), ("Group:g", ["Sub"], "Allow")))
    assert entries(tables) == [
        ("Custom", "Topic:a", ("Sub",), "Deny"),
        ("Custom", "Topic:b", ("Pub",), "Allow"),
        ("Custom", "Group:g", ("Sub",), "Allow"),
    ]


def test_acl_for_no_user_is_refused_naming_the_subject() -> None:
    message = refused(
        ErrorReason.INVALID_ARGUMENT, acl_updated, AuthTables(), acl(("Topic:a", ["Pub"], "Allow"))
    )
    assert "subject: User:app is not a user" in message


def test_acl_delete_removes_entries_then_the_acl_and_refuses_what_is_not_there() -> None:
    tables, _ = acl_created(BASE, acl(("Topic:a", ["Pub"], "Allow"), ("Topic:b", ["Pub"], "Allow")))
    tables, left = acl_deleted(tables, "User:app", ["Topic:a"])
    assert left is not None and entries(tables) == [("Custom", "Topic:b", ("Pub",), "Allow")]
    assert "no Custom/Default entry for Topic:a" in refused(
        ErrorReason.ACL_NOT_EXIST, acl_deleted, tables, "User:app", ["Topic:a"]
    )
    assert "resources.0: resource 'Topic:*x'" in refused(
        ErrorReason.INVALID_ARGUMENT, acl_deleted, tables, "User:app", ["Topic:*x"]
    )
    assert "policy_type: 'Other'" in refused(
        ErrorReason.INVALID_ARGUMENT, acl_deleted, tables, "User:app", ["Topic:b"], "Other"
    )
    tables, left = acl_deleted(tables, "User:app", ["Topic:b"])
    assert left is None and tables.acls == ()
    assert "User:app has no ACL" in refused(ErrorReason.ACL_NOT_EXIST, acl_deleted, tables, "User:app")


def test_user_edits() -> None:
    assert "user 'app' exists" in refused(ErrorReason.INVALID_ARGUMENT, user_created, BASE, APP)
    tables, updated = user_updated(BASE, {"username": "app", "userStatus": "disable"})
    assert not updated.enabled and updated.password == "pw" and tables.user("app") == updated
    assert "nothing to change" in refused(
        ErrorReason.INVALID_ARGUMENT, user_updated, BASE, {"username": "app"}
    )
    assert "userType: Input should be 'Super' or 'Normal'" in refused(
        ErrorReason.INVALID_ARGUMENT, user_updated, BASE, {"username": "app", "userType": "Root"}
    )
    assert "user 'bob' does not exist" in refused(
        ErrorReason.USER_NOT_EXIST, user_updated, BASE, {"username": "bob", "password": "x"}
    )
    with_acl, _ = acl_created(BASE, acl(("Topic:a", ["Pub"], "Allow")))
    tables, user, had_acl = user_deleted(with_acl, "app")
    assert (user, had_acl, tables.users, tables.acls) == (APP, True, (), ())


async def test_store_writes_before_serving_and_a_refused_edit_leaves_nothing(tmp_path: Path) -> None:
    store = AuthStore(tmp_path)
    await store.change(lambda t: user_created(t, APP))
    with pytest.raises(RpcFailure):
        await store.change(lambda t: user_created(t, APP))
    assert store.version == 1
    assert (tmp_path / AUTH_FILE).stat().st_mode & 0o777 == 0o600
    assert AuthStore(tmp_path).tables == store.tables  # what a restart reads


async def test_a_masters_copy_is_taken_under_a_version_newer_than_both(tmp_path: Path) -> None:
    """A demoted master whose last change never reached the new master holds version 6 of
    different content than the new master's version 5: the copy must move past 6."""
    slave = AuthStore(tmp_path / "slave")
    master = AuthStore(tmp_path / "master")
    for _ in range(6):
        await slave.change(lambda t: (AuthTables(version=t.version + 1, users=t.users), None))
    for _ in range(4):
        await master.change(lambda t: (AuthTables(version=t.version + 1), None))
    await master.change(lambda t: user_created(t, APP))
    assert (slave.version, master.version) == (6, 5)
    assert await slave.import_json(master.export_json(), "master m")
    assert slave.version == 7 and slave.tables.users == (APP,)
    assert not await slave.import_json(master.export_json(), "master m")  # same content: kept
    assert AuthStore(tmp_path / "slave").tables == slave.tables


async def test_each_change_is_stamped_later_than_the_last_and_announced(tmp_path: Path) -> None:
    clock = iter([5_000, 4_000, 9_000])  # the clock steps back once
    changes: list[int] = []
    store = AuthStore(tmp_path, on_change=lambda: changes.append(store.version), now_ms=lambda: next(clock))
    await store.change(lambda t: user_created(t, APP))
    assert store.tables.changed_ms == 5_000
    await store.change(lambda t: user_updated(t, {"username": "app", "password": "new"}))
    assert store.tables.changed_ms == 5_001  # never below the previous stamp plus one
    with pytest.raises(RpcFailure):
        await store.change(lambda t: user_created(t, APP))
    await store.change(lambda t: user_deleted(t, "app")[:2])
    assert store.tables.changed_ms == 9_000
    assert changes == [1, 2, 3]  # the refused change announced nothing
    assert AuthStore(tmp_path).tables.stamp == store.tables.stamp  # the stamp is on disk


async def test_a_masters_copy_keeps_the_masters_stamp(tmp_path: Path) -> None:
    master = AuthStore(tmp_path / "master", now_ms=lambda: 7_000)
    await master.change(lambda t: user_created(t, APP))
    announced: list[bool] = []
    slave = AuthStore(tmp_path / "slave", on_change=lambda: announced.append(True))
    assert await slave.import_json(master.export_json(), "master m")
    assert slave.tables.stamp == master.tables.stamp and announced == [True]  # the same change


async def test_the_file_and_its_backup_are_created_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Created 0600 by os.open, not opened wider and narrowed afterwards: with a umask that
    narrows nothing, and no chmod at all, both files are still the owner's only."""

    def no_chmod(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("auth.json must be created private, not chmod-ed after")

    monkeypatch.setattr("os.chmod", no_chmod)
    previous = os.umask(0)
    try:
        store = AuthStore(tmp_path)
        await store.change(lambda t: user_created(t, APP))
        await store.change(lambda t: user_deleted(t, "app")[:2])
    finally:
        os.umask(previous)
    path = tmp_path / AUTH_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.with_name(path.name + ".bak").stat().st_mode & 0o777 == 0o600
