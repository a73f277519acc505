"""Decisions: ACL 2.0's precedence (most specific resource, then Deny), source IPs, super and
disabled users, default policies, several needs, and the per-connection cache."""

from __future__ import annotations

from typing import Any

import pytest

from orbitmq.auth.decide import DecisionCache, Need, Why, authorize, decide
from orbitmq.auth.model import Acl, Action, Decision, Policy, PolicyEntry, Resource, User

APP = User.model_validate({"username": "app", "password": "pw"})
ROOT = User.model_validate({"username": "root", "password": "pw", "userType": "Super"})
OFF = User.model_validate({"username": "app", "password": "pw", "userStatus": "disable"})
OFF_ROOT = User.model_validate(
    {"username": "root", "password": "pw", "userType": "Super", "userStatus": "disable"}
)

ALLOW, DENY = Decision.ALLOW, Decision.DENY


def acl(*entries: tuple[str, str, str] | tuple[str, str, str, list[str]], default: Any = ()) -> Acl:
    """Entries as (resource, "Pub,Sub", "Allow"[, source IPs])."""

    def entry(item: Any) -> dict[str, Any]:
        resource, actions, decision, *ips = item
        return {
            "resource": resource,
            "actions": actions.split(","),
            "decision": decision,
            "sourceIps": ips[0] if ips else [],
        }

    policies = [{"entries": [entry(e) for e in entries]}] if entries else []
    if default:
        policies.append({"policyType": "Default", "entries": [entry(e) for e in default]})
    return Acl.model_validate({"subject": "User:app", "policies": policies})


def pub(topic: str) -> Need:
    return Need((Action.PUB,), Resource.topic(topic))


def sub_group(group: str) -> Need:
    return Need((Action.SUB,), Resource.group(group))


DOC_EXAMPLE = acl(
    ("Topic:test-abc-1", "Pub,Sub", "Deny"),
    ("Topic:test-abc", "Pub,Sub", "Allow"),
    ("Topic:test-*", "Pub,Sub", "Allow"),
    ("Topic:*", "Pub,Sub", "Allow"),
    ("*", "All", "Deny"),
)
"""The precedence example of RocketMQ's ACL 2.0 manual."""


@pytest.mark.parametrize(
    ("policy", "need", "expected"),
    [
        # RocketMQ's manual, line by line.
        (DOC_EXAMPLE, pub("test-abc-1"), DENY),
        (DOC_EXAMPLE, pub("test-abc"), ALLOW),
        (DOC_EXAMPLE, pub("test-123"), ALLOW),
        (DOC_EXAMPLE, pub("other"), ALLOW),
        (DOC_EXAMPLE, sub_group("TestGroup"), DENY),
        # exact, prefix, * each alone
        (acl(("Topic:orders", "Pub", "Allow")), pub("orders"), ALLOW),
        (acl(("Topic:orders", "Pub", "Allow")), pub("orders-eu"), DENY),
        (acl(("Topic:order*", "Pub", "Allow")), pub("orders-eu"), ALLOW),
        (acl(("Topic:order*", "Pub", "Allow")), pub("payments"), DENY),
        (acl(("Topic:*", "Pub", "Allow")), pub("anything"), ALLOW),
        (acl(("Topic:*", "Pub", "Allow")), sub_group("anything"), DENY),
        (acl(("*", "Pub", "Allow")), pub("anything"), ALLOW),
        # the action must be granted (All grants every one)
        (acl(("Topic:orders", "Sub", "Allow")), pub("orders"), DENY),
        (acl(("Topic:orders", "All", "Allow")), pub("orders"), ALLOW),
        (acl(("Group:g", "All", "Allow")), sub_group("g"), ALLOW),
        # a specific rule is an exception to a broad one, either way
        (acl(("Topic:*", "Pub", "Allow"), ("Topic:secret", "Pub", "Deny")), pub("secret"), DENY),
        (acl(("Topic:*", "Pub", "Deny"), ("Topic:orders", "Pub", "Allow")), pub("orders"), ALLOW),
        (acl(("Topic:*", "Pub", "Deny"), ("Topic:orders", "Pub", "Allow")), pub("other"), DENY),
        (acl(("Topic:ord*", "Pub", "Deny"), ("Topic:order*", "Pub", "Allow")), pub("orders"), ALLOW),
        (acl(("Topic:ord*", "Pub", "Allow"), ("Topic:order*", "Pub", "Deny")), pub("orders"), DENY),
        (acl(("*", "Pub", "Deny"), ("Topic:*", "Pub", "Allow")), pub("orders"), ALLOW),
        # a Deny that does not grant the action asked does not match
        (acl(("Topic:*", "Pub", "Allow"), ("Topic:orders", "Sub", "Deny")), pub("orders"), ALLOW),
        # nothing matches: denied
        (acl(("Group:g", "Sub", "Allow")), pub("orders"), DENY),
    ],
)
def test_precedence(policy: Acl, need: Need, expected: Decision) -> None:
    assert decide(APP, policy, need, "10.1.2.3").decision is expected


