"""The ``orbitmq`` format against a cluster with TLS and auth on: a write and a read with the
``tls.*`` and ``accessKey``/``secretKey`` options as a normal user granted just the topic, and
a read of a topic it has no grant for (or without the CA) refused naming the options."""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "security"))
sys.path.insert(0, str(Path(__file__).parent.parent / "broker"))
from brokerkit import TEST_SETTINGS
from tlskit import Pki

from orbitmq.auth.model import Acl, User
from orbitmq.auth.tables import AuthTables
from orbitmq.broker.server import Broker
from orbitmq.broker.settings import BrokerSettings
from orbitmq.client.admin import Admin
from orbitmq.common.credentials import Credentials
from orbitmq.common.tls import ClientTls
from orbitmq.nameserver.server import NameServer
from orbitmq.nameserver.settings import NameServerSettings

pytestmark = pytest.mark.timeout(240)

T = TypeVar("T")
SUPER, SUPER_SECRET = "root", "root-secret"
APP, APP_SECRET = "spark-app", "spark-app-secret"
AUTH = {"auth_enabled": True, "auth_super_user": SUPER, "auth_super_secret": SUPER_SECRET}
GRANTED, OTHER = "SparkSecure", "SparkSecureOther"
APP_ACL = {
    "subject": f"User:{APP}",
    "policies": [
        {
            "policyType": "Custom",
            "entries": [
                {"resource": f"Topic:{GRANTED}", "actions": ["Pub", "Sub"], "decision": "Allow"},
                {"resource": "Group:spark-orbitmq-*", "actions": ["Sub"], "decision": "Allow"},
            ],
        }
    ],
}


class SecureCluster:
    """A TLS name server and broker with auth on, on an event loop of their own (Spark blocks
    the test's thread); the broker stores the application user and its ACL, made by the super
    user over TLS, and the name server reads them from its users file."""

    def __init__(self, root: Path) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="secure-cluster", daemon=True)
        self._thread.start()
        self.pki = Pki(root / "pki")
        self._root = root
        self.namesrv: NameServer | None = None
        self.broker: Broker | None = None
        self.run(self._start())

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout)

    @property
    def address(self) -> str:
        assert self.namesrv is not None
        return self.namesrv.address

    async def _start(self) -> None:
        server = self.pki.issue("server")
        tls = {"tls_cert": server.cert, "tls_key": server.key, "tls_ca": self.pki.ca}
        tables = AuthTables(
            version=1, users=(User(username=APP, password=APP_SECRET),), acls=(Acl.model_validate(APP_ACL),)
        )
        users_file = self._root / "users.json"
        users_file.write_text(tables.model_dump_json(by_alias=True, include={"users", "acls"}))
        self.namesrv = NameServer(
            NameServerSettings(
                listen="127.0.0.1:0", metrics_listen=None, auth_users_file=users_file, **tls, **AUTH
            )
        )
        await self.namesrv.start()
        self.broker = Broker(
            BrokerSettings(
                data_dir=self._root / "broker-a",
                namesrv=self.namesrv.address,
                **{**TEST_SETTINGS, "metrics_listen": None},
                **tls,
                **AUTH,
            )
        )
        await self.broker.start()
        admin_tls = ClientTls(tls_ca=self.pki.ca)
        async with Admin(self.address, tls=admin_tls, credentials=Credentials(SUPER, SUPER_SECRET)) as admin:
            for topic in (GRANTED, OTHER):
                await admin.create_topic(topic, read_queue_nums=2, write_queue_nums=2)
            await admin.create_user(APP, APP_SECRET)
            await admin.create_acl(APP_ACL)

    async def _close(self) -> None:
        if self.broker is not None:
            await self.broker.close()
        if self.namesrv is not None:
            await self.namesrv.close()

    def close(self) -> None:
        try:
            self.run(self._close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    running = SecureCluster(Path(tmp_path_factory.mktemp("spark-secure")))
    yield running
    running.close()


def _access(cluster: SecureCluster, **overrides: str) -> dict[str, str]:
    options = {"tls.ca": str(cluster.pki.ca), "accessKey": APP, "secretKey": APP_SECRET, **overrides}
    return {name: value for name, value in options.items() if value}


def _read(spark: Any, cluster: SecureCluster, topic: str, options: dict[str, str]) -> list[Any]:
    reader = spark.read.format("orbitmq").option("namesrv", cluster.address).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load().collect()


def _failure(run: Any) -> str:
    with pytest.raises(Exception) as caught:  # Spark wraps the Python worker's error in its own
        run()
    return str(caught.value)


def test_write_and_read_over_tls_as_a_granted_user(
    spark: Any, secure: SecureCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("ORBITMQ_TLS_CA", "ORBITMQ_ACCESS_KEY", "ORBITMQ_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)  # the options alone must carry it
    frame = spark.createDataFrame([(f"secure-{i}".encode(),) for i in range(12)], "body binary")
    writer = frame.write.format("orbitmq").option("namesrv", secure.address).option("topic", GRANTED)
    for name, value in _access(secure).items():
        writer = writer.option(name, value)
    writer.mode("append").save()
    rows = _read(spark, secure, GRANTED, _access(secure))
    assert sorted(row.body for row in rows) == sorted(f"secure-{i}".encode() for i in range(12))


def test_a_topic_without_a_grant_is_refused_naming_the_user(spark: Any, secure: SecureCluster) -> None:
    message = _failure(lambda: _read(spark, secure, OTHER, _access(secure)))
    assert "accessKey" in message and APP in message and OTHER in message


def test_without_the_ca_the_read_names_the_tls_options(spark: Any, secure: SecureCluster) -> None:
    other = Pki(secure.pki.root.parent / "other", "other")
    message = _failure(lambda: _read(spark, secure, GRANTED, _access(secure, **{"tls.ca": str(other.ca)})))
    assert "'tls.ca'" in message and "not signed by a CA" in message


def test_bad_access_options_are_refused_before_any_task(spark: Any, secure: SecureCluster) -> None:
    half = _access(secure, secretKey="")
    assert "accessKey is set without secretKey" in _failure(lambda: _read(spark, secure, GRANTED, half))
    missing = _access(secure, **{"tls.ca": str(secure.pki.root / "absent.pem")})
    assert "cannot read the file" in _failure(lambda: _read(spark, secure, GRANTED, missing))
