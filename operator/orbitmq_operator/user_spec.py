"""``OrbitMQUser``: a user of a cluster and what it may do, as RocketMQ 5.3's ACL 2.0 says it.

Apart from :mod:`orbitmq_operator.spec` (which it builds on: the same ``_Spec`` base, CEL
helpers and status) so that module stays about the cluster and its resources.

The policies are the ACL 2.0 entries users know from ``mqadmin createAcl`` (resource, actions,
decision, source IPs), all of one ``Custom`` policy. The API server refuses what a schema and
CEL can say (an unknown action, a malformed resource, ``Pub`` on a group, two entries for one
resource, a source that is not an address or a CIDR block); the operator checks the rest with
:mod:`orbitmq.auth.model` itself (:meth:`UserSpec.acl`), the model the brokers load, so a
policy the brokers would refuse is ``Ready=False`` naming the field before any broker is asked.
"""

from __future__ import annotations

import re
from enum import StrEnum

from pydantic import ConfigDict, Field, ValidationError

from orbitmq.auth.model import (
    SUBJECT_PREFIX,
    USERNAME_RULE,
    Acl,
    Action,
    Decision,
    PolicyType,
    UserType,
    describe_errors,
)
from orbitmq_operator.builders.errors import SpecError
from orbitmq_operator.spec import K8S_NAME_PATTERN, Condition, _Spec, cel, immutable, list_map

MAX_POLICIES = 64
MAX_SOURCE_IPS = 16
MAX_RESOURCE_LENGTH = 300
"""``Group:`` plus the longest group name, with room: bounds the CEL cost of comparing them."""
RESOURCE_PATTERN = r"^(\*|(Cluster|Topic|Group):([A-Za-z0-9_.%|-]+\*?|\*))$"
"""``*``, ``Type:*``, ``Type:prefix*`` or ``Type:name`` (the names' own rules are the model's)."""


class CredentialsType(StrEnum):
    GENERATED = "generated"
    """The operator makes the secret and writes it to a Secret named after the user."""
    SECRET = "secret"
    """The access key and secret are read from a Secret the user keeps (``secretName``)."""


class UserAuthenticationSpec(_Spec):
    """Where the user's access key and secret come from."""

    type: CredentialsType = Field(
        default=CredentialsType.GENERATED,
        description="generated: the operator writes accessKey and secretKey to a Secret named after "
        "the OrbitMQUser (owned by it); secret: read them from secretName.",
    )
    secret_name: str | None = Field(
        default=None,
        pattern=K8S_NAME_PATTERN,
        max_length=253,
        description="With type: secret, a Secret of the same namespace holding accessKey and secretKey.",
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "self.type == 'secret' ? has(self.secretName) : !has(self.secretName)",
                    "secretName goes with type: secret (and only with it)",
                    ".secretName",
                )
            ]
        }
    )


class PolicyEntrySpec(_Spec):
    """One ACL 2.0 entry: these actions on this resource, from these sources, allowed or denied."""

    resource: str = Field(
        pattern=RESOURCE_PATTERN,
        max_length=MAX_RESOURCE_LENGTH,
        description="'*', 'Cluster:<name>', 'Topic:<name>' or 'Group:<name>'; a name is exact, a "
        "prefix ending in '*', or '*' alone.",
    )
    actions: list[Action] = Field(
        min_length=1,
        max_length=len(Action),
        description="Pub (topics), Sub (topics, groups), Create, Update, Delete, Get, List, All.",
        json_schema_extra={
            "x-kubernetes-list-type": "set",
        },
    )
    decision: Decision = Field(default=Decision.ALLOW, description="Allow or Deny (deny wins).")
    source_ips: list[str] = Field(
        default=[],
        max_length=MAX_SOURCE_IPS,
        description="Addresses or CIDR blocks the request must come from; empty: anywhere.",
        json_schema_extra={
            "items": {
                "type": "string",
                "maxLength": 64,
                "x-kubernetes-validations": [
                    cel("isIP(self) || isCIDR(self)", "a source IP is an address or a CIDR block")
                ],
            }
        },
    )

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "!(self.resource.startsWith('Cluster:') || self.resource.startsWith('Group:')) "
                    "|| !self.actions.exists(a, a == 'Pub')",
                    "Pub applies to topics only (or to '*')",
                    ".actions",
                ),
                cel(
                    "!self.resource.startsWith('Cluster:') || !self.actions.exists(a, a == 'Sub')",
                    "Sub applies to topics and groups only (or to '*')",
                    ".actions",
                ),
            ]
        }
    )


