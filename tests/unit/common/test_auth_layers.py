"""A proxy's or sidecar's users: the brokers' (synced) over its users file, with its bootstrap
super user, merged again only when the synced tables change, under a version that grows."""

from __future__ import annotations

import pytest

from orbitmq.auth.model import User, UserType
from orbitmq.auth.tables import AuthTables
from orbitmq.common.auth_sync import SyncedTables, layered_provider
from orbitmq.common.credentials import Credentials
from orbitmq.common.namesrv_list import NamesrvListError


def users(*pairs: tuple[str, str]) -> AuthTables:
    return AuthTables(users=tuple(User(username=u, password=p) for u, p in pairs))


ROOT = User(username="root", password="root-secret", user_type=UserType.SUPER)


def test_synced_users_over_the_file_with_the_bootstrap_user() -> None:
    synced = [users(("app", "stored"))]
    provider = layered_provider(users(("app", "file"), ("reader", "file")), lambda: synced[0], ROOT)
    first = provider()
    assert provider() is first  # nothing changed: no merge, the same object
    assert (first.secret_of("app"), first.secret_of("reader"), first.secret_of("root")) == (
        "stored",
        "file",
        "root-secret",
    )
    synced[0] = users(("root", "stored-root"))  # app deleted on the brokers, root stored there
    second = provider()
    assert second.version > first.version  # decision caches drop their verdicts
    assert second.secret_of("app") == "file"  # the file's own user again
    assert second.secret_of("root") == "stored-root"


def test_bad_arguments_are_refused_naming_them() -> None:
    with pytest.raises(ValueError, match="interval_s 0 must be more than 0"):
        SyncedTables("127.0.0.1:9876", None, Credentials("root", "s"), interval_s=0)
    with pytest.raises(NamesrvListError):
        SyncedTables("nohost", None, Credentials("root", "s"))
