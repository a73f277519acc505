"""Bad user and ACL documents sent straight to a broker's RPCs (not through the Admin client,
which checks them first): each refused INVALID_ARGUMENT naming the field and the rule, and none
leaves a trace in the stored tables."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from clusterkit import Cluster, start_cluster

from orbitmq.common.rpc import failure_of
from orbitmq.v1 import broker_pb2
from orbitmq.v1.broker_pb2 import ErrorReason

pytestmark = pytest.mark.timeout(60)


def entry(resource: str, actions: Any, decision: str = "Allow", **more: Any) -> dict[str, Any]:
    return {"resource": resource, "actions": actions, "decision": decision, **more}


def acl(*entries: dict[str, Any], more_policies: tuple[dict[str, Any], ...] = ()) -> str:
    return json.dumps({"subject": "User:app", "policies": [{"entries": list(entries)}, *more_policies]})


E0 = "policies.0.entries.0"

BAD_USERS = [
    ({"username": "app"}, "password: a user needs a non-empty secret"),
    ({"username": "app", "password": ""}, "password: a user needs a non-empty secret"),
    ({"username": "app", "password": None}, "password: a user needs a non-empty secret"),
    ({"username": "a b", "password": "pw"}, "username: username 'a b' breaks the rule"),
    (
        {"username": "app", "password": "pw", "userType": "Root"},
        "userType: Input should be 'Super' or 'Normal'",
    ),
    ({"username": "app", "password": "pw", "secret": "x"}, "secret: Extra inputs are not permitted"),
]

BAD_ACLS = [
    (
        acl(entry("Topic:a", ["Pub"]), entry("Topic:a", ["Pub"], "Deny")),
        "overlapping rules: policies[0].entries[1] and policies[0].entries[0] both name Topic:a in Custom "
        "policies, one Allow, one Deny",
    ),
    (
        acl(entry("Topic:a", ["Pub"]), more_policies=({"entries": [entry("Topic:a", ["Sub"])]},)),
        "overlapping rules: policies[1].entries[0] and policies[0].entries[0] both name Topic:a",
    ),
    (acl(entry("Topic:a", ["Fly"])), f"{E0}.actions: unknown action 'Fly' (one of Pub, Sub,"),
    (acl(entry("Topic:a", "Pub,Sub")), f"{E0}.actions: unknown action 'Pub,Sub'"),
    (acl(entry("Group:g", ["Pub"])), f"{E0}: entry for Group:g: action Pub does not apply to Group"),
    (acl(entry("Queue:q", ["Pub"])), f"{E0}.resource: resource 'Queue:q': unknown type 'Queue'"),
    (acl(entry("Topic:a*b", ["Pub"])), f"{E0}.resource: resource 'Topic:a*b': '*' may only end a name"),
    (acl(entry("Topic:", ["Pub"])), f"{E0}.resource: resource 'Topic:': the name is empty"),
    (acl(entry("orders", ["Pub"])), f"{E0}.resource: resource 'orders' is not '*' or '<type>:<name>'"),
    (acl(entry("Topic:a", ["Pub"], sourceIps=["10.0.0.1/8"])), f"{E0}.sourceIps.0: source IP '10.0.0.1/8'"),
    (acl(entry("Topic:a", ["Pub"], "Maybe")), f"{E0}.decision: Input should be 'Allow' or 'Deny'"),
    ("[]", "ACL refused: a JSON object is expected, not list"),
    ("{", "ACL refused: not JSON"),
]


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    running = await start_cluster(tmp_path)
    yield running
    await running.close()


async def _refused(call: Any) -> str:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await call
    failure = failure_of(refused.value)
    assert failure is not None and failure.reason == ErrorReason.INVALID_ARGUMENT, refused.value
    return " ".join((refused.value.details() or "").split())


async def test_bad_documents_are_refused_by_the_rpc_naming_field_and_rule(cluster: Cluster) -> None:
    (running,) = cluster.brokers.values()
    stub = running.stub
    for document, rule in BAD_USERS:
        message = await _refused(stub.CreateUser(broker_pb2.CreateUserRequest(user=json.dumps(document))))
        assert rule in message, (document, message)
    await stub.CreateUser(
        broker_pb2.CreateUserRequest(user=json.dumps({"username": "app", "password": "pw"}))
    )
    for change, rule in [
        ({"username": "app", "password": ""}, "password: a user needs a non-empty secret"),
        ({"username": "app", "password": None}, "password: a user needs a non-empty secret"),
        ({"username": "app"}, "nothing to change"),
        ({"password": "x"}, "username: required"),
    ]:
        message = await _refused(stub.UpdateUser(broker_pb2.UpdateUserRequest(user=json.dumps(change))))
        assert rule in message, (change, message)
    for document, rule in BAD_ACLS:
        for call in (
            stub.CreateAcl(broker_pb2.CreateAclRequest(acl=document)),
            stub.UpdateAcl(broker_pb2.UpdateAclRequest(acl=document)),
        ):
            message = await _refused(call)
            assert rule in message, (document, message)
    await stub.CreateAcl(broker_pb2.CreateAclRequest(acl=acl(entry("Topic:a", ["Pub"]))))
    message = await _refused(
        stub.DeleteAcl(broker_pb2.DeleteAclRequest(subject="User:app", resources=["Topic:a b"]))
    )
    assert "resources.0: resource 'Topic:a b': invalid topic name 'a b'" in message, message
    tables = running.broker.auth_store.tables
    assert tables.version == 2  # the valid user and ACL only: nothing refused was stored
    assert tables.secret_of("app") == "pw" and len(tables.acls) == 1
