"""OrbitMQUser reconciled onto real brokers with auth on (name server + brokers in this
process), signed by a super user as the operator signs: the user is created on every master
and can then send to its topic and not to another, an unchanged reapply writes nothing (no
audited change per resync), a changed secret and a changed policy are applied, a broker group
added later gets the user, and deleting it revokes the user at once."""

from __future__ import annotations

import logging
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "client"))
from clusterkit import Cluster, start_cluster

from orbitmq.auth.model import UserType
from orbitmq.client import Admin, Message, Producer
from orbitmq.common.credentials import Credentials
from orbitmq.common.errors import OrbitError
from orbitmq.common.rpc import failure_of
from orbitmq.v1.broker_pb2 import ErrorReason
from orbitmq_operator.reconcile.access import Access
from orbitmq_operator.reconcile.users import DesiredUser, apply_user, delete_user
from orbitmq_operator.user_spec import UserSpec

pytestmark = pytest.mark.timeout(120)
CLUSTER = "demo"
ROOT = Credentials("orbitmq-operator-test", "root-secret")
AUTH = {"auth_enabled": True, "auth_super_user": ROOT.access_key, "auth_super_secret": ROOT.secret_key}
OPERATOR = Access(credentials=ROOT)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path, brokers=(), cluster=CLUSTER)
    await running.start_broker("demo-broker-0", cluster=CLUSTER, **AUTH)
    async with Admin(running.address, credentials=ROOT) as admin:
        for topic in ("orders", "payments"):
            await admin.create_topic(topic, cluster=CLUSTER)
    yield running
    await running.close()


def user(secret: str, *policies: dict[str, object]) -> DesiredUser:
    spec = UserSpec.model_validate({"cluster": CLUSTER, "authorization": {"policies": list(policies)}})
    return DesiredUser("app", secret, spec.user_type, spec.acl("app"))


PUB_ORDERS = {"resource": "Topic:orders", "actions": ["Pub"]}


async def send(cluster: Cluster, topic: str, secret: str) -> ErrorReason.ValueType | None:
    """None when the send is acknowledged, else the broker's refusal reason."""
    producer = Producer(
        "app-producer", cluster.address, credentials=Credentials("app", secret), send_timeout_ms=3000
    )
    await producer.start()
    try:
        await producer.send(Message(topic=topic, body=b"x"))
    except (grpc.aio.AioRpcError, OrbitError) as error:
        failure = failure_of(error) if isinstance(error, grpc.aio.AioRpcError) else error
        return getattr(failure, "reason", ErrorReason.UNAUTHENTICATED)
    finally:
        await producer.close()
    return None


async def test_user_applied_reapplied_changed_and_revoked(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    first = await apply_user(OPERATOR, cluster.address, CLUSTER, user("s1", PUB_ORDERS), "")
    assert first.broker_names == ["demo-broker-0"]
    assert first.changed == ["created on demo-broker-0", "ACL updated"]
    assert await send(cluster, "orders", "s1") is None
    assert await send(cluster, "payments", "s1") == ErrorReason.NO_PERMISSION

    with caplog.at_level(logging.INFO, logger="orbitmq.audit"):
        caplog.clear()
        again = await apply_user(
            OPERATOR, cluster.address, CLUSTER, user("s1", PUB_ORDERS), user("s1").digest
        )
    assert again.changed == [], "an unchanged user is read, not written"
    assert not [r for r in caplog.records if r.name == "orbitmq.audit"], "nothing audited on a resync"

    changed = await apply_user(
        OPERATOR,
        cluster.address,
        CLUSTER,
        user("s2", {"resource": "Topic:payments", "actions": ["Pub"]}),
        user("s1").digest,
    )
    assert changed.changed == ["credentials updated", "ACL updated"]
    assert await send(cluster, "orders", "s1") is not None, "the old secret no longer signs"
    assert await send(cluster, "payments", "s2") is None
    assert await send(cluster, "orders", "s2") == ErrorReason.NO_PERMISSION, "the dropped entry is gone"

    await cluster.start_broker("demo-broker-1", cluster=CLUSTER, **AUTH)  # a group added later
    grown = await apply_user(
        OPERATOR,
        cluster.address,
        CLUSTER,
        user("s2", {"resource": "Topic:payments", "actions": ["Pub"]}),
        user("s2").digest,
    )
    assert grown.broker_names == ["demo-broker-0", "demo-broker-1"]
    assert grown.changed == ["created on demo-broker-1", "ACL updated"]
    async with Admin(cluster.address, credentials=ROOT) as admin:
        acls = await admin.acl("User:app", cluster=CLUSTER)
    assert len(acls) == 2 and all(
        a[0]["policies"][0]["entries"][0]["resource"] == "Topic:payments" for a in acls.values()
    )

    deleted = await delete_user(OPERATOR, cluster.address, CLUSTER, "app")
    assert len(deleted) == 2
    assert await send(cluster, "payments", "s2") is not None, "revoked at once"
    assert await delete_user(OPERATOR, cluster.address, CLUSTER, "app") == [], "deleting twice is fine"


async def test_super_user_type_and_no_policies(cluster: Cluster) -> None:
    spec = UserSpec.model_validate({"cluster": CLUSTER, "userType": "Super"})
    admin_user = DesiredUser("boss", "boss-secret", spec.user_type, spec.acl("boss"))
    assert spec.user_type is UserType.SUPER and admin_user.acl is None
    await apply_user(OPERATOR, cluster.address, CLUSTER, admin_user, "")
    async with Admin(cluster.address, credentials=Credentials("boss", "boss-secret")) as admin:
        assert (await admin.user("boss", cluster=CLUSTER)).popitem()[1][0]["userType"] == "Super"
