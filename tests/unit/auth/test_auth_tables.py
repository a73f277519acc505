"""The tables a server decides with: lookups, and documents inconsistent with each other refused
with both of them named."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from orbitmq.auth.decide import Need, Why, authorize
from orbitmq.auth.model import Action, Resource, describe_errors
from orbitmq.auth.signature import SignatureError, SignatureFailure, sign_v1, verify_v1
from orbitmq.auth.tables import AuthTables

SEND = "/orbitmq.v1.Broker/SendMessage"
NOW_MS = 1_767_225_600_000


def _user(name: str, **more: Any) -> dict[str, Any]:
    return {"username": name, "password": f"{name}-secret", **more}


def _acl(name: str, resource: str = "Topic:orders") -> dict[str, Any]:
    entry = {"resource": resource, "actions": ["Pub"], "decision": "Allow"}
    return {"subject": f"User:{name}", "policies": [{"entries": [entry]}]}


TABLES = AuthTables.model_validate(
    {
        "version": 3,
        "users": [_user("app"), _user("off", userStatus="disable"), _user("root", userType="Super")],
        "acls": [_acl("app"), _acl("off")],
    }
)
PUB_ORDERS = [Need((Action.PUB,), Resource.topic("orders"))]


def _decide_signed(access_key: str, secret: str) -> str:
    """What a server does with a call: verify its signature, then decide what it needs."""
    username = verify_v1(sign_v1(SEND, access_key, secret, NOW_MS), SEND, TABLES.secret_of, NOW_MS)
    user = TABLES.user(username)
    assert user is not None
    verdict = authorize(user, TABLES.acl_of(username), PUB_ORDERS, "10.0.0.1")
    return "allowed" if verdict.allowed else verdict.why.name


def test_lookups_from_signature_to_decision() -> None:
    assert _decide_signed("app", "app-secret") == "allowed"
    assert _decide_signed("root", "root-secret") == "allowed"
    assert _decide_signed("off", "off-secret") == Why.DISABLED.name
    with pytest.raises(SignatureError) as refused:
        _decide_signed("ghost", "x")
    assert refused.value.failure is SignatureFailure.UNKNOWN_ACCESS_KEY
    assert TABLES.acl_of("root") is None and TABLES.user("ghost") is None


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ({"users": [_user("a"), _user("b"), _user("a")]}, "users[2] and users[0] are both named 'a'"),
        (
            {"users": [_user("a")], "acls": [_acl("a"), _acl("a", "Topic:x")]},
            "acls[1] and acls[0] are both for User:a",
        ),
        ({"users": [_user("a")], "acls": [_acl("b")]}, "acls[0] is for User:b, which is not a user"),
        ({"version": -1}, "greater than or equal to 0"),
    ],
)
def test_inconsistent_tables_are_refused(document: dict[str, Any], said: str) -> None:
    with pytest.raises(ValidationError) as refused:
        AuthTables.model_validate(document)
    (line,) = describe_errors(refused.value)
    assert said in line, line


def test_a_bad_document_inside_is_refused_with_its_path() -> None:
    with pytest.raises(ValidationError) as refused:
        AuthTables.model_validate({"users": [_user("a"), {"username": "b", "password": ""}]})
    assert describe_errors(refused.value) == [
        "users.1.password: a user needs a non-empty secret (password): requests are signed with it"
    ]


def test_digest_ignores_order_but_not_content_and_the_wire_form_leaves_the_local_version() -> None:
    users = [_user("a"), _user("b")]
    one = AuthTables.model_validate({"version": 3, "changed_ms": 9, "users": users, "acls": [_acl("a")]})
    other = AuthTables.model_validate(
        {"version": 8, "changed_ms": 9, "users": users[::-1], "acls": [_acl("a")]}
    )
    assert one.stamp == other.stamp == (9, one.digest)  # versions are local: not part of it
    secret_changed = AuthTables.model_validate(
        {"changed_ms": 9, "users": [_user("a"), {**_user("b"), "password": "new"}], "acls": [_acl("a")]}
    )
    assert secret_changed.digest != one.digest
    received = AuthTables.model_validate_json(one.content_json())
    assert received.version == 0 and received.stamp == one.stamp and received.users == one.users
