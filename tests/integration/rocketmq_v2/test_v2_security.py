"""``orbitmq proxy`` with auth on, in front of a broker with auth on, and the official Python client
with session credentials: the right secret produces and consumes; a wrong secret, no credentials
or a stale signature is refused with the protocol's UNAUTHORIZED; a user without ``Sub`` on a
topic is refused FORBIDDEN; every refusal is one audit line (with the client's request id) and
one count on the proxy's /metrics. The proxy itself reaches the broker signing as its own user."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from v2kit import Credentials, V2Cluster, message, official_producer, official_simple_consumer, v2_cluster

from orbitmq.auth.model import Acl, User
from orbitmq.auth.signature import mqv2_date_time, sign_mqv2
from orbitmq.auth.tables import AuthTables
from orbitmq.client.admin import Admin
from orbitmq.common.credentials import Credentials as OrbitCredentials
from orbitmq.proxy.convert import TransactionRef
from orbitmq.proxy.settings import ProxySettings
from orbitmq.rocketmq_v2 import definition_pb2 as v2
from orbitmq.rocketmq_v2 import service_pb2 as pb
from orbitmq.rocketmq_v2 import service_pb2_grpc

pytestmark = pytest.mark.timeout(120)

SUPER, SUPER_SECRET = "root", "root-secret"
APP, APP_SECRET = "orders-app", "app-secret"
READER, READER_SECRET = "reader", "reader-secret"
AUTH = {"auth_enabled": True, "auth_super_user": SUPER, "auth_super_secret": SUPER_SECRET}
TOPIC, GROUP, READER_GROUP = "SecureOrders", "app-group", "reader-group"
OTHER_TOPIC = "OtherOrders"
SYNC_INTERVAL_MS = 200
REVOCATION_BOUND_S = 3.0
"""A deleted user is refused by the proxy within its sync interval plus the broker's report to
the name server (milliseconds); the bound leaves room for a loaded machine."""


def _acl(user: str, *entries: tuple[str, list[str]]) -> Acl:
    return Acl.model_validate(
        {
            "subject": f"User:{user}",
            "policies": [
                {
                    "policyType": "Custom",
                    "entries": [
                        {"resource": resource, "actions": actions, "decision": "Allow"}
                        for resource, actions in entries
                    ],
                }
            ],
        }
    )


@pytest.fixture
async def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[V2Cluster]:
    for name in ("ORBITMQ_ACCESS_KEY", "ORBITMQ_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)  # the proxy signs as its super user, not as these
    tables = AuthTables(
        version=1,
        users=(User(username=APP, password=APP_SECRET), User(username=READER, password=READER_SECRET)),
        acls=(
            _acl(APP, (f"Topic:{TOPIC}", ["Pub", "Sub"]), (f"Group:{GROUP}", ["Sub"])),
            # routes of the topic (Get), its own group, but no Sub on the topic
            _acl(READER, (f"Topic:{TOPIC}", ["Get"]), (f"Group:{READER_GROUP}", ["Sub"])),
        ),
    )
    users_file = tmp_path / "proxy-users.json"
    users_file.write_text(tables.model_dump_json(by_alias=True, include={"users", "acls"}))
    # The broker knows only the super user: the proxy signs its own calls as it, and fetches the
    # users stored on the brokers (none yet) from the name server.
    proxy = {**AUTH, "auth_users_file": users_file, "auth_sync_interval_ms": SYNC_INTERVAL_MS}
    async with v2_cluster(tmp_path, proxy, AUTH, **AUTH) as running:
        yield running


class ClientLog(logging.Handler):
    """What the official client logs (its own logger, which does not propagate): how it
    reports a refused route query before raising a generic "failed to fetch route"."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def client_log() -> Iterator[ClientLog]:
    handler = ClientLog()
    logger = logging.getLogger("rocketmq-python-client")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


async def test_right_secret_produces_and_consumes(cluster: V2Cluster) -> None:
    app = Credentials(APP, APP_SECRET)
    async with official_producer(cluster.endpoint, [TOPIC], credentials=app) as producer:
        receipt = await asyncio.to_thread(producer.send, message(TOPIC, b"signed"))
    assert receipt.message_id
    async with official_simple_consumer(cluster.endpoint, GROUP, [TOPIC], credentials=app) as consumer:
        got: list[Any] = []
        for _ in range(10):
            got = await asyncio.to_thread(consumer.receive, 16, 15)
            if got:
                break
        assert [m.body for m in got] == [b"signed"]
        await asyncio.to_thread(consumer.ack, got[0])
    assert await cluster.metric("orbitmq_proxy_requests_total", rpc="AckMessage", code="OK") == 1
    assert await cluster.metric("orbitmq_proxy_requests_total", rpc="SendMessage", code="UNAUTHORIZED") == 0


