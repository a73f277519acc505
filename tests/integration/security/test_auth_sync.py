"""Users and ACLs made on the brokers reach the name servers and, through them, sidecars: a user
created with the Admin API signs route queries without any users file, a deleted one is refused
by the name server within a round trip of the change (measured, bound 2 s) and by a sidecar within
its sync interval; a restarted name server learns the tables again; ``GetAuthTables`` answers
super users only, and nothing while the caller's version is current."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from clusterkit import Cluster, eventually

from orbitmq.auth.model import User, UserType
from orbitmq.auth.tables import AuthTables
from orbitmq.broker.registration import Registrar
from orbitmq.client.admin import Admin
from orbitmq.common.auth_sync import SyncedTables, version_of
from orbitmq.common.clock import SYSTEM_CLOCK
from orbitmq.common.credentials import Credentials, signed
from orbitmq.common.guard import namesrv_guard
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.common.server import GrpcServer
from orbitmq.nameserver.auth_tables import ClusterAuthTables
from orbitmq.nameserver.routes import RouteTable
from orbitmq.nameserver.server import SERVICE_NAME, NameServer
from orbitmq.nameserver.servicer import NameServerServicer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.sidecar.client import SidecarClient
from orbitmq.sidecar.server import Sidecar
from orbitmq.sidecar.settings import SidecarSettings
from orbitmq.v1 import nameserver_pb2, nameserver_pb2_grpc
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(120)

SUPER, SUPER_SECRET = "root", "root-secret"
APP, APP_SECRET = "app", "app-secret"
AUTH = {"auth_enabled": True, "auth_super_user": SUPER, "auth_super_secret": SUPER_SECRET}
ROOT = Credentials(SUPER, SUPER_SECRET)
REVOCATION_BOUND_S = 2.0


def _as(monkeypatch: pytest.MonkeyPatch, user: str, secret: str) -> None:
    monkeypatch.setenv("ORBITMQ_ACCESS_KEY", user)
    monkeypatch.setenv("ORBITMQ_SECRET_KEY", secret)


async def _namesrv(listen: str = "127.0.0.1:0") -> NameServer:
    server = NameServer(NameServerSettings(listen=listen, metrics_listen=None, **AUTH))
    await server.start()
    return server


@pytest.fixture
async def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Cluster]:
    """Two broker groups and a name server, all with auth on; no users file anywhere; ``app``
    created on the brokers with Pub/Sub/Get on topic ``a`` and Sub on group ``readers``."""
    running = Cluster(tmp_path, await _namesrv())
    try:
        for name in ("broker-a", "broker-b"):
            await running.start_broker(name, register_interval_ms=500, **AUTH)
        _as(monkeypatch, SUPER, SUPER_SECRET)
        async with Admin(running.address) as admin:
            await admin.create_topic("a", read_queue_nums=1, write_queue_nums=1)
            await admin.create_group("readers")
            await admin.create_user(APP, APP_SECRET)
            await admin.create_acl(
                {
                    "subject": f"User:{APP}",
                    "policies": [
                        {
                            "entries": [
                                {
                                    "resource": "Topic:a",
                                    "actions": ["Pub", "Sub", "Get"],
                                    "decision": "Allow",
                                },
                                {"resource": "Group:readers", "actions": ["Sub"], "decision": "Allow"},
                            ]
                        }
                    ],
                }
            )
        yield running
    finally:
        for name in list(running.brokers):
            await running.stop_broker(name)
        await running.namesrv.close()


async def _route(address: str, credentials: Credentials) -> grpc.StatusCode:
    """QueryRoute of topic ``a`` signed as ``credentials``: OK or the refusal's code."""
    async with signed(grpc.aio.insecure_channel(address), credentials) as channel:
        try:
            await nameserver_pb2_grpc.NameServerStub(channel).QueryRoute(
                nameserver_pb2.QueryRouteRequest(topic="a"), timeout=5
            )
        except grpc.aio.AioRpcError as error:
            return error.code()
    return grpc.StatusCode.OK


