"""Users and ACL documents: RocketMQ's JSON shape round-trips, and every bad document is refused
with the field it is in and the rule it broke."""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from pydantic import ValidationError

from orbitmq.auth.model import (
    Acl,
    Action,
    Decision,
    PolicyType,
    Resource,
    ResourcePattern,
    ResourceType,
    User,
    UserStatus,
    UserType,
    describe_errors,
)


def _acl(*entries: dict[str, Any], policy_type: str = "Custom") -> dict[str, Any]:
    return {"subject": "User:app", "policies": [{"policyType": policy_type, "entries": list(entries)}]}


def _entry(resource: str = "Topic:orders", actions: Any = ("Pub",), **more: Any) -> dict[str, Any]:
    return {"resource": resource, "actions": list(actions), "decision": "Allow", **more}


def _refusal(model: type[User] | type[Acl], document: dict[str, Any]) -> list[str]:
    with pytest.raises(ValidationError) as refused:
        model.model_validate(document)
    return describe_errors(refused.value)


def test_rocketmq_json_documents_round_trip() -> None:
    user_doc = {"username": "orders-app", "password": "s3cret", "userType": "Super", "userStatus": "disable"}
    user = User.model_validate(user_doc)
    assert (user.user_type, user.user_status, user.is_super, user.enabled) == (
        UserType.SUPER,
        UserStatus.DISABLE,
        True,
        False,
    )
    assert user.model_dump(by_alias=True, mode="json") == user_doc
    assert "s3cret" not in repr(user)

    acl_doc = _acl(
        _entry("Topic:order-*", ["Pub", "Sub"], sourceIps=["10.0.0.0/8", "fd00::/8", "192.168.1.7"]),
        {"resource": "*", "actions": ["All"], "sourceIps": [], "decision": "Deny"},
    )
    acl = Acl.model_validate(acl_doc)
    first = acl.policies[0].entries[0]
    assert first.resource == Resource(ResourceType.TOPIC, "order-", ResourcePattern.PREFIXED)
    assert first.source_ips[2] == ipaddress.ip_network("192.168.1.7/32")
    assert acl.model_dump(by_alias=True, mode="json") == {
        "subject": "User:app",
        "policies": [
            {
                "policyType": "Custom",
                "entries": [
                    {
                        "resource": "Topic:order-*",
                        "actions": ["Pub", "Sub"],
                        "sourceIps": ["10.0.0.0/8", "fd00::/8", "192.168.1.7/32"],
                        "decision": "Allow",
                    },
                    {"resource": "*", "actions": ["All"], "sourceIps": [], "decision": "Deny"},
                ],
            }
        ],
    }
    assert acl.username == "app"


def test_policy_type_defaults_to_custom_and_default_entries_are_kept_apart() -> None:
    acl = Acl.model_validate(
        {
            "subject": "User:app",
            "policies": [
                {"entries": [_entry("Topic:a")]},
                {"policyType": "Default", "entries": [_entry("Topic:a", ["Sub"])]},
            ],
        }
    )
    assert [e.actions for e in acl.entries_of(PolicyType.CUSTOM)] == [(Action.PUB,)]
    assert [e.actions for e in acl.entries_of(PolicyType.DEFAULT)] == [(Action.SUB,)]


@pytest.mark.parametrize(
    ("key", "resource"),
    [
        ("*", Resource(ResourceType.ANY, "", ResourcePattern.ANY)),
        ("Topic:*", Resource(ResourceType.TOPIC, "", ResourcePattern.ANY)),
        ("Group:g-*", Resource(ResourceType.GROUP, "g-", ResourcePattern.PREFIXED)),
        ("Cluster:DefaultCluster", Resource(ResourceType.CLUSTER, "DefaultCluster")),
        ("Group:%RETRY%g", Resource(ResourceType.GROUP, "%RETRY%g")),
    ],
)
def test_resource_keys_parse_and_print_back(key: str, resource: Resource) -> None:
    assert Resource.parse(key) == resource
    assert resource.key == key


@pytest.mark.parametrize(
    ("document", "field", "rule"),
    [
        ({"username": "app", "password": ""}, "password", "non-empty secret"),
        ({"username": "app", "password": "   "}, "password", "non-empty secret"),
        ({"username": "app"}, "password", "non-empty secret"),
        ({"username": "app", "password": None}, "password", "non-empty secret"),
        ({"username": "app", "password": 7}, "password", "is a string, not int"),
        ({"username": "a b", "password": "x"}, "username", "breaks the rule"),
        ({"username": "", "password": "x"}, "username", "breaks the rule"),
        ({"username": "app", "password": "x", "userType": "Admin"}, "userType", "'Super' or 'Normal'"),
        ({"username": "app", "password": "x", "userStatus": "on"}, "userStatus", "'enable' or 'disable'"),
        ({"username": "app", "password": "x", "admin": True}, "admin", "Extra inputs are not permitted"),
    ],
)
def test_bad_users_are_refused_naming_field_and_rule(document: dict[str, Any], field: str, rule: str) -> None:
    (line,) = _refusal(User, document)
    assert line.startswith(f"{field}: ")
    assert rule in line


