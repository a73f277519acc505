"""What a name server keeps of its brokers' users and ACLs: the newest stamp per cluster wins,
tables that do not match their version or break a rule are refused naming the field, and its
decisions layer the brokers' users over its users file, with its bootstrap super user."""

from __future__ import annotations

from typing import Any

import pytest

from orbitmq.auth.model import User, UserType
from orbitmq.auth.tables import AuthTables
from orbitmq.common.auth_sync import version_of
from orbitmq.common.rpc import RpcFailure
from orbitmq.nameserver.auth_tables import ClusterAuthTables
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(30)


def tables(changed_ms: int, *users: tuple[str, str], acl_for: str = "") -> AuthTables:
    acls = ()
    if acl_for:
        entry = {"resource": "Topic:a", "actions": ["Pub"], "decision": "Allow"}
        acls = ({"subject": f"User:{acl_for}", "policies": [{"entries": [entry]}]},)
    return AuthTables.model_validate(
        {
            "changed_ms": changed_ms,
            "users": [{"username": u, "password": p} for u, p in users],
            "acls": acls,
        }
    )


def offer(auth: ClusterAuthTables, cluster: str, sent: AuthTables) -> bool:
    return auth.offer(cluster, version_of(sent.stamp), sent.content_json())


def refusal(auth: ClusterAuthTables, version: Any, raw: bytes) -> str:
    with pytest.raises(RpcFailure) as refused:
        auth.offer("c", version, raw)
    assert refused.value.reason == ErrorReason.INVALID_ARGUMENT
    return refused.value.message


def test_the_newest_stamp_of_a_cluster_wins() -> None:
    auth = ClusterAuthTables()
    assert auth.of("") is None and auth.of("c") is None  # not "no users": nothing heard yet
    newer, older = tables(2_000, ("app", "pw2")), tables(1_000, ("app", "pw1"), ("gone", "x"))
    assert offer(auth, "c", newer)
    assert not offer(auth, "c", older)  # a group that missed the change
    assert not offer(auth, "c", newer)  # the same tables again: nothing to take
    held = auth.of("c")
    assert auth.stamp("c") == newer.stamp and held is not None and held.secret_of("app") == "pw2"
    assert auth.of("other") is None and auth.stamp("other") is None


def test_tables_not_matching_their_version_or_breaking_a_rule_are_refused() -> None:
    auth = ClusterAuthTables()
    sent = tables(1_000, ("app", "pw"))
    claimed = version_of(tables(1_000, ("app", "other")).stamp)
    assert "auth_tables: content is (1000" in refusal(auth, claimed, sent.content_json())
    assert "without auth_version" in refusal(auth, version_of(None), sent.content_json())
    bad = b'{"changed_ms": 5, "users": [{"username": "app", "password": ""}], "acls": []}'
    assert "auth_tables: users.0.password: a user needs a non-empty secret" in refusal(
        auth, version_of(sent.stamp), bad
    )
    assert auth.stamp("c") is None  # nothing kept
    assert not auth.offer("c", version_of(sent.stamp), b"")  # a heartbeat: the version only


def test_decisions_layer_the_brokers_users_over_the_file_and_keep_the_bootstrap_user() -> None:
    local = tables(0, ("reader", "file-secret"), ("app", "file-secret"), acl_for="app")
    root = User(username="root", password="root-secret", user_type=UserType.SUPER)
    auth = ClusterAuthTables(local, root)
    before = auth.decision_tables()
    assert {u.username for u in before.users} == {"reader", "app", "root"}
    assert offer(auth, "c1", tables(1_000, ("app", "stored-secret")))
    assert offer(auth, "c2", tables(3_000, ("ops", "ops-secret"), ("root", "stored-root")))
    decided = auth.decision_tables()
    assert decided.version > before.version  # decision caches drop their verdicts
    assert decided.secret_of("app") == "stored-secret" and decided.acl_of("app") is None  # the brokers'
    assert decided.secret_of("reader") == "file-secret"  # only in the file: kept
    assert decided.secret_of("root") == "stored-root"  # a stored user of the name wins
    assert {u.username for u in auth.merged.users} == {"app", "ops", "root"}
    assert auth.merged.changed_ms == 3_000


def test_a_username_in_two_clusters_is_the_later_changed_clusters() -> None:
    auth = ClusterAuthTables()
    assert offer(auth, "late", tables(5_000, ("app", "late"), acl_for="app"))
    assert offer(auth, "early", tables(1_000, ("app", "early")))
    assert auth.merged.secret_of("app") == "late" and auth.merged.acl_of("app") is not None
