"""``spec.security.authentication`` and ``OrbitMQUser`` without a cluster: the servers get the
operator's super user from its Secret (never from the ConfigMap) and load it as their bootstrap
super user; a user's policies become the brokers' ACL or are refused naming the field; the
CRD's own rules refuse what a schema can say; the reconciler's comparisons decide what to write."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from pydantic import ValidationError

from orbitmq.auth.model import Acl, UserType
from orbitmq.broker.settings import BrokerSettings
from orbitmq.nameserver.settings import NameServerSettings
from orbitmq.proxy.settings import ProxySettings
from orbitmq_operator.builders import Cluster, SpecError, auth, desired_objects, names
from orbitmq_operator.crds import KINDS, crd
from orbitmq_operator.reconcile.users import acl_differs, credentials_digest, stale_resources
from orbitmq_operator.spec import ClusterSpec
from orbitmq_operator.user_spec import RESOURCE_PATTERN, UserSpec, check_username

AUTH_ON = {"security": {"authentication": {"enabled": True}}}


def make(**spec: Any) -> Cluster:
    return Cluster(
        "orbit", "mq", "11111111-2222", ClusterSpec.model_validate({"image": "orbitmq:1.0", **spec}), 3
    )


def containers(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """The orbitmq container of each workload, by its object's name."""
    return {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]["containers"][0]
        for o in desired_objects(cluster)
        if o["kind"] in ("StatefulSet", "Deployment")
    }


def env_settings(container: dict[str, Any], secret: dict[str, str]) -> dict[str, str]:
    """The container's environment as the kubelet resolves it (Secret keys filled in)."""
    out = {}
    for variable in container.get("env", []):
        ref = variable.get("valueFrom", {}).get("secretKeyRef")
        if ref is not None:
            assert ref["name"] == "orbit-operator-user"
            out[variable["name"]] = secret[ref["key"]]
        elif "value" in variable:
            out[variable["name"]] = variable["value"]
    return out


def test_authentication_off_gives_the_servers_nothing() -> None:
    for container in containers(make(proxy={"replicas": 1})).values():
        assert not any("AUTH" in v["name"] for v in container.get("env", []))


def test_every_server_takes_the_operator_user_from_its_secret_and_not_from_the_config_map() -> None:
    cluster = make(proxy={"replicas": 1}, **AUTH_ON)
    secret = {"accessKey": "orbitmq-operator-abc", "secretKey": "s3cret"}
    found = containers(cluster)
    assert set(found) == {"orbit-namesrv", "orbit-broker-0", "orbit-proxy"}
    prefixes = {
        "orbit-namesrv": "ORBITMQ_NAMESRV_",
        "orbit-broker-0": "ORBITMQ_BROKER_",
        "orbit-proxy": "ORBITMQ_PROXY_",
    }
    for name, container in found.items():
        env = env_settings(container, secret)
        prefix = prefixes[name]
        assert env[f"{prefix}AUTH_ENABLED"] == "true"
        assert env[f"{prefix}AUTH_SUPER_USER"] == "orbitmq-operator-abc"
        assert env[f"{prefix}AUTH_SUPER_SECRET"] == "s3cret"
        assert not any("value" in v and "secret" in v["name"].lower() for v in container["env"])
    config = next(o for o in desired_objects(cluster) if o["kind"] == "ConfigMap")
    assert "auth_super" not in str(config["data"]), "no credential in a ConfigMap"