@pytest.mark.parametrize(
    ("source_ip", "expected"),
    [
        ("10.1.2.3", ALLOW),
        ("10.255.255.255", ALLOW),
        ("11.0.0.1", DENY),
        ("192.168.1.7", ALLOW),
        ("192.168.1.8", DENY),
        ("fd00::1", ALLOW),
        ("fe80::1", DENY),
        ("not an address", DENY),
        (None, DENY),
    ],
)
def test_source_ips_limit_where_an_entry_applies(source_ip: str | None, expected: Decision) -> None:
    policy = acl(("Topic:orders", "Pub", "Allow", ["10.0.0.0/8", "192.168.1.7", "fd00::/8"]))
    assert decide(APP, policy, pub("orders"), source_ip).decision is expected


def test_equally_specific_entries_deny_wins() -> None:
    """Validation refuses one resource twice in a policy type, so only an ACL built without it
    (``model_construct``, as a store might) has a tie; Deny still wins it."""
    allow, deny = (
        PolicyEntry.model_validate({"resource": "Topic:orders", "actions": ["Pub"], "decision": d})
        for d in ("Allow", "Deny")
    )
    for entries in ((allow, deny), (deny, allow)):
        tied = Acl.model_construct(subject="User:app", policies=(Policy.model_construct(entries=entries),))
        assert decide(APP, tied, pub("orders"), None).decision is DENY


def test_a_deny_from_some_addresses_only() -> None:
    policy = acl(("Topic:*", "Pub", "Allow"), ("Topic:orders", "Pub", "Deny", ["203.0.113.0/24"]))
    assert decide(APP, policy, pub("orders"), "203.0.113.9").decision is DENY
    assert decide(APP, policy, pub("orders"), "10.0.0.1").decision is ALLOW


def test_super_users_are_allowed_everything_and_disabled_users_nothing() -> None:
    everything = acl(("*", "All", "Allow"))
    assert decide(ROOT, None, pub("orders"), None).decision is ALLOW
    assert decide(ROOT, acl(("*", "All", "Deny")), pub("orders"), None).decision is ALLOW
    refused = decide(OFF, everything, pub("orders"), "10.0.0.1")
    assert (refused.decision, refused.reason) == (DENY, "user app: the user is disabled")
    assert decide(OFF_ROOT, None, pub("orders"), None).decision is DENY


def test_a_normal_user_without_an_acl_is_denied() -> None:
    verdict = decide(APP, None, pub("orders"), "10.0.0.1")
    assert (verdict.decision, verdict.reason) == (DENY, "user app: the user has no ACL")


def test_default_entries_apply_only_when_no_custom_entry_matches() -> None:
    policy = acl(("Topic:orders", "Pub", "Deny"), default=[("Topic:*", "Pub", "Allow")])
    assert decide(APP, policy, pub("orders"), None).decision is DENY
    assert decide(APP, policy, pub("other"), None).decision is ALLOW
    only_default = acl(default=[("Topic:*", "Pub", "Allow")])
    assert decide(APP, only_default, pub("x"), None).decision is ALLOW


