"""The official RocketMQ 5 Java client with session credentials (``StaticSessionCredentialsProvider``)
through ``orbitmq proxy`` with auth on: it signs with upper-case hex, which the proxy takes; its
sends arrive; with a wrong secret each send fails with the protocol's UNAUTHORIZED."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from javakit import spec
from v2kit import V2Cluster, v2_cluster

from orbitmq.auth.model import Acl, User
from orbitmq.auth.tables import AuthTables
from orbitmq.interop import java_client

pytestmark = pytest.mark.timeout(120)

SUPER, SUPER_SECRET = "root", "root-secret"
AUTH = {"auth_enabled": True, "auth_super_user": SUPER, "auth_super_secret": SUPER_SECRET}
APP, APP_SECRET = "java-app", "java-secret"
TOPIC = "JSecure"
SECRET_ENV = "ORBITMQ_TEST_JAVA_SECRET"


@pytest.fixture
async def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[V2Cluster]:
    for name in ("ORBITMQ_ACCESS_KEY", "ORBITMQ_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)  # the proxy signs as its super user
    acl = Acl.model_validate(
        {
            "subject": f"User:{APP}",
            "policies": [
                {"entries": [{"resource": f"Topic:{TOPIC}", "actions": ["Pub"], "decision": "Allow"}]}
            ],
        }
    )
    users = AuthTables(users=(User(username=APP, password=APP_SECRET),), acls=(acl,))
    users_file = tmp_path / "proxy-users.json"
    users_file.write_text(users.model_dump_json(by_alias=True, include={"users", "acls"}))
    async with v2_cluster(
        tmp_path / "cluster", {**AUTH, "auth_users_file": users_file}, AUTH, **AUTH
    ) as running:
        yield running


async def _send(
    cluster: V2Cluster, tmp_path: Path, secret: str, monkeypatch: pytest.MonkeyPatch
) -> java_client.Events:
    monkeypatch.setenv(SECRET_ENV, secret)
    return await java_client.run(
        tmp_path / "java",
        "send",
        endpoint=cluster.endpoint,
        access_key=APP,
        secret_key_env=SECRET_ENV,
        max_attempts=1,
        messages=[spec(TOPIC, f"signed {i}".encode()) for i in range(3)],
    )


async def test_java_client_with_session_credentials_sends(
    cluster: V2Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = await _send(cluster, tmp_path, APP_SECRET, monkeypatch)
    assert (events.summary["sent"], events.summary["failed"]) == (3, 0)
    monkeypatch.setenv("ORBITMQ_ACCESS_KEY", SUPER)  # the check's own reads, from the brokers
    monkeypatch.setenv("ORBITMQ_SECRET_KEY", SUPER_SECRET)
    assert sorted(m.body for m in await cluster.receive(TOPIC, 3)) == [b"signed 0", b"signed 1", b"signed 2"]


async def test_java_client_with_a_wrong_secret_is_unauthorized(
    cluster: V2Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = await _send(cluster, tmp_path, "not-the-secret", monkeypatch)
    assert (events.summary["sent"], events.summary["failed"]) == (0, 3)
    failures = events.of("send_failed")
    assert failures and "authentication failed" in str(failures[0]), failures[0]
    assert await cluster.metric("orbitmq_proxy_requests_total", rpc="QueryRoute", code="UNAUTHORIZED") >= 1