@pytest.mark.parametrize(
    ("credentials", "cause"),
    [
        (Credentials(APP, "not-the-secret"), "signature of 'orders-app' does not match"),
        (Credentials("nobody", "whatever"), "unknown access key 'nobody'"),
        (None, "an anonymous client"),
    ],
    ids=["wrong-secret", "unknown-user", "no-credentials"],
)
async def test_bad_credentials_are_unauthorized_in_the_client(
    cluster: V2Cluster, client_log: ClientLog, credentials: Credentials | None, cause: str
) -> None:
    async with official_producer(cluster.endpoint, [TOPIC], credentials=credentials) as producer:
        with pytest.raises(Exception, match=f"failed to fetch topic:{TOPIC} route"):
            await asyncio.to_thread(producer.send, message(TOPIC, b"never"))
    refusals = [line for line in client_log.lines if "40100" in line]
    assert refusals, client_log.lines
    assert "authentication failed" in refusals[0] and cause in refusals[0], refusals[0]
    assert await cluster.metric("orbitmq_proxy_requests_total", rpc="QueryRoute", code="UNAUTHORIZED") >= 1
    assert await cluster.metric("orbitmq_proxy_requests_total", rpc="QueryRoute", code="OK") == 0


async def test_user_without_sub_on_the_topic_is_forbidden(
    cluster: V2Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    from rocketmq.v5.exception import ForbiddenException

    reader = Credentials(READER, READER_SECRET)
    async with official_simple_consumer(
        cluster.endpoint, READER_GROUP, [TOPIC], credentials=reader
    ) as consumer:
        with pytest.raises(ForbiddenException) as raised:
            await asyncio.to_thread(consumer.receive, 16, 15)
    assert f"reader may not Sub on Topic:{TOPIC} (ReceiveMessage)" in str(raised.value)
    assert await cluster.metric("orbitmq_proxy_requests_total", rpc="ReceiveMessage", code="FORBIDDEN") == 1
    assert (
        await cluster.metric(
            "orbitmq_auth_decisions_total", decision="denied", action="Sub", resource_type="Topic"
        )
        >= 1
    )
    denials = [json.loads(r.getMessage()) for r in caplog.records if r.name == "orbitmq.audit"]
    received = [d for d in denials if d["rpc"] == "ReceiveMessage"]
    assert received and received[0]["who"] == READER and received[0]["resource"] == f"Topic:{TOPIC}"
    assert received[0]["request_id"]  # the official client's x-mq-request-id
    assert "reader-secret" not in caplog.text


async def _route(cluster: V2Cluster, metadata: list[tuple[str, str]]) -> v2.Status:
    async with grpc.aio.insecure_channel(cluster.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = pb.QueryRouteRequest(topic=v2.Resource(name=TOPIC))
        reply = await stub.QueryRoute(request, metadata=[("x-mq-client-id", "raw@1"), *metadata], timeout=10)
    return reply.status


async def test_a_replayed_signature_is_refused_and_audited_with_its_request_id(
    cluster: V2Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    now_ms = int(time.time() * 1000)
    fresh = sign_mqv2(APP, APP_SECRET, mqv2_date_time(now_ms))
    assert (await _route(cluster, fresh)).code == v2.OK

    two_days_ago = sign_mqv2(APP, APP_SECRET, mqv2_date_time(now_ms - 2 * 86_400_000))
    status = await _route(cluster, [*two_days_ago, ("x-mq-request-id", "replay-1")])
    assert status.code == v2.UNAUTHORIZED
    assert "from the server's clock" in status.message, status.message
    assert status.message.endswith("(request id replay-1)")  # what finds its audit line
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == "orbitmq.audit"]
    assert [(x["kind"], x["who"], x["reason"]) for x in lines if x["request_id"] == "replay-1"] == [
        ("authentication_failed", APP, "stale")
    ]
    assert "app-secret" not in caplog.text


async def test_a_user_stored_on_the_brokers_reaches_the_proxy_and_its_deletion_revokes_it(
    cluster: V2Cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    stored, secret = "stored-app", "stored-secret"
    async with Admin(cluster.namesrv.address, credentials=OrbitCredentials(SUPER, SUPER_SECRET)) as admin:
        await admin.create_user(stored, secret)
        await admin.create_acl(_acl(stored, (f"Topic:{TOPIC}", ["Pub"])))

    async def route_code() -> int:
        signature = sign_mqv2(stored, secret, mqv2_date_time(int(time.time() * 1000)))
        return (await _route(cluster, signature)).code

    await _within(lambda: route_code(), v2.OK, REVOCATION_BOUND_S)
    async with official_producer(
        cluster.endpoint, [TOPIC], credentials=Credentials(stored, secret)
    ) as producer:
        assert (await asyncio.to_thread(producer.send, message(TOPIC, b"stored user"))).message_id

    async with Admin(cluster.namesrv.address, credentials=OrbitCredentials(SUPER, SUPER_SECRET)) as admin:
        deleted = time.monotonic()
        await admin.delete_user(stored)
    after_s = await _within(lambda: route_code(), v2.UNAUTHORIZED, REVOCATION_BOUND_S)
    with capsys.disabled():
        print(f"\nproxy revocation: refused {after_s * 1000:.0f} ms after the delete answered")
    assert time.monotonic() - deleted < REVOCATION_BOUND_S + 1


async def _within(code: Callable[[], Awaitable[int]], expected: int, bound_s: float) -> float:
    """Seconds until ``code()`` answers ``expected``; fails past ``bound_s``."""
    started = time.monotonic()
    while (got := await code()) != expected:
        assert time.monotonic() - started < bound_s, f"still {v2.Code.Name(got)} after {bound_s} s"
        await asyncio.sleep(0.02)
    return time.monotonic() - started


def test_a_half_given_cluster_credential_is_refused_naming_both() -> None:
    with pytest.raises(ValueError, match="access_key is set without secret_key"):
        ProxySettings(access_key="proxy-user")


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--auth-enabled"], "set both auth_super_user and auth_super_secret"),
        (["--auth-enabled", "--auth-super-user", "root", "--auth-users-file", "{bad}"], "users.0.password"),
    ],
    ids=["no-super-user", "user-without-secret"],
)
def test_the_proxy_command_refuses_bad_auth_settings_naming_them(
    tmp_path: Path, args: list[str], named: str
) -> None:
    bad = tmp_path / "users.yaml"
    bad.write_text("users: [{username: no-secret}]\n")
    command = [
        sys.executable,
        "-m",
        "orbitmq.cli.main",
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "",
    ]
    env = {**os.environ, "ORBITMQ_PROXY_AUTH_SUPER_SECRET": "s"}
    done = subprocess.run(
        [*command, *(a.format(bad=bad) for a in args)], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 2, done.stderr
    assert named in done.stderr and "Traceback" not in done.stderr, done.stderr


async def _call(cluster: V2Cluster, rpc: str, request: Any, metadata: list[tuple[str, str]]) -> Any:
    async with grpc.aio.insecure_channel(cluster.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        return await getattr(stub, rpc)(
            request, metadata=[("x-mq-client-id", "raw@1"), *metadata], timeout=10
        )


def _signed(access_key: str, secret: str) -> list[tuple[str, str]]:
    return sign_mqv2(access_key, secret, mqv2_date_time(int(time.time() * 1000)))


async def _half(cluster: V2Cluster, topic: str, access_key: str, secret: str) -> str:
    """A transactional message sent to ``topic`` (kept half until ended); its transaction id."""
    half = v2.Message(topic=v2.Resource(name=topic), body=f"half of {topic}".encode())
    half.system_properties.message_id = f"01HALF{topic}"
    half.system_properties.message_type = v2.TRANSACTION
    reply = await _call(
        cluster, "SendMessage", pb.SendMessageRequest(messages=[half]), _signed(access_key, secret)
    )
    assert reply.status.code == v2.OK, reply.status
    return str(reply.entries[0].transaction_id)


async def _commit(
    cluster: V2Cluster, topic: str, transaction_id: str, access_key: str, secret: str
) -> v2.Status:
    request = pb.EndTransactionRequest(
        topic=v2.Resource(name=topic),
        message_id=f"01HALF{topic}",
        transaction_id=transaction_id,
        resolution=v2.COMMIT,
    )
    return (await _call(cluster, "EndTransaction", request, _signed(access_key, secret))).status


async def test_ending_a_transaction_needs_pub_on_the_topic_of_its_half_message(
    cluster: V2Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transaction id is the client's to write: naming its own topic in the request and
    another topic's half message in the id must not commit that other topic's message."""
    theirs = await _half(cluster, OTHER_TOPIC, SUPER, SUPER_SECRET)
    refused = await _commit(cluster, TOPIC, theirs, APP, APP_SECRET)
    assert refused.code == v2.FORBIDDEN, refused
    assert f"orders-app may not Pub on Topic:{OTHER_TOPIC} (EndTransaction)" in refused.message

    ours = await _half(cluster, TOPIC, APP, APP_SECRET)
    assert (await _commit(cluster, TOPIC, ours, APP, APP_SECRET)).code == v2.OK
    ref = TransactionRef.decode(ours)
    nowhere = dataclasses.replace(ref, commit_log_offset=ref.commit_log_offset + 1_000_000).encode()
    assert (await _commit(cluster, TOPIC, nowhere, APP, APP_SECRET)).code == v2.INVALID_TRANSACTION_ID

    monkeypatch.setenv("ORBITMQ_ACCESS_KEY", SUPER)  # the check's own reads, from the brokers
    monkeypatch.setenv("ORBITMQ_SECRET_KEY", SUPER_SECRET)
    assert [m.body for m in await cluster.receive(TOPIC, 1)] == [f"half of {TOPIC}".encode()]
    assert await cluster.receive(OTHER_TOPIC, 1, within_s=1.0) == []