def test_verdict_names_the_deciding_entry() -> None:
    verdict = decide(APP, DOC_EXAMPLE, pub("test-abc-1"), "10.0.0.1")
    assert verdict.entry is not None and verdict.entry.resource.key == "Topic:test-abc-1"
    assert verdict.reason == "custom entry Topic:test-abc-1 Deny decides Pub on Topic:test-abc-1 for app"
    refused = decide(APP, acl(("Group:g", "Sub", "Allow")), pub("t"), "10.0.0.1")
    assert refused.reason == "no entry of User:app allows Pub on Topic:t from 10.0.0.1"


def test_alternative_actions_need_only_one() -> None:
    route = Need((Action.PUB, Action.SUB, Action.GET), Resource.topic("orders"))
    assert decide(APP, acl(("Topic:orders", "Sub", "Allow")), route, None).decision is ALLOW
    assert decide(APP, acl(("Topic:orders", "Create", "Allow")), route, None).decision is DENY


def test_authorize_needs_every_need_and_names_the_first_refused() -> None:
    policy = acl(("Topic:orders", "Sub", "Allow"), ("Group:g1", "Sub", "Allow"))
    needs = [Need((Action.SUB,), Resource.topic("orders")), sub_group("g1")]
    assert authorize(APP, policy, needs, None).allowed
    refused = authorize(APP, policy, [*needs, sub_group("g2"), pub("orders")], None)
    assert not refused.allowed and refused.need == sub_group("g2")
    assert authorize(APP, None, [], None).allowed
    assert authorize(OFF, None, [], None).why is Why.DISABLED
    assert DecisionCache().authorize(1, OFF, None, [], None).why is Why.DISABLED


def test_cache_answers_repeats_and_forgets_on_a_new_policy_version() -> None:
    cache = DecisionCache(max_entries=8)
    allow_all = acl(("Topic:*", "Pub", "Allow"))
    deny_all = acl(("Topic:*", "Pub", "Deny"))
    assert cache.decide(1, APP, allow_all, pub("a"), None).allowed
    # Same version: the cached verdict stands even if the caller's ACL object changed (it must
    # bump the version when it changes policies; this shows the cache is really used).
    assert cache.decide(1, APP, deny_all, pub("a"), None).allowed
    assert (cache.hits, cache.misses) == (1, 1)
    assert not cache.decide(2, APP, deny_all, pub("a"), None).allowed
    assert (cache.hits, cache.misses, len(cache)) == (1, 2, 1)
    # Another user on the same cache is decided afresh (a super user: allowed).
    assert cache.decide(2, ROOT, deny_all, pub("a"), None).allowed
    assert (cache.hits, cache.misses, len(cache)) == (1, 3, 2)


def test_cache_keys_by_username_and_stays_bounded() -> None:
    cache = DecisionCache(max_entries=3)
    policy = acl(("Topic:*", "Pub", "Allow"))
    for topic in "abcde":
        cache.decide(7, APP, policy, pub(topic), None)
    assert len(cache) == 3
    cache.decide(7, APP, policy, pub("e"), None)
    assert cache.hits == 1
    other = User.model_validate({"username": "other", "password": "pw"})
    assert not cache.decide(7, other, None, pub("e"), None).allowed
    with pytest.raises(ValueError, match="at least 1"):
        DecisionCache(max_entries=0)


def test_cache_authorize_stops_at_the_first_refusal() -> None:
    cache = DecisionCache()
    policy = acl(("Topic:t", "Sub", "Allow"))
    needs = [Need((Action.SUB,), Resource.topic("t")), sub_group("g")]
    assert cache.authorize(1, APP, policy, needs, None).need == sub_group("g")
    assert cache.authorize(1, APP, policy, needs, None).need == sub_group("g")
    assert (cache.hits, cache.misses) == (2, 2)
