"""Users and ACLs stored on the brokers: made with ``orbitmq admin user|acl`` and the Admin API on
real brokers, kept through a SIGKILL, copied to a slave and kept by it through a promotion, and
bad documents refused naming the field and the rule (the CLI exiting 2)."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from brokerkit import broker_process
from clusterkit import Cluster, eventually, start_cluster

from orbitmq.broker.auth_store import AUTH_FILE, same_content
from orbitmq.client.admin import Admin
from orbitmq.client.admin_auth import InvalidAuthDocument
from orbitmq.common.rpc import RpcFailure, failure_of
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.v1 import broker_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(120)

HA = {"replica_config_interval_ms": 100}
SUPER, SUPER_SECRET = "root", "root-secret"
AUTH = {"auth_enabled": True, "auth_super_user": SUPER, "auth_super_secret": SUPER_SECRET}


def entry(resource: str, actions: list[str], decision: str = "Allow", ips: list[str] | None = None) -> dict:
    return {"resource": resource, "actions": actions, "sourceIps": ips or [], "decision": decision}


def acl_doc(subject: str, *entries: dict, policy_type: str = "Custom") -> dict[str, Any]:
    return {"subject": subject, "policies": [{"policyType": policy_type, "entries": list(entries)}]}


async def cli(namesrv: str, home: Path, *args: str) -> tuple[int, str, str]:
    """``orbitmq ARGS`` as a user runs it: (exit status, stdout, stderr)."""

    def run() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "orbitmq.cli.main", *args],
            env={**os.environ, "ORBITMQ_NAMESRV": namesrv, "HOME": str(home)},
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )

    done = await asyncio.to_thread(run)
    return done.returncode, done.stdout, done.stderr


async def cli_json(namesrv: str, home: Path, *args: str) -> Any:
    status, out, err = await cli(namesrv, home, *args, "--json")
    assert status == 0, err
    return json.loads(out)


@pytest.fixture
async def namesrv() -> AsyncIterator[NameServer]:
    server = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None))
    await server.start()
    yield server
    await server.close()


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, brokers=("broker-a", "broker-b"))
    yield running
    await running.close()


def _without_brokers(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "brokers"} for row in rows]


async def test_cli_users_and_acls_survive_a_sigkill(namesrv: NameServer, tmp_path: Path) -> None:
    data, ns = tmp_path / "data", namesrv.address
    settings = {"namesrv": ns, "config_persist_interval_ms": 600_000}
    async with broker_process(data, "broker-a", settings=settings) as (_, _, process):
        created = await cli_json(ns, tmp_path, "admin", "user", "create", "-u", "app", "-p", "s3cret")
        assert created["username"] == "app" and "password" not in created
        await cli_json(
            ns, tmp_path, "admin", "user", "create", "-u", "ops", "-p", "x", "--user-type", "Super"
        )
        await cli_json(ns, tmp_path, "admin", "user", "create", "-u", "tmp", "-p", "t")
        await cli_json(ns, tmp_path, "admin", "user", "delete", "-u", "tmp")
        await cli_json(ns, tmp_path, "admin", "user", "update", "-u", "ops", "--user-status", "disable")
        await cli_json(
            ns, tmp_path, "admin", "acl", "create", "--subject", "User:app",
            "--resources", "Topic:orders,Topic:order-*", "--actions", "Pub,Sub",
            "--source-ips", "10.0.0.0/8", "--decision", "Allow",
        )  # fmt: skip
        updated = await cli_json(
            ns,
            tmp_path,
            "admin",
            "acl",
            "update",
            "-s",
            "User:app",
            "-r",
            "Topic:orders",
            "-a",
            "Sub",
            "-d",
            "Deny",
        )
        process.send_signal(signal.SIGKILL)
    expected_acl = acl_doc(
        "User:app",
        entry("Topic:orders", ["Sub"], "Deny"),
        entry("Topic:order-*", ["Pub", "Sub"], ips=["10.0.0.0/8"]),
    )
    assert _without_brokers(updated) == [expected_acl]
    assert (data / AUTH_FILE).stat().st_mode & 0o777 == 0o600  # it holds secrets
    async with broker_process(data, "broker-a", settings=settings) as (stub, _, _):
        users = await cli_json(ns, tmp_path, "admin", "user", "list")
        assert _without_brokers(users) == [
            {"username": "app", "userType": "Normal", "userStatus": "enable"},
            {"username": "ops", "userType": "Super", "userStatus": "disable"},
        ]  # no password in any answer
        assert _without_brokers(await cli_json(ns, tmp_path, "admin", "acl", "get", "-s", "User:app")) == [
            expected_acl
        ]
        status, out, _ = await cli(ns, tmp_path, "admin", "acl", "list", "--resource", "order-")
        assert status == 0 and "User:app" in out and "Topic:order-*" in out and "10.0.0.0/8" in out
        status, _, err = await cli(ns, tmp_path, "admin", "user", "get", "-u", "tmp")
        assert status == 1 and "user 'tmp' does not exist" in err
        assert (await stub.GetUser(broker_pb2.GetUserRequest(username="app"))).version == 7


async def test_admin_api_changes_every_master(cluster: Cluster) -> None:
    brokers = sorted(r.broker.address for r in cluster.brokers.values())
    async with Admin(cluster.address) as admin:
        assert sorted(await admin.create_user("app", "pw")) == brokers
        await admin.create_user("auditor", "pw2", user_type="Normal")
        acls = await admin.create_acl(
            acl_doc("User:app", entry("Topic:a", ["Pub"]), entry("Group:g-*", ["Sub"]))
        )
        assert sorted(acls) == brokers
        await admin.update_acl(acl_doc("User:app", entry("Topic:a", ["Pub", "Sub"], ips=["192.168.0.0/16"])))
        await admin.create_acl(acl_doc("User:app", entry("*", ["Get"]), policy_type="Default"))
        await admin.create_acl(acl_doc("User:auditor", entry("Cluster:DefaultCluster", ["Get", "List"])))
        stored = await admin.acl("User:app")
        assert sorted(stored) == brokers
        for documents in stored.values():
            assert documents == [
                {
                    "subject": "User:app",
                    "policies": [
                        {
                            "policyType": "Custom",
                            "entries": [
                                entry("Topic:a", ["Pub", "Sub"], ips=["192.168.0.0/16"]),
                                entry("Group:g-*", ["Sub"]),
                            ],
                        },
                        {"policyType": "Default", "entries": [entry("*", ["Get"])]},
                    ],
                }
            ]
        assert sorted(await admin.delete_acl("User:app", ["Group:g-*", "*"])) == brokers
        assert [a["subject"] for a in (await admin.acls(resource="Cluster"))[brokers[0]]] == ["User:auditor"]
        await admin.update_user("app", user_status="disable")
        users = await admin.users()
        assert users[brokers[1]] == [
            {"username": "app", "userType": "Normal", "userStatus": "disable"},
            {"username": "auditor", "userType": "Normal", "userStatus": "enable"},
        ]
        assert sorted(await admin.delete_user("auditor")) == brokers  # and its ACL with it
        assert [a["subject"] for a in (await admin.acls())[brokers[0]]] == ["User:app"]
        with pytest.raises(RpcFailure, match="user 'auditor' does not exist") as gone:
            await admin.update_user("auditor", password="new")
        assert gone.value.reason == ErrorReason.USER_NOT_EXIST
        with pytest.raises(RpcFailure, match="no Custom/Default entry for Topic:b"):
            await admin.delete_acl("User:app", ["Topic:b"])
    for running in cluster.brokers.values():
        tables = running.broker.auth_store.tables
        assert [u.username for u in tables.users] == ["app"] and tables.users[0].password == "pw"


BAD_DOCUMENTS = [
    (
        acl_doc("User:app", entry("Topic:a", ["Pub", "Fly"])),
        "policies.0.entries.0.actions: unknown action 'Fly' (one of Pub, Sub, Create, Update",
    ),
    (
        acl_doc("User:app", entry("Topic:a*b", ["Pub"])),
        "policies.0.entries.0.resource: resource 'Topic:a*b': '*' may only end a name",
    ),
    (
        acl_doc("User:app", entry("Group:g", ["Pub"])),
        "action Pub does not apply to Group resources",
    ),
    (
        acl_doc("User:app", entry("Topic:a", ["Pub"]), entry("Topic:a", ["Sub"], "Deny")),
        "overlapping rules: policies[0].entries[1] and policies[0].entries[0] both name Topic:a",
    ),
    (
        acl_doc("User:app", entry("Topic:a", ["Pub"], ips=["10.0.0.1/8"])),
        "source IP '10.0.0.1/8' is not an address or CIDR block: 10.0.0.1/8 has host bits set",
    ),
]


async def test_bad_documents_are_refused_naming_field_and_rule(cluster: Cluster) -> None:
    async with Admin(cluster.address) as admin:
        with pytest.raises(InvalidAuthDocument, match="password: a user needs a non-empty secret"):
            await admin.create_user("app", "")
        with pytest.raises(InvalidAuthDocument, match="username 'a b' breaks the rule"):
            await admin.create_user("a b", "pw")
        await admin.create_user("app", "pw")
        with pytest.raises(grpc.aio.AioRpcError) as exists:
            await admin.create_user("app", "other")
        assert "user 'app' exists" in (exists.value.details() or "")
        for document, rule in BAD_DOCUMENTS:
            with pytest.raises(InvalidAuthDocument) as refused:
                await admin.create_acl(document)
            assert rule in str(refused.value), (rule, str(refused.value))
        await admin.create_acl(acl_doc("User:app", entry("Topic:a", ["Pub"])))
        for document, rule in [
            (
                acl_doc("User:app", entry("Topic:a", ["Sub"], "Deny")),
                "overlapping rules: User:app's stored Custom policy already has an entry for Topic:a",
            ),
            (acl_doc("User:nobody", entry("Topic:a", ["Pub"])), "subject: User:nobody is not a user"),
        ]:
            with pytest.raises(grpc.aio.AioRpcError) as refused_by_broker:
                await admin.create_acl(document)
            failure = failure_of(refused_by_broker.value)
            assert failure is not None and failure.reason == ErrorReason.INVALID_ARGUMENT
            assert rule in (refused_by_broker.value.details() or "")
    for running in cluster.brokers.values():  # nothing refused left a trace
        assert running.broker.auth_store.version == 2


async def test_cli_bad_input_exits_2_naming_the_value_and_rule(cluster: Cluster) -> None:
    ns, home = cluster.address, cluster.root
    policy = home / "policy.yaml"
    policy.write_text(
        "subject: User:app\npolicies:\n- entries:\n"
        "  - {resource: 'Topic:a', actions: [Pub], decision: Allow}\n"
        "  - {resource: 'Topic:a', actions: [Sub], decision: Deny}\n"
    )
    acl = ["admin", "acl", "create", "-s", "User:app", "-d", "Allow"]
    cases = [
        (["admin", "user", "create", "-u", "app", "-p", ""], "password: a user needs a non-empty secret"),
        (
            ["admin", "user", "create", "-u", "app"],
            "a user needs a secret: give --password or ORBITMQ_USER_PASSWORD",
        ),
        ([*acl, "-r", "Topic:a", "-a", "Pub,Fly"], "'--actions' / '-a': unknown action 'Fly'"),
        ([*acl, "-r", "Topic:a,Topic:b*c", "-a", "Pub"], "resource 'Topic:b*c': '*' may only end a name"),
        ([*acl, "-r", "Queue:a", "-a", "Pub"], "resource 'Queue:a': unknown type 'Queue'"),
        (
            [*acl, "-r", "Topic:a", "-a", "Pub", "-i", "10.0.0.300"],
            "'10.0.0.300' is not an address or CIDR block",
        ),
        (["admin", "acl", "create", "-f", str(policy)], "overlapping rules: policies[0].entries[1]"),
    ]
    for args, rule in cases:
        status, _, err = await cli(ns, home, *args)
        assert status == 2 and rule in " ".join(err.split()), (args, status, err)
    assert (await cli(ns, home, "admin", "user", "create", "-u", "app", "-p", "pw"))[0] == 0
    assert (await cli(ns, home, *acl, "-r", "Topic:a", "-a", "Pub"))[0] == 0
    status, _, err = await cli(ns, home, *acl, "-r", "Topic:a", "-a", "Sub")  # refused by the brokers
    assert status == 2 and "already has an entry for Topic:a" in err and "INVALID_ARGUMENT" in err


async def test_a_slave_copies_users_and_acls_and_keeps_them_through_a_promotion(tmp_path: Path) -> None:
    cluster = await start_cluster(tmp_path, brokers=())
    try:
        await cluster.start_broker("a-master", broker_name="broker-a", **HA)
        slave = await cluster.start_broker(
            "a-slave", broker_name="broker-a", broker_role="SLAVE", broker_id=1, **HA
        )
        master = cluster.brokers["a-master"].broker
        async with Admin(cluster.address) as admin:
            await admin.create_user("app", "pw")
            await admin.create_user("gone", "pw")
            await admin.create_acl(acl_doc("User:app", entry("Topic:a", ["Pub"])))
            await admin.delete_user("gone")
        await eventually(
            lambda: same_content(slave.broker.auth_store.tables, master.auth_store.tables),
            20,
            lambda: f"slave at version {slave.broker.auth_store.version}",
        )
        copied = json.loads((slave.broker.store.root / AUTH_FILE).read_text())
        assert [u["username"] for u in copied["users"]] == ["app"]  # on the slave's disk
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await slave.stub.CreateUser(
                broker_pb2.CreateUserRequest(user='{"username": "x", "password": "y"}')
            )
        assert "is a slave" in (refused.value.details() or "")
        old_version = master.auth_store.version

        await cluster.stop_broker("a-master")
        await slave.stub.ChangeRole(broker_pb2.ChangeRoleRequest(role="ASYNC_MASTER", epoch=1, broker_id=0))
        async with Admin(cluster.address) as admin:

            async def routed_to_new_master() -> bool:
                return [b.address for b in await admin.masters()] == [slave.broker.address]

            await eventually(routed_to_new_master, 20, lambda: "the promoted slave registered as master")
            assert await admin.acl("User:app") == {
                slave.broker.address: [acl_doc("User:app", entry("Topic:a", ["Pub"]))]
            }
            await admin.update_acl(acl_doc("User:app", entry("Topic:a", ["Sub"])))
        new_tables = slave.broker.auth_store.tables
        await cluster.restart_broker("a-slave")  # the promoted broker reads them back from its disk
        promoted = cluster.brokers["a-slave"].broker
        assert promoted.auth_store.tables == new_tables

        # The old master returns as a slave: the new master's users and ACLs replace its own,
        # under a version newer than any it served.
        cluster.options["a-master"] = {
            "broker_role": "SLAVE",
            "broker_id": 1,
            "master_addr": promoted.address,
            "broker_name": "broker-a",
            **HA,
        }
        returning = (await cluster.start_broker("a-master")).broker
        assert returning.auth_store.version == old_version
        await eventually(
            lambda: same_content(returning.auth_store.tables, new_tables),
            20,
            lambda: f"the returning master at version {returning.auth_store.version}",
        )
        assert returning.auth_store.version > old_version
    finally:
        await cluster.close()


def _as(monkeypatch: pytest.MonkeyPatch, user: str, secret: str) -> None:
    monkeypatch.setenv("ORBITMQ_ACCESS_KEY", user)
    monkeypatch.setenv("ORBITMQ_SECRET_KEY", secret)


async def test_with_auth_on_a_cluster_grant_manages_users_but_not_super_users(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = await start_cluster(tmp_path, **AUTH)
    try:
        _as(monkeypatch, SUPER, SUPER_SECRET)  # the bootstrap super user
        async with Admin(cluster.address) as admin:
            await admin.create_user("ops", "ops-secret")
            await admin.create_acl(acl_doc("User:ops", entry("Cluster:DefaultCluster", ["Update", "Get"])))
            await admin.create_user("boss", "boss-secret", user_type="Super")
        _as(monkeypatch, "ops", "ops-secret")
        caplog.clear()  # the super user's changes so far
        with caplog.at_level(logging.INFO, logger="orbitmq.audit"):
            async with Admin(cluster.address) as admin:
                await admin.create_user("app", "app-secret")
                await admin.update_user("app", password="new-secret")
                for verb, attempt in [
                    ("create", lambda: admin.create_user("eve", "pw", user_type="Super")),
                    ("update", lambda: admin.update_user("app", user_type="Super")),
                    ("update", lambda: admin.update_user("boss", password="taken")),
                    ("delete", lambda: admin.delete_user("boss")),
                ]:
                    with pytest.raises(grpc.aio.AioRpcError) as refused:
                        await attempt()
                    failure = failure_of(refused.value)
                    assert failure is not None and failure.reason == ErrorReason.NO_PERMISSION
                    assert f"ops may not {verb} super user" in (refused.value.details() or "")
        events = [json.loads(r.getMessage()) for r in caplog.records if r.name == "orbitmq.audit"]
        # ops's own (servers of other tests in this process may log meanwhile)
        assert [(c["kind"], c["action"], c["rpc"]) for c in events if c["who"] == "ops"] == [
            ("allowed_admin_change", "Create", "/orbitmq.v1.Broker/CreateUser"),
            ("allowed_admin_change", "Update", "/orbitmq.v1.Broker/UpdateUser"),
            ("denied", "Create", "/orbitmq.v1.Broker/CreateUser"),
            ("denied", "Update", "/orbitmq.v1.Broker/UpdateUser"),
            ("denied", "Update", "/orbitmq.v1.Broker/UpdateUser"),
            ("denied", "Delete", "/orbitmq.v1.Broker/DeleteUser"),
        ]
        assert "new-secret" not in caplog.text
        _as(monkeypatch, "app", "new-secret")  # signs with its new secret, has no cluster grant
        async with Admin(cluster.address) as admin:
            with pytest.raises(grpc.aio.AioRpcError, match="app may not Get on Cluster:DefaultCluster"):
                await admin.users()
    finally:
        await cluster.close()