class AuthorizationSpec(_Spec):
    policies: list[PolicyEntrySpec] = Field(
        default=[],
        max_length=MAX_POLICIES,
        description="What the user may do; with authorization on, what no entry allows is denied.",
        json_schema_extra={
            "x-kubernetes-validations": [
                cel(
                    "self.all(p, self.exists_one(q, q.resource == p.resource))",
                    "overlapping rules: one entry per resource (merge their actions and sourceIps)",
                )
            ]
        },
    )


class UserSpec(_Spec):
    """``OrbitMQUser``: a user on every master of a cluster, its credentials in a Secret."""

    cluster: str = Field(
        pattern=K8S_NAME_PATTERN,
        max_length=63,
        description="The OrbitMQCluster (same namespace) the user belongs to.",
        json_schema_extra={"x-kubernetes-validations": [immutable("cluster")]},
    )
    user_type: UserType = Field(
        default=UserType.NORMAL,
        description="Normal: allowed what its policies allow; Super: allowed everything.",
    )
    authentication: UserAuthenticationSpec = Field(default_factory=UserAuthenticationSpec)
    authorization: AuthorizationSpec = Field(default_factory=AuthorizationSpec)

    def acl(self, username: str) -> Acl | None:
        """The user's ACL as the brokers store it (None without policies), checked with the
        brokers' own model: :class:`SpecError` names the field and the rule broken."""
        if not self.authorization.policies:
            return None
        entries = [
            {
                "resource": p.resource,
                "actions": [a.value for a in p.actions],
                "decision": p.decision.value,
                "sourceIps": list(p.source_ips),
            }
            for p in self.authorization.policies
        ]
        document = {
            "subject": f"{SUBJECT_PREFIX}{username}",
            "policies": [{"policyType": PolicyType.CUSTOM.value, "entries": entries}],
        }
        try:
            return Acl.model_validate(document)
        except ValidationError as error:
            where, _, rule = describe_errors(error)[0].partition(": ")
            raise SpecError(_spec_path(where), rule) from None


def _spec_path(where: str) -> str:
    """``policies.0.entries.2.sourceIps.0`` (the model's path) as the CR's field path."""
    parts = where.split(".")
    if len(parts) >= 4 and parts[0] == "policies" and parts[2] == "entries":
        path = f"spec.authorization.policies[{parts[3]}]"
        return ".".join([path, *parts[4:5]])
    return "spec.authorization.policies"


def check_username(name: str, where: str) -> str:
    """An access key as the brokers' username (a resource name, a Secret's ``accessKey``):
    refused, naming ``where`` it came from, when the brokers' rule would refuse it (a
    Kubernetes name may be longer than 64 characters)."""
    if not re.fullmatch(USERNAME_RULE, name):
        raise SpecError(where, f"{name!r} cannot be an orbitmq username (rule {USERNAME_RULE})")
    return name


class UserStatus(_Spec):
    """Status of an ``OrbitMQUser``."""

    observed_generation: int = 0
    conditions: list[Condition] = Field(default_factory=list, json_schema_extra=list_map("type"))
    username: str = Field(default="", description="The user's access key on the brokers.")
    secret_name: str = Field(default="", description="The Secret holding accessKey and secretKey.")
    applied_to: list[str] = Field(default_factory=list, description="Broker groups that have the user.")
    credentials_hash: str = Field(
        default="",
        description="A digest of the credentials last applied (never the secret): a changed Secret "
        "is applied again.",
    )
