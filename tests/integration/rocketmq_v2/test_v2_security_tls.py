"""The whole secure path of a RocketMQ 5 client: TLS and the client's session signature to the
proxy, then TLS and the proxy's own credentials to the name server and the broker (both with
TLS and auth on, knowing only their super user). A signed send is stored; the same send
unsigned is refused UNAUTHORIZED before anything reaches the cluster."""

from __future__ import annotations

import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "security"))
from brokerkit import TEST_SETTINGS
from tlskit import Pki

from orbitmq.auth.model import Acl, User
from orbitmq.auth.signature import mqv2_date_time, sign_mqv2
from orbitmq.auth.tables import AuthTables
from orbitmq.broker.server import Broker
from orbitmq.broker.settings import BrokerSettings
from orbitmq.client.pull_consumer import PullConsumer
from orbitmq.common.credentials import Credentials
from orbitmq.common.server import GRPC_OPTIONS
from orbitmq.common.tls import ClientTls, open_channel
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.proxy.server import Proxy
from orbitmq.proxy.settings import ProxySettings
from orbitmq.rocketmq_v2 import definition_pb2 as v2
from orbitmq.rocketmq_v2 import service_pb2 as pb
from orbitmq.rocketmq_v2 import service_pb2_grpc

pytestmark = pytest.mark.timeout(120)

SUPER, SUPER_SECRET = "root", "root-secret"
AUTH = {"auth_enabled": True, "auth_super_user": SUPER, "auth_super_secret": SUPER_SECRET}
APP, APP_SECRET = "edge-app", "edge-secret"
TOPIC = "EdgeSecure"
CLIENT = [("x-mq-client-id", "secure-client@1")]


@dataclass
class Secured:
    pki: Pki
    namesrv: NameServer
    broker: Broker
    proxy: Proxy


@pytest.fixture
async def secured(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Secured]:
    pki = Pki(tmp_path / "pki")
    server = pki.issue("server")
    tls = {"tls_cert": server.cert, "tls_key": server.key, "tls_ca": pki.ca}
    for name in ("ORBITMQ_ACCESS_KEY", "ORBITMQ_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)  # the proxy signs as its own user, set below
    monkeypatch.setenv("ORBITMQ_TLS_CA", str(pki.ca))  # the proxy's channels to the cluster
    acl = Acl.model_validate(
        {
            "subject": f"User:{APP}",
            "policies": [
                {"entries": [{"resource": f"Topic:{TOPIC}", "actions": ["Pub"], "decision": "Allow"}]}
            ],
        }
    )
    users = tmp_path / "proxy-users.json"
    users.write_text(
        AuthTables(users=(User(username=APP, password=APP_SECRET),), acls=(acl,)).model_dump_json(
            by_alias=True, include={"users", "acls"}
        )
    )
    namesrv = NameServer(NameServerSettings(listen="127.0.0.1:0", metrics_listen=None, **tls, **AUTH))
    await namesrv.start()
    broker = Broker(
        BrokerSettings(
            data_dir=tmp_path / "broker-a", namesrv=namesrv.address, **{**TEST_SETTINGS, **tls, **AUTH}
        )
    )
    await broker.start()
    edge = pki.issue("proxy")
    proxy = Proxy(
        ProxySettings(
            listen="127.0.0.1:0",
            metrics_listen=None,
            namesrv=namesrv.address,
            grace_ms=200,
            tls_cert=edge.cert,
            tls_key=edge.key,
            auth_enabled=True,
            auth_super_user="proxy-admin",  # its own bootstrap user: not what the cluster knows
            auth_super_secret="proxy-admin-secret",
            auth_users_file=users,
            access_key=SUPER,  # what the cluster knows: the proxy's calls sign as this
            secret_key=SUPER_SECRET,
        )
    )
    await proxy.start()
    try:
        yield Secured(pki, namesrv, broker, proxy)
    finally:
        await proxy.close()
        await broker.close()
        await namesrv.close()


async def _send(secured: Secured, metadata: list[tuple[str, str]]) -> v2.Status:
    message = v2.Message(topic=v2.Resource(name=TOPIC), body=b"over TLS, signed twice")
    message.system_properties.message_id = "01SECURE"
    message.system_properties.message_type = v2.NORMAL
    tls = ClientTls(tls_ca=secured.pki.ca)
    async with open_channel(secured.proxy.address, tls, GRPC_OPTIONS) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = pb.SendMessageRequest(messages=[message])
        reply = await stub.SendMessage(request, metadata=[*CLIENT, *metadata], timeout=10)
    return reply.status


async def test_a_signed_send_over_tls_reaches_a_tls_broker_as_the_proxys_user(secured: Secured) -> None:
    unsigned = await _send(secured, [])
    assert unsigned.code == v2.UNAUTHORIZED, unsigned

    signature = sign_mqv2(APP, APP_SECRET, mqv2_date_time(int(time.time() * 1000)))
    status = await _send(secured, signature)
    assert status.code == v2.OK, status

    root = Credentials(SUPER, SUPER_SECRET)
    async with PullConsumer("edge-reader", secured.namesrv.address, credentials=root) as consumer:
        bodies = [m.body for q in await consumer.queues(TOPIC) for m in (await consumer.pull(q, 0)).messages]
    assert bodies == [b"over TLS, signed twice"]
