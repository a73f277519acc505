"""A name server and a broker with auth on and a bootstrap super user: the super user produces,
consumes and administers; a call without credentials, with a wrong secret or with a stale
(replayed) signature is refused at once naming the cause; a normal user gets what its ACL
grants and nothing else."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from brokerkit import TEST_SETTINGS

from orbitmq.auth.model import Acl, User
from orbitmq.auth.signature import sign_v1
from orbitmq.auth.tables import AuthTables
from orbitmq.broker.server import Broker
from orbitmq.broker.settings import BrokerSettings
from orbitmq.client.admin import Admin
from orbitmq.client.channels import Channels
from orbitmq.client.message import Message
from orbitmq.client.producer import Producer, TransactionProducer
from orbitmq.client.pull_consumer import PullConsumer
from orbitmq.common.credentials import Credentials, signed
from orbitmq.common.guard import AuthUsersError, load_users_file
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.common.settings import SettingsError, load_settings
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.sidecar.client import SidecarClient
from orbitmq.sidecar.server import Sidecar
from orbitmq.sidecar.settings import SidecarSettings
from orbitmq.v1 import broker_pb2, nameserver_pb2, nameserver_pb2_grpc
from orbitmq.v1.broker_pb2 import ErrorReason, TransactionResolution

pytestmark = pytest.mark.timeout(120)

SUPER, SUPER_SECRET = "root", "root-secret"
APP, APP_SECRET = "orders-app", "app-secret"
AUTH = {"auth_enabled": True, "auth_super_user": SUPER, "auth_super_secret": SUPER_SECRET}


class StoredTables:
    """What the broker reads users and ACLs from (the store's ``tables`` property)."""

    def __init__(self, tables: AuthTables) -> None:
        self.tables = tables


@dataclass
class Cluster:
    namesrv: NameServer
    broker: Broker

    @property
    def address(self) -> str:
        return self.namesrv.address


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    app = User(username=APP, password=APP_SECRET)
    acl = Acl.model_validate(
        {
            "subject": f"User:{APP}",
            "policies": [
                {
                    "policyType": "Custom",
                    "entries": [
                        {"resource": "Topic:a", "actions": ["Pub", "Sub", "Get"], "decision": "Allow"},
                        {"resource": "Topic:b", "actions": ["Get"], "decision": "Allow"},
                        {"resource": "Group:app-*", "actions": ["Sub", "Get"], "decision": "Allow"},
                    ],
                }
            ],
        }
    )
    tables = AuthTables(version=1, users=(app,), acls=(acl,))
    users_file = tmp_path / "users.json"  # the name server's: route queries of the application
    users_file.write_text(tables.model_dump_json(by_alias=True, include={"users", "acls"}))
    namesrv_settings = NameServerSettings(
        listen="127.0.0.1:0", metrics_listen=None, auth_users_file=users_file, **AUTH
    )
    namesrv = NameServer(namesrv_settings)
    await namesrv.start()
    broker_settings = BrokerSettings(
        data_dir=tmp_path / "broker-a", namesrv=namesrv.address, **TEST_SETTINGS, **AUTH
    )
    broker = Broker(broker_settings)
    try:
        await broker.start()
    except BaseException:
        await namesrv.close()
        raise
    broker.auth_store = StoredTables(tables)  # type: ignore[attr-defined,assignment]
    yield Cluster(namesrv, broker)
    await broker.close()
    await namesrv.close()


def _as(monkeypatch: pytest.MonkeyPatch, user: str | None, secret: str | None) -> None:
    for name, value in (("ORBITMQ_ACCESS_KEY", user), ("ORBITMQ_SECRET_KEY", secret)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)


async def test_super_user_produces_consumes_and_administers(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    _as(monkeypatch, SUPER, SUPER_SECRET)
    async with Admin(cluster.address) as admin:
        await admin.create_topic("orders", read_queue_nums=2, write_queue_nums=2)
        assert [b.broker_name for b in await admin.brokers()] == ["broker-a"]  # registered, signed
    async with Producer("p", cluster.address) as producer:
        for index in range(3):
            await producer.send(Message("orders", f"order {index}".encode()))
    bodies: list[str] = []
    async with PullConsumer("readers", cluster.address) as consumer:
        for queue in await consumer.queues("orders"):
            result = await consumer.pull(queue, 0, max_nums=32)
            bodies += [message.body.decode() for message in result.messages]
    assert sorted(bodies) == [f"order {index}" for index in range(3)]
    async with Admin(cluster.address) as admin:
        assert await admin.wipe_write_perm("broker-a")
        assert await admin.add_write_perm("broker-a")


async def _route(address: str, metadata: list[tuple[str, str]] | None) -> grpc.aio.AioRpcError:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = nameserver_pb2_grpc.NameServerStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.QueryRoute(
                nameserver_pb2.QueryRouteRequest(topic="orders"), metadata=metadata, timeout=5
            )
    return refused.value


ROUTE = "/orbitmq.v1.NameServer/QueryRoute"


async def test_missing_wrong_and_stale_credentials_are_refused_naming_the_cause(cluster: Cluster) -> None:
    now_ms = time.time_ns() // 1_000_000
    cases = {
        "no credentials": None,
        "does not match": sign_v1(ROUTE, SUPER, "not-the-secret", now_ms),
        "unknown access key": sign_v1(ROUTE, "nobody", SUPER_SECRET, now_ms),
        "from the server's clock": sign_v1(ROUTE, SUPER, SUPER_SECRET, now_ms - 10 * 60_000),
        "QueryRoute: signature of 'root' does not match": sign_v1(
            "/orbitmq.v1.NameServer/GetTopicList", SUPER, SUPER_SECRET, now_ms
        ),
    }
    for cause, metadata in cases.items():
        error = await _route(cluster.address, metadata)
        assert error.code() is grpc.StatusCode.UNAUTHENTICATED, cause
        assert cause in (error.details() or ""), (cause, error.details())
        failure = failure_of(error)
        assert failure is not None and failure.reason == ErrorReason.UNAUTHENTICATED, cause
        assert failure.metadata == {"auth": "authentication"} and not failure.retriable


async def test_client_without_credentials_fails_at_once(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    _as(monkeypatch, None, None)
    started = time.monotonic()
    async with Producer("p", cluster.address) as producer:
        with pytest.raises(Exception, match="no credentials"):
            await producer.send(Message("orders", b"x"))
    assert time.monotonic() - started < 5


async def test_normal_user_gets_its_grants_only(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    _as(monkeypatch, SUPER, SUPER_SECRET)
    async with Admin(cluster.address) as admin:
        await admin.create_topic("a", read_queue_nums=1, write_queue_nums=1)
        await admin.create_topic("b", read_queue_nums=1, write_queue_nums=1)
        await admin.create_group("app-readers")
    _as(monkeypatch, APP, APP_SECRET)
    async with Producer("p", cluster.address) as producer:
        await producer.send(Message("a", b"allowed"))
        with pytest.raises(Exception, match=f"{APP} may not Pub on Topic:b \\(SendMessage\\)"):
            await producer.send(Message("b", b"denied"))
    async with PullConsumer("app-readers", cluster.address) as consumer:
        (queue,) = await consumer.queues("a")
        assert [m.body for m in (await consumer.pull(queue, 0, max_nums=8)).messages] == [b"allowed"]
    async with Admin(cluster.address) as admin:
        with pytest.raises(Exception, match=f"{APP} may not Update on Group:app-readers"):
            await admin.reset_offset("app-readers", "a", offset=0)
        with pytest.raises(Exception, match=f"{APP} may not Update on Cluster:DefaultCluster"):
            await admin.wipe_write_perm("broker-a")
    broker_guard, namesrv_guard = cluster.broker.grpc.guard, cluster.namesrv.grpc.guard
    assert broker_guard is not None and broker_guard.refusals == 2  # the send, the reset
    assert namesrv_guard is not None and namesrv_guard.refusals == 1  # the write-perm wipe


async def test_session_stream_is_checked_on_its_hello(cluster: Cluster) -> None:
    channels = Channels(cluster.address, credentials=Credentials(APP, APP_SECRET))

    async def hello(group: str) -> AsyncIterator[broker_pb2.ClientEvent]:
        yield broker_pb2.ClientEvent(hello=broker_pb2.SessionHello(client_id="c", consumer_groups=[group]))
        await asyncio.sleep(30)

    try:
        call = channels.broker(cluster.broker.address).Session(hello("other-group"))
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            async for _ in call:
                pass
        assert denied.value.code() is grpc.StatusCode.PERMISSION_DENIED
        assert f"{APP} may not Sub on Group:other-group (Session)" in (denied.value.details() or "")
    finally:
        await channels.close()


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ORBITMQ_")}
    return subprocess.run(
        [sys.executable, "-m", "orbitmq.cli.main", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_cli_signs_with_its_access_key(cluster: Cluster) -> None:
    produce = ("produce", "--namesrv", cluster.address, "--topic", "cli", "--body", "signed")
    signed = await asyncio.to_thread(
        _cli, *produce, "--access-key", SUPER, env={"ORBITMQ_SECRET_KEY": SUPER_SECRET}
    )
    assert signed.returncode == 0, signed.stderr
    unsigned = await asyncio.to_thread(_cli, *produce, env={})
    assert unsigned.returncode != 0 and "no credentials" in unsigned.stderr, unsigned.stderr
    half = await asyncio.to_thread(_cli, *produce, "--access-key", SUPER, env={})
    assert (
        half.returncode == 2
        and "--access-key (ORBITMQ_ACCESS_KEY) is set without --secret-key" in half.stderr
    )


def _local_up(data_dir: Path, *extra: str) -> tuple[subprocess.Popen[str], dict[str, object]]:
    free = [a for flag in ("--namesrv-port", "--broker-port") for a in (flag, "0")]
    free += ["--namesrv-metrics-port", "0", "--broker-metrics-port", "0"]
    command = ["local", "up", "--data-dir", str(data_dir), "--json", *free, *extra]
    process = subprocess.Popen(
        [sys.executable, "-m", "orbitmq.cli.main", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("ORBITMQ_")},
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, process.stderr.read() if process.stderr else ""
    return process, json.loads(line)


def _read_auth_env(path: Path) -> tuple[int, dict[str, str]]:
    lines = path.read_text().splitlines()
    return path.stat().st_mode, dict(line.removeprefix("export ").split("=", 1) for line in lines)


async def _master_is(address: str, credentials: Credentials) -> bool:
    channels = Channels(address, credentials=credentials)
    try:
        state = await channels.broker(address).GetHaState(broker_pb2.GetHaStateRequest(), timeout=2)
        return bool(state.role != "SLAVE")
    except grpc.aio.AioRpcError:
        return False
    finally:
        await channels.close()


async def test_local_up_auth_signs_the_supervisors_own_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`local up --auth`: a super user in the data dir's auth.env; clients without it are
    refused; the supervisor's failover (GetHaState, ChangeRole) signs its calls and still works."""
    data_dir = tmp_path / "local"
    process, info = _local_up(data_dir, "--auth", "--slaves", "1", "--failover-after-ms", "500")
    try:
        mode, values = _read_auth_env(Path(str(info["auth_env"])))
        assert mode & 0o077 == 0  # the owner's only
        credentials = Credentials(values["ORBITMQ_ACCESS_KEY"], values["ORBITMQ_SECRET_KEY"])
        assert info["access_key"] == credentials.access_key
        namesrv = str(info["namesrv"])
        _as(monkeypatch, None, None)
        with pytest.raises(Exception, match="no credentials"):
            async with Admin(namesrv) as admin:
                await admin.topic_list()
        _as(monkeypatch, credentials.access_key, credentials.secret_key)
        async with Producer("p", namesrv) as producer:
            await producer.send(Message("local", b"before"))
        components = info["components"]
        master = str(components["broker broker-a"]["address"])  # type: ignore[index]
        slave = str(components["broker broker-a-s1"]["address"])  # type: ignore[index]
        os.kill(int(components["broker broker-a"]["pid"]), signal.SIGKILL)  # type: ignore[index]
        deadline = time.monotonic() + 30
        while not await _master_is(slave, credentials):
            assert time.monotonic() < deadline, "the slave was not promoted"
            await asyncio.sleep(0.2)
        assert master != slave
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "failover 1: broker broker-a-s1 is master" in err


async def test_ending_a_transaction_needs_pub_on_its_topic(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    _as(monkeypatch, SUPER, SUPER_SECRET)
    async with TransactionProducer(
        "tx",
        cluster.address,
        local_transaction=lambda *_: TransactionResolution.UNKNOWN,
        check=lambda _: TransactionResolution.UNKNOWN,
    ) as producer:
        result, _ = await producer.send_in_transaction(Message("b", b"half"))
    end = broker_pb2.EndTransactionRequest(
        producer_group="tx",
        commit_log_offset=result.commit_log_offset,
        resolution=TransactionResolution.COMMIT,
    )
    as_app = Channels(cluster.address, credentials=Credentials(APP, APP_SECRET))
    as_super = Channels(cluster.address, credentials=Credentials(SUPER, SUPER_SECRET))
    try:
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await as_app.broker(cluster.broker.address).EndTransaction(end, timeout=5)
        assert f"{APP} may not Pub on Topic:b (EndTransaction)" in (denied.value.details() or "")
        await as_super.broker(cluster.broker.address).EndTransaction(end, timeout=5)
    finally:
        await as_app.close()
        await as_super.close()


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        ({"auth_enabled": True}, "auth_enabled needs a bootstrap super user"),
        ({"auth_super_user": "root"}, "auth_super_user is set without its pair"),
        ({"auth_super_user": "root", "auth_super_secret": " "}, "non-empty secret"),
        ({"auth_super_user": "bad name", "auth_super_secret": "s"}, "username 'bad name' breaks the rule"),
    ],
)
def test_bad_auth_settings_are_refused_naming_the_setting(flags: dict[str, object], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        load_settings(NameServerSettings, env_prefix="ORBITMQ_NAMESRV_", flags=flags, environ={})


def test_a_bad_users_file_is_refused_naming_file_and_field(tmp_path: Path) -> None:
    users = tmp_path / "users.yaml"
    users.write_text("users:\n  - {username: app, password: ''}\n")
    with pytest.raises(AuthUsersError, match=r"users\.yaml: .*users.*non-empty secret"):
        load_users_file(users)


async def test_sidecar_checks_its_applications(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _as(monkeypatch, SUPER, SUPER_SECRET)  # the sidecar's own consumer and producer reach the cluster as root
    settings = SidecarSettings(
        namesrv=cluster.address,
        group="app-readers",
        subscriptions=["a"],
        consume_from="first",
        listen="127.0.0.1:0",
        metrics_listen=None,
        auth_users_file=tmp_path / "users.json",  # the cluster fixture's: orders-app
        **AUTH,
    )
    sidecar = Sidecar(settings)
    await sidecar.start()
    try:
        async with SidecarClient(sidecar.address) as anonymous:
            with pytest.raises(RpcFailure, match=r"no credentials .* SidecarClient"):
                await anonymous.send("a", b"x")
        async with SidecarClient(sidecar.address, credentials=Credentials(APP, APP_SECRET)) as client:
            await client.send("a", b"through the sidecar")
            with pytest.raises(Exception, match=f"{APP} may not Pub on Topic:b"):
                await client.send("b", b"denied")

            async def first() -> bytes:
                async for delivery in client.deliveries(app_id="app"):
                    await delivery.ack()
                    return delivery.body
                raise AssertionError("the stream ended")

            assert await asyncio.wait_for(first(), 30) == b"through the sidecar"
    finally:
        await sidecar.drain()


def test_namesrv_with_auth_but_no_super_user_exits_naming_the_flag() -> None:
    refused = _cli("namesrv", "--auth-enabled", "--listen", "127.0.0.1:0", "--metrics-listen", "", env={})
    assert refused.returncode == 2
    assert "auth_enabled needs a bootstrap super user" in refused.stderr
    assert "[from flag --auth-enabled]" in refused.stderr


async def test_every_audit_line_carries_the_request_id_the_refusal_names(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    """The client library sends x-orbitmq-request-id on each signed call; a call without one
    (anonymous) gets one made by the server. Either is in the refusal and in its audit line."""
    app = Credentials(APP, APP_SECRET)
    with caplog.at_level(logging.WARNING, logger="orbitmq.audit"):
        async with signed(grpc.aio.insecure_channel(cluster.address), app) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as denied:  # no grant on topic "orders"
                await nameserver_pb2_grpc.NameServerStub(channel).QueryRoute(
                    nameserver_pb2.QueryRouteRequest(topic="orders"), timeout=5
                )
        anonymous = await _route(cluster.address, None)
    ids = [re.search(r"\(request id ([0-9a-f-]+)\)", e.details() or "") for e in (denied.value, anonymous)]
    assert ids[0] is not None and ids[1] is not None, (denied.value.details(), anonymous.details())
    client_id, server_id = ids[0][1], ids[1][1]
    assert re.fullmatch(r"[0-9a-f]{12}-[0-9a-f]+", client_id)  # the client's: process prefix and count
    assert re.fullmatch(r"[0-9a-f]{16}", server_id)  # made by the name server
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "orbitmq.audit"]
    events = {line["request_id"]: line for line in lines}
    assert events[client_id]["kind"] == "denied" and events[client_id]["who"] == APP
    assert events[server_id]["kind"] == "authentication_failed"
    assert all(e["request_id"] for e in events.values())


@pytest.mark.parametrize(("granted", "allowed"), [("prod", True), ("DefaultCluster", False)])
async def test_namesrv_decides_cluster_wide_calls_against_its_cluster_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, granted: str, allowed: bool
) -> None:
    """A name server of cluster ``prod`` (the operator passes ``--cluster <resource name>``)
    grants its cluster info to ``Get`` on ``Cluster:prod``, not on the default cluster's name."""
    reader = User(username="reader", password="reader-secret")
    acl = Acl.model_validate(
        {
            "subject": "User:reader",
            "policies": [
                {"entries": [{"resource": f"Cluster:{granted}", "actions": ["Get"], "decision": "Allow"}]}
            ],
        }
    )
    users_file = tmp_path / "users.json"
    users_file.write_text(
        AuthTables(users=(reader,), acls=(acl,)).model_dump_json(by_alias=True, include={"users", "acls"})
    )
    namesrv = NameServer(
        NameServerSettings(
            listen="127.0.0.1:0", metrics_listen=None, auth_users_file=users_file, cluster="prod", **AUTH
        )
    )
    await namesrv.start()
    try:
        _as(monkeypatch, "reader", "reader-secret")
        async with Admin(namesrv.address) as admin:
            if allowed:
                assert await admin.brokers() == []
            else:
                with pytest.raises(Exception, match="reader may not Get on Cluster:prod"):
                    await admin.brokers()
    finally:
        await namesrv.close()
