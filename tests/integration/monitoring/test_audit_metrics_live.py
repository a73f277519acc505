"""The audit trail of a real name server with auth on: a call with a wrong secret and a call its
ACL does not allow each become one ``orbitmq.audit`` JSON line and one count on the server's own
``/metrics``; the secret is in neither; a server with auth off serves no audit family."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import grpc
import pytest
from promkit import fetch

from orbitmq.auth.model import Acl, User
from orbitmq.auth.signature import sign_v1
from orbitmq.auth.tables import AuthTables
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.v1 import nameserver_pb2, nameserver_pb2_grpc

pytestmark = pytest.mark.timeout(60)

SUPER, SUPER_SECRET = "root", "root-secret-for-audit"
APP, APP_SECRET = "audit-app", "app-secret-for-audit"
ROUTE = "/orbitmq.v1.NameServer/QueryRoute"


def _users_file(tmp_path: Path) -> Path:
    """One normal user allowed to read routes of topic ``a`` only."""
    acl = Acl.model_validate(
        {
            "subject": f"User:{APP}",
            "policies": [
                {
                    "policyType": "Custom",
                    "entries": [{"resource": "Topic:a", "actions": ["Get"], "decision": "Allow"}],
                }
            ],
        }
    )
    tables = AuthTables(version=1, users=(User(username=APP, password=APP_SECRET),), acls=(acl,))
    path = tmp_path / "users.json"
    path.write_text(tables.model_dump_json(by_alias=True, include={"users", "acls"}))
    return path


async def _query_route(address: str, topic: str, metadata: list[tuple[str, str]]) -> grpc.StatusCode:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = nameserver_pb2_grpc.NameServerStub(channel)
        try:
            await stub.QueryRoute(nameserver_pb2.QueryRouteRequest(topic=topic), metadata=metadata, timeout=5)
        except grpc.aio.AioRpcError as error:
            return error.code()
    return grpc.StatusCode.OK


def _samples(text: str) -> dict[str, float]:
    """orbitmq_auth_decisions_total samples of an exposition: labels text -> value."""
    found = {}
    for line in text.splitlines():
        if line.startswith("orbitmq_auth_decisions_total{"):
            labels, value = line.rsplit(" ", 1)
            found[labels.removeprefix("orbitmq_auth_decisions_total")] = float(value)
    return found


async def test_refusals_are_logged_and_counted_on_the_servers_metrics(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="orbitmq.audit")
    namesrv = NameServer(
        NameServerSettings(
            listen="127.0.0.1:0",
            metrics_listen="127.0.0.1:0",
            auth_enabled=True,
            auth_super_user=SUPER,
            auth_super_secret=SUPER_SECRET,
            auth_users_file=_users_file(tmp_path),
        )
    )
    plain = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen="127.0.0.1:0"))
    await namesrv.start()
    await plain.start()
    try:
        assert namesrv.metrics_url and plain.metrics_url
        before = _samples(fetch(namesrv.metrics_url))
        now_ms = time.time_ns() // 1_000_000
        wrong_secret = sign_v1(ROUTE, APP, "not-" + APP_SECRET, now_ms)
        assert await _query_route(namesrv.address, "a", wrong_secret) is grpc.StatusCode.UNAUTHENTICATED
        not_granted = sign_v1(ROUTE, APP, APP_SECRET, now_ms)
        assert await _query_route(namesrv.address, "b", not_granted) is grpc.StatusCode.PERMISSION_DENIED
        exposition = fetch(namesrv.metrics_url)
        plain_exposition = fetch(plain.metrics_url)
    finally:
        await plain.close()
        await namesrv.close()

    grown = {k: v - before.get(k, 0) for k, v in _samples(exposition).items()}
    assert grown['{action="",decision="authentication_failed",resource_type=""}'] == 1
    # A route query needs any of Pub, Sub or Get on the topic: the action label names them all.
    assert grown['{action="Pub|Sub|Get",decision="denied",resource_type="Topic"}'] == 1
    assert "orbitmq_auth_decisions" not in plain_exposition

    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "orbitmq.audit"]
    assert [(d["kind"], d["who"], d["rpc"]) for d in lines] == [
        ("authentication_failed", APP, ROUTE),
        ("denied", APP, ROUTE),
    ]
    assert lines[1]["resource"] == "Topic:b" and lines[1]["source"].startswith("ipv4:127.0.0.1:")
    assert APP_SECRET not in caplog.text and APP_SECRET not in exposition