async def _refused_within(check: object, bound_s: float) -> float:
    """Seconds until ``check()`` (async, True once refused) holds; fails past ``bound_s``."""
    started = time.monotonic()
    while not await check():  # type: ignore[operator]
        assert time.monotonic() - started < bound_s, f"still let in after {bound_s} s"
        await asyncio.sleep(0.01)
    return time.monotonic() - started


async def test_namesrv_decides_with_the_brokers_users_and_revokes_a_deleted_one(
    cluster: Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    app = Credentials(APP, APP_SECRET)
    assert await _route(cluster.address, app) is grpc.StatusCode.OK  # no users file: the brokers'
    assert await _route(cluster.address, Credentials(APP, "wrong")) is grpc.StatusCode.UNAUTHENTICATED
    stamps = [b.broker.auth_store.tables.stamp for b in cluster.brokers.values()]
    assert cluster.namesrv.auth is not None
    assert cluster.namesrv.auth.stamp("DefaultCluster") == max(stamps)  # the later group's change

    async with Admin(cluster.address) as admin:
        deleted_at = time.monotonic()
        await admin.delete_user(APP)
    answered_s = time.monotonic() - deleted_at

    async def refused() -> bool:
        return await _route(cluster.address, app) is grpc.StatusCode.UNAUTHENTICATED

    after_s = await _refused_within(refused, REVOCATION_BOUND_S)
    with capsys.disabled():
        print(
            f"\nnamesrv revocation: delete answered in {answered_s * 1000:.0f} ms, refused "
            f"{after_s * 1000:.0f} ms after that"
        )


async def test_a_restarted_namesrv_learns_the_tables_from_the_next_heartbeat(cluster: Cluster) -> None:
    address = cluster.namesrv.address
    await cluster.namesrv.close()
    cluster.namesrv = await _namesrv(address)
    assert cluster.namesrv.auth is not None and cluster.namesrv.auth.stamp("DefaultCluster") is None
    app = Credentials(APP, APP_SECRET)

    async def routed() -> bool:
        return await _route(address, app) is grpc.StatusCode.OK

    await eventually(routed, 10, lambda: "app is not let in by the restarted name server")


async def _tables(address: str, credentials: Credentials, known: nameserver_pb2.AuthVersion | None = None):  # type: ignore[no-untyped-def]
    async with signed(grpc.aio.insecure_channel(address), credentials) as channel:
        return await nameserver_pb2_grpc.NameServerStub(channel).GetAuthTables(
            nameserver_pb2.GetAuthTablesRequest(known_version=known), timeout=5
        )


async def test_get_auth_tables_answers_super_users_only_and_nothing_when_current(cluster: Cluster) -> None:
    reply = await _tables(cluster.address, ROOT)
    assert reply.changed and reply.version.digest
    tables = AuthTables.model_validate_json(reply.tables)
    app = tables.user(APP)
    assert app is not None and app.password == APP_SECRET  # what a proxy verifies signatures with
    assert tables.stamp == (reply.version.changed_ms, reply.version.digest)

    again = await _tables(cluster.address, ROOT, reply.version)
    assert not again.changed and again.tables == b"" and again.version == reply.version

    with pytest.raises(grpc.aio.AioRpcError) as denied:
        await _tables(cluster.address, Credentials(APP, APP_SECRET))
    failure = failure_of(denied.value)
    assert failure is not None and failure.reason == ErrorReason.NO_PERMISSION
    assert "may not" in (denied.value.details() or "") and APP_SECRET not in (denied.value.details() or "")


async def test_get_auth_tables_is_refused_by_a_namesrv_with_auth_off_or_no_tables_yet() -> None:
    plain = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None))
    await plain.start()
    fresh = await _namesrv()
    try:
        with pytest.raises(grpc.aio.AioRpcError, match="auth off") as refused:
            await _tables(plain.address, ROOT)
        assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.aio.AioRpcError, match="no broker has registered its users") as early:
            await _tables(fresh.address, ROOT)  # "no users" would lock everyone out of a proxy
        assert early.value.code() is grpc.StatusCode.UNAVAILABLE
    finally:
        await plain.close()
        await fresh.close()