E0 = "policies.0.entries.0"


@pytest.mark.parametrize(
    ("document", "field", "rule"),
    [
        (_acl(_entry(actions=["Publish"])), f"{E0}.actions", "unknown action 'Publish' (one of Pub, Sub,"),
        (_acl(_entry(actions=[])), E0, "actions is empty"),
        (_acl(_entry(actions=["Pub", "Pub"])), E0, "action Pub is listed twice"),
        (_acl(_entry("Group:g", ["Pub"])), E0, "action Pub does not apply to Group resources"),
        (_acl(_entry("Cluster:c", ["Sub"])), E0, "action Sub does not apply to Cluster resources"),
        (_acl(_entry("orders")), f"{E0}.resource", "is not '*' or '<type>:<name>'"),
        (_acl(_entry("Queue:q")), f"{E0}.resource", "unknown type 'Queue'"),
        (_acl(_entry("Topic:")), f"{E0}.resource", "the name is empty"),
        (_acl(_entry("Topic:a*b")), f"{E0}.resource", "'*' may only end a name"),
        (_acl(_entry("Topic:**")), f"{E0}.resource", "'*' may only end a name"),
        (_acl(_entry("Topic:a@b")), f"{E0}.resource", "invalid topic name 'a@b'"),
        (_acl(_entry("Cluster:a/b")), f"{E0}.resource", "cluster name breaks the rule"),
        (_acl(_entry("*:x")), f"{E0}.resource", "'*' stands alone"),
        (_acl(_entry(sourceIps=["10.0.0.1/8"])), f"{E0}.sourceIps.0", "has host bits set"),
        (_acl(_entry(sourceIps=["10.0.0.300"])), f"{E0}.sourceIps.0", "not an address or CIDR block"),
        (_acl(_entry(sourceIps=[""])), f"{E0}.sourceIps.0", "not an address or CIDR block"),
        ({**_acl(_entry()), "subject": "app"}, "subject", "is not 'User:<username>'"),
        ({"subject": "User:app", "policies": []}, "(document)", "policies is empty"),
        ({"subject": "User:app", "policies": [{"entries": []}]}, "policies.0.entries", "at least one entry"),
        (_acl({**_entry(), "decision": "Maybe"}), f"{E0}.decision", "'Allow' or 'Deny'"),
        (_acl(_entry(), policy_type="Other"), "policies.0.policyType", "'Custom' or 'Default'"),
    ],
)
def test_bad_acls_are_refused_naming_field_and_rule(document: dict[str, Any], field: str, rule: str) -> None:
    (line,) = _refusal(Acl, document)
    assert line.startswith(f"{field}: "), line
    assert rule in line, line


@pytest.mark.parametrize(
    "second",
    [
        _entry("Topic:orders", ["Pub"]),  # a duplicate
        {**_entry("Topic:orders", ["Sub"]), "decision": "Deny"},  # a conflict
        _entry("Topic:orders", ["Sub"], sourceIps=["10.0.0.0/8"]),  # the same resource, other IPs
    ],
)
def test_the_same_resource_twice_in_one_policy_type_is_an_overlap(second: dict[str, Any]) -> None:
    document = {
        "subject": "User:app",
        "policies": [{"entries": [_entry("Topic:orders"), _entry("Topic:other")]}, {"entries": [second]}],
    }
    (line,) = _refusal(Acl, document)
    assert "overlapping rules: policies[1].entries[0] and policies[0].entries[0]" in line
    assert "Topic:orders" in line and "merge" in line
    conflict = "one Allow, one Deny: which wins would depend on their order"
    assert (conflict in line) is (second["decision"] == "Deny"), line


def test_patterns_covering_the_same_names_and_other_policy_types_are_not_overlaps() -> None:
    acl = Acl.model_validate(
        {
            "subject": "User:app",
            "policies": [
                {"entries": [_entry(r) for r in ("Topic:order-*", "Topic:order-1", "Topic:*", "*")]},
                {"policyType": "Default", "entries": [_entry("Topic:order-1")]},
            ],
        }
    )
    assert len(acl.entries_of(PolicyType.CUSTOM)) == 4


def test_entry_actions_all_grants_every_action() -> None:
    acl = Acl.model_validate(_acl(_entry("Topic:t", ["All"])))
    entry = acl.policies[0].entries[0]
    assert all(entry.grants(action) for action in Action)
    assert entry.decision is Decision.ALLOW