@pytest.mark.parametrize(
    ("model", "prefix"),
    [
        (BrokerSettings, "ORBITMQ_BROKER_"),
        (NameServerSettings, "ORBITMQ_NAMESRV_"),
        (ProxySettings, "ORBITMQ_PROXY_"),
    ],
)
def test_the_servers_load_that_environment_as_auth_on_with_a_bootstrap_super_user(
    model: type, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orbitmq.common.settings import load_settings

    env = env_settings(
        {"env": auth.server_env(make(**AUTH_ON), prefix)}, {"accessKey": "op", "secretKey": "pw"}
    )
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    extra = {"broker_name": "b", "advertise_addr": "127.0.0.1:1"} if model is BrokerSettings else {}
    settings = load_settings(model, file=None, env_prefix=prefix, flags=extra)
    assert settings.auth_enabled and settings.auth_super_user == "op" and settings.auth_super_secret == "pw"


def test_the_operator_user_secret_is_owned_by_the_cluster_and_read_back() -> None:
    cluster = make(**AUTH_ON)
    access_key, secret_key = auth.generate_operator_credentials()
    assert check_username(access_key, "x") == access_key and len(secret_key) >= 40
    assert auth.generate_operator_credentials() != (access_key, secret_key)
    secret = auth.operator_user_secret(cluster, access_key, secret_key)
    assert secret["metadata"]["name"] == names.operator_user_secret("orbit") == "orbit-operator-user"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == "11111111-2222"
    assert auth.read_credentials(secret["data"], "mq/orbit-operator-user") == (access_key, secret_key)


def test_an_incomplete_secret_is_refused_naming_it_and_the_key() -> None:
    data = {"accessKey": base64.b64encode(b"app").decode()}
    with pytest.raises(ValueError, match="Secret mq/creds has no secretKey"):
        auth.read_credentials(data, "mq/creds")


def spec(*policies: dict[str, Any], **fields: Any) -> UserSpec:
    return UserSpec.model_validate(
        {"cluster": "orbit", "authorization": {"policies": list(policies)}, **fields}
    )


def test_policies_become_the_brokers_acl() -> None:
    user = spec(
        {"resource": "Topic:orders", "actions": ["Pub", "Sub"]},
        {"resource": "Group:billing-*", "actions": ["Sub"], "sourceIps": ["10.0.0.0/8"]},
        {"resource": "Topic:secret", "actions": ["All"], "decision": "Deny"},
    )
    acl = user.acl("app")
    assert isinstance(acl, Acl) and acl.subject == "User:app"
    assert [(str(e.resource), e.decision.value) for e in acl.policies[0].entries] == [
        ("Topic:orders", "Allow"),
        ("Group:billing-*", "Allow"),
        ("Topic:secret", "Deny"),
    ]
    assert user.user_type is UserType.NORMAL and spec().acl("app") is None


@pytest.mark.parametrize(
    ("policies", "field", "rule"),
    [
        (
            [{"resource": "Topic:a", "actions": ["Pub"], "sourceIps": ["10.0.0.1/8"]}],
            "policies[0].sourceIps",
            "host bits",
        ),
        ([{"resource": "Group:g", "actions": ["Pub"]}], "policies[0]", "does not apply to Group"),
        (
            [{"resource": "Topic:a", "actions": ["Pub"]}, {"resource": "Topic:a", "actions": ["Sub"]}],
            "spec.authorization.policies",
            "overlapping rules",
        ),
        ([{"resource": "Topic:" + "a" * 200, "actions": ["Pub"]}], "policies[0].resource", "Topic:aaa"),
    ],
)
def test_bad_policies_are_refused_naming_the_field_and_the_rule(
    policies: list[dict[str, Any]], field: str, rule: str
) -> None:
    with pytest.raises(SpecError) as refused:
        spec(*policies).acl("app")
    assert field in refused.value.path and rule in refused.value.problem


def test_an_unknown_action_and_a_secret_type_without_its_secret_are_refused() -> None:
    with pytest.raises(ValidationError, match="Publish"):
        spec({"resource": "Topic:a", "actions": ["Publish"]})
    with pytest.raises(SpecError, match="cannot be an orbitmq username"):
        check_username("x" * 65, "metadata.name")


def user_schema() -> dict[str, Any]:
    kind = next(k for k in KINDS if k.kind == "OrbitMQUser")
    return crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_the_crd_says_the_rules_a_schema_can() -> None:
    import re

    schema = user_schema()
    spec_node = schema["properties"]["spec"]
    entry = spec_node["properties"]["authorization"]["properties"]["policies"]["items"]
    assert entry["properties"]["actions"]["items"]["enum"] == [
        "Pub",
        "Sub",
        "Create",
        "Update",
        "Delete",
        "Get",
        "List",
        "All",
    ]
    assert entry["properties"]["actions"]["x-kubernetes-list-type"] == "set"
    rules = [r["rule"] for r in entry["x-kubernetes-validations"]]
    assert any("Pub" in r for r in rules) and any("Sub" in r for r in rules)
    policies = spec_node["properties"]["authorization"]["properties"]["policies"]
    assert "exists_one" in policies["x-kubernetes-validations"][0]["rule"]
    ips = entry["properties"]["sourceIps"]["items"]
    assert ips["x-kubernetes-validations"][0]["rule"] == "isIP(self) || isCIDR(self)"
    assert spec_node["properties"]["userType"]["enum"] == ["Super", "Normal"]
    authn = spec_node["properties"]["authentication"]
    assert authn["default"] == {"type": "generated"}
    assert "secretName" in authn["x-kubernetes-validations"][0]["message"]
    for good in ("*", "Topic:*", "Topic:order-*", "Group:billing", "Cluster:orbit"):
        assert re.match(RESOURCE_PATTERN, good), good
    for bad in ("Queue:x", "Topic:", "topic:x", "Topic:a*b", "*:x"):
        assert not re.match(RESOURCE_PATTERN, bad), bad


def test_the_reconciler_compares_acls_by_entry_and_finds_stale_ones() -> None:
    acl = spec({"resource": "Topic:orders", "actions": ["Pub", "Sub"]}).acl("app")
    stored = {
        "subject": "User:app",
        "policies": [
            {
                "policyType": "Custom",
                "entries": [
                    {
                        "resource": "Topic:orders",
                        "actions": ["Sub", "Pub"],
                        "sourceIps": [],
                        "decision": "Allow",
                    },
                    {"resource": "Topic:old", "actions": ["Pub"], "sourceIps": [], "decision": "Allow"},
                ],
            }
        ],
    }
    assert acl_differs(stored, acl) and stale_resources(stored, acl) == ["Topic:old"]
    stored["policies"][0]["entries"].pop()
    assert not acl_differs(stored, acl), "the order of actions does not matter"
    assert acl_differs(None, acl) and not acl_differs(None, None) and stale_resources(None, acl) == []
    digest = credentials_digest("app", "pw", UserType.NORMAL)
    assert digest != credentials_digest("app", "pw2", UserType.NORMAL)
    assert digest != credentials_digest("app", "pw", UserType.SUPER) and "pw" not in digest


def test_an_optional_sub_object_stays_absent_rather_than_defaulted() -> None:
    """``issuer: IssuerRef | None = None`` with required fields: a default ``{}`` for it (as for
    sub-objects with a ``default_factory``) makes the API server refuse the whole CRD."""
    cluster = next(k for k in KINDS if k.kind == "OrbitMQCluster")
    tls = crd(cluster)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    tls = tls["properties"]["security"]["properties"]["tls"]
    assert "default" not in tls["properties"]["issuer"]
    assert "issuer" not in tls["default"] and tls["default"]["enabled"] is False
    assert "x-orbitmq-absent-by-default" not in str(crd(cluster))