async def test_synced_tables_never_go_back_to_a_lagging_namesrv(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ahead, behind = await _namesrv(), await _namesrv()
    for server, changed_ms, users in ((ahead, 2_000, [APP]), (behind, 1_000, [APP, "gone"])):
        sent = AuthTables.model_validate(
            {"changed_ms": changed_ms, "users": [{"username": u, "password": "pw"} for u in users]}
        )
        assert server.auth is not None and server.auth.offer("c", version_of(sent.stamp), sent.content_json())
    synced = SyncedTables(f"{ahead.address};{behind.address}", None, ROOT, interval_s=60)
    try:
        await synced.start()
        assert [u.username for u in synced().users] == [APP]
        await ahead.close()  # the next round asks the one behind
        with caplog.at_level(logging.WARNING, logger="orbitmq.common.auth_sync"):
            assert not await synced.refresh()
        assert [u.username for u in synced().users] == [APP] and synced.received == 1
        assert "before the 2000 held: kept those" in caplog.text
    finally:
        await synced.stop()
        await ahead.close()
        await behind.close()


async def test_synced_tables_follow_the_brokers(cluster: Cluster, caplog: pytest.LogCaptureFixture) -> None:
    synced = SyncedTables(f"127.0.0.1:1;{cluster.address}", None, ROOT, interval_s=0.2)  # the first is down
    await synced.start()
    try:
        first = synced()
        assert first.user(APP) is not None and synced.received == 1
        async with Admin(cluster.address) as admin:
            deleted_at = time.monotonic()
            await admin.delete_user(APP)

        async def gone() -> bool:
            return synced().user(APP) is None

        await _refused_within(gone, REVOCATION_BOUND_S)
        assert synced().version > first.version  # decision caches drop their verdicts
        assert time.monotonic() - deleted_at < REVOCATION_BOUND_S
    finally:
        await synced.stop()

    not_super = SyncedTables(cluster.address, None, Credentials(SUPER, "wrong"), interval_s=0.2)
    with caplog.at_level(logging.WARNING, logger="orbitmq.common.auth_sync"):
        await not_super.start()
        await not_super.stop()
    assert not_super.received == 0 and not_super().users == ()
    assert "cannot fetch users and ACLs" in caplog.text and "UNAUTHENTICATED" in caplog.text


async def test_sidecar_checks_applications_against_the_brokers_users(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The sidecar reaches the cluster (and fetches users) as root, from ORBITMQ_ACCESS_KEY.
    settings = SidecarSettings(
        namesrv=cluster.address,
        group="readers",
        subscriptions=["a"],
        listen="127.0.0.1:0",
        metrics_listen=None,
        auth_sync_interval_ms=200,
        **AUTH,
    )
    sidecar = Sidecar(settings)
    await sidecar.start()
    try:
        async with SidecarClient(sidecar.address, credentials=Credentials(APP, APP_SECRET)) as client:
            await client.send("a", b"as the brokers' app")
            async with Admin(cluster.address) as admin:
                await admin.delete_user(APP)

            async def refused() -> bool:
                try:
                    await client.send("a", b"after the delete")
                except RpcFailure as failure:
                    return failure.reason == ErrorReason.UNAUTHENTICATED
                return False

            await _refused_within(refused, REVOCATION_BOUND_S)
    finally:
        await sidecar.drain()


NAMESRV_AUTH = NameServerSettings(listen="127.0.0.1:0", **AUTH)


class RecordingServicer(NameServerServicer):
    """A name server's servicer that notes what each registration carried of the auth tables."""

    def __init__(self, auth: ClusterAuthTables | None) -> None:
        super().__init__(RouteTable(SYSTEM_CLOCK), auth=auth)
        self.seen: list[tuple[str, bool]] = []  # (stamp digest, whether the tables came along)

    async def RegisterBroker(self, request: Any, context: Any) -> Any:
        self.seen.append((request.auth_version.digest, bool(request.auth_tables)))
        return await super().RegisterBroker(request, context)


async def _serve(servicer: RecordingServicer) -> GrpcServer:
    auth = servicer._auth
    guard = None if auth is None else namesrv_guard(NAMESRV_AUTH, auth.decision_tables)
    server = GrpcServer("namesrv", "127.0.0.1:0", metrics_listen=None, guard=guard)
    server.add_service(
        SERVICE_NAME, lambda s: nameserver_pb2_grpc.add_NameServerServicer_to_server(servicer, s)
    )
    await server.start()
    return server


async def test_tables_go_once_per_change_and_only_to_name_servers_that_take_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    taking = RecordingServicer(ClusterAuthTables(bootstrap=NAMESRV_AUTH.bootstrap_user()))
    ignoring = RecordingServicer(None)
    servers = [await _serve(taking), await _serve(ignoring)]
    current = [AuthTables.model_validate({"changed_ms": 1, "users": [{"username": APP, "password": "pw"}]})]
    registrar = Registrar(
        [server.address for server in servers],
        build_request=lambda: nameserver_pb2.RegisterBrokerRequest(
            cluster="c", broker_name="b", broker_addr="127.0.0.1:1", heartbeat_timeout_ms=60_000
        ),
        on_reply=lambda reply: None,
        is_waiting=lambda: False,
        interval_s=0.05,  # heartbeats
        clock=SYSTEM_CLOCK,
        owner="b",
        credentials=ROOT,  # the broker's bootstrap super user
        auth=lambda: current[0],
    )
    try:
        await registrar.register_at_start()
        registrar.start()
        await eventually(lambda: taking.seen.count((current[0].digest, True)) == 1, 5)
        first = current[0]
        current[0] = AuthTables(changed_ms=2, users=(), acls=())  # the user deleted
        registrar.request()
        await eventually(lambda: len([s for s in taking.seen if s[0] == current[0].digest]) >= 3, 5)
        assert taking.seen.count((first.digest, True)) == 1  # the first tables, once
        assert taking.seen.count((current[0].digest, True)) == 1  # the change, once; then versions only
        assert [sent for _, sent in ignoring.seen] == [False] * len(ignoring.seen)  # never a secret
        assert {digest for digest, _ in ignoring.seen} >= {first.digest, current[0].digest}
        assert taking._auth is not None and taking._auth.stamp("c") == current[0].stamp
        newer = AuthTables(changed_ms=3, users=(User(username="late", password="pw"),))
        assert taking._auth.offer("c", version_of(newer.stamp), newer.content_json())  # another group's
        with caplog.at_level(logging.WARNING, logger="orbitmq.broker.registration"):
            registrar.request()
            await eventually(lambda: "older than the cluster's newest" in caplog.text, 5)
        assert taking.seen[-1][1] is False  # it does not push its older tables
    finally:
        await registrar.close()
        for server in servers:
            await server.stop(0)


async def test_only_a_super_user_registers_tables(cluster: Cluster) -> None:
    """A Cluster Update grant lets a user register brokers, not make the users the name server
    decides with (it would make itself a super user there, and read every secret)."""
    async with Admin(cluster.address) as admin:
        await admin.create_user("ops", "ops-secret")
        await admin.update_acl(
            {
                "subject": "User:ops",
                "policies": [
                    {"entries": [{"resource": "Cluster:*", "actions": ["All"], "decision": "Allow"}]}
                ],
            }
        )
    auth = cluster.namesrv.auth
    assert auth is not None
    newest = max(b.broker.auth_store.tables.stamp for b in cluster.brokers.values())
    await eventually(lambda: auth.stamp("DefaultCluster") == newest, 5)  # both groups registered
    forged = AuthTables(
        changed_ms=2**40, users=(User(username="ops", password="ops-secret", user_type=UserType.SUPER),)
    )
    request = nameserver_pb2.RegisterBrokerRequest(
        cluster="DefaultCluster",
        broker_name="forged",
        broker_addr="127.0.0.1:1",
        auth_version=version_of(forged.stamp),
        auth_tables=forged.content_json(),
    )
    ops = Credentials("ops", "ops-secret")
    async with signed(grpc.aio.insecure_channel(cluster.address), ops) as channel:
        with pytest.raises(grpc.aio.AioRpcError, match=r"ops may not send the users and ACLs") as refused:
            await nameserver_pb2_grpc.NameServerStub(channel).RegisterBroker(request, timeout=5)
    assert refused.value.code() is grpc.StatusCode.PERMISSION_DENIED
    assert auth.stamp("DefaultCluster") == newest
    assert "forged" not in cluster.namesrv.table.cluster_info().broker_addr_table
