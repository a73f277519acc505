"""Users and ACLs as RocketMQ 5.3's ACL 2.0 spells them, validated at load.

The JSON shape is RocketMQ's (``mqadmin getUser`` / ``getAcl``), so documents move between the
two unchanged::

    {"username": "orders-app", "password": "s3cret", "userType": "Normal", "userStatus": "enable"}

    {"subject": "User:orders-app",
     "policies": [{"policyType": "Custom",
                   "entries": [{"resource": "Topic:order-*", "actions": ["Pub", "Sub"],
                                "sourceIps": ["10.0.0.0/8"], "decision": "Allow"}]}]}

The access key of a user is its username and the secret its password, as in RocketMQ (the
official clients' ``SessionCredentials(accessKey, secretKey)``).

Resources are ``*`` (anything), ``Cluster:<name>``, ``Topic:<name>`` or ``Group:<name>``; a name
is exact (``Topic:orders``), a prefix ending in ``*`` (``Topic:order-*``) or ``*`` alone (every
resource of the type). Actions: ``Pub``, ``Sub``, ``Create``, ``Update``, ``Delete``, ``Get``,
``List`` and ``All`` (every action, present and future). An action must apply to the resource
type: ``Pub`` to topics, ``Sub`` to topics and groups, the management actions to anything.

Rules a document must follow, each refused with its field and rule named (see
:func:`describe_errors`):

* a user has a username of ``[A-Za-z0-9_.-]``, at most 64 characters, and a non-empty secret;
* a resource has a known type and a valid name; ``*`` only as the last character;
* an entry has at least one action, each known, none twice, each applying to the resource type;
* a source IP is an address or a CIDR block (host bits clear), IPv4 or IPv6;
* **overlapping rules**: within one policy type of one ACL, a resource appears in one entry only.
  RocketMQ keeps one entry per resource (``updateAcl`` replaces it); two entries for the same
  resource are either a duplicate or a conflict whose outcome would depend on the order they were
  written, so both are refused and the author merges them (an entry may list several actions and
  source IPs). Different patterns that cover the same names (``Topic:order-*`` and
  ``Topic:orders``) are not overlaps: the more specific one decides (:mod:`orbitmq.auth.decide`).
"""

from __future__ import annotations

import enum
import ipaddress
import re
from dataclasses import dataclass
from functools import cached_property
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    field_validator,
    model_validator,
)

from orbitmq.common.names import InvalidNameError, validate_group_name, validate_topic_name

USERNAME_RULE = "^[A-Za-z0-9_.-]{1,64}$"
_USERNAME_RE = re.compile(USERNAME_RULE)
CLUSTER_NAME_RULE = "^[A-Za-z0-9_.-]{1,127}$"
_CLUSTER_NAME_RE = re.compile(CLUSTER_NAME_RULE)
SUBJECT_PREFIX = "User:"
WILDCARD = "*"
IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class UserType(enum.StrEnum):
    SUPER = "Super"
    """Allowed everything without any ACL (administrators, and brokers talking to each other)."""
    NORMAL = "Normal"
    """Allowed only what an ACL entry allows."""


class UserStatus(enum.StrEnum):
    ENABLE = "enable"
    DISABLE = "disable"
    """Refused everything, super or not, while keeping the user's ACL for when it is enabled."""


class Action(enum.StrEnum):
    PUB = "Pub"
    SUB = "Sub"
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"
    GET = "Get"
    LIST = "List"
    ALL = "All"


class Decision(enum.StrEnum):
    ALLOW = "Allow"
    DENY = "Deny"


class PolicyType(enum.StrEnum):
    CUSTOM = "Custom"
    """Entries an administrator wrote; consulted first."""
    DEFAULT = "Default"
    """Fallback entries (RocketMQ fills them when migrating ACL 1.0's default permissions),
    consulted only when no custom entry matches."""


class ResourceType(enum.StrEnum):
    ANY = "*"
    CLUSTER = "Cluster"
    TOPIC = "Topic"
    GROUP = "Group"


class ResourcePattern(enum.IntEnum):
    """How a resource names what it covers; the value is its precedence (higher is more specific)."""

    ANY = 0
    PREFIXED = 1
    LITERAL = 2


_ACTIONS_BY_TYPE: dict[ResourceType, frozenset[Action]] = {
    ResourceType.ANY: frozenset(Action),
    ResourceType.CLUSTER: frozenset(Action) - {Action.PUB, Action.SUB},
    ResourceType.TOPIC: frozenset(Action),
    ResourceType.GROUP: frozenset(Action) - {Action.PUB},
}
"""Which actions can apply to which resource type (RocketMQ's ACL 2.0 table)."""


@dataclass(frozen=True, slots=True)
class Resource:
    """A resource pattern of a policy entry, or (always literal) the resource a request touches."""

    type: ResourceType
    name: str = ""
    """The exact name (literal), the prefix without its ``*`` (prefixed), empty (any)."""
    pattern: ResourcePattern = ResourcePattern.LITERAL

    @classmethod
    def topic(cls, name: str) -> Resource:
        return cls(ResourceType.TOPIC, name)

    @classmethod
    def group(cls, name: str) -> Resource:
        return cls(ResourceType.GROUP, name)

    @classmethod
    def cluster(cls, name: str) -> Resource:
        return cls(ResourceType.CLUSTER, name)

    @classmethod
    def parse(cls, key: str) -> Resource:
        """Read ``*``, ``Type:*``, ``Type:prefix*`` or ``Type:name``; ValueError names the rule."""
        if not isinstance(key, str):
            raise ValueError(f"a resource is a string like 'Topic:orders', not {type(key).__name__}")
        if key == WILDCARD:
            return cls(ResourceType.ANY, "", ResourcePattern.ANY)
        type_name, colon, name = key.partition(":")
        known = ", ".join(t.value for t in ResourceType if t is not ResourceType.ANY)
        if not colon:
            raise ValueError(f"resource {key!r} is not '*' or '<type>:<name>' (types: {known})")
        try:
            resource_type = ResourceType(type_name)
        except ValueError:
            raise ValueError(f"resource {key!r}: unknown type {type_name!r} (one of {known})") from None
        if resource_type is ResourceType.ANY:
            raise ValueError(f"resource {key!r}: '*' stands alone, without a name")
        if name == WILDCARD:
            return cls(resource_type, "", ResourcePattern.ANY)
        pattern = ResourcePattern.LITERAL
        if name.endswith(WILDCARD):
            name, pattern = name[:-1], ResourcePattern.PREFIXED
        if WILDCARD in name:
            raise ValueError(f"resource {key!r}: '*' may only end a name (a prefix), not sit inside it")
        if not name:
            raise ValueError(f"resource {key!r}: the name is empty (use '{type_name}:*' for all)")
        _validate_resource_name(key, resource_type, name)
        return cls(resource_type, name, pattern)

    @property
    def key(self) -> str:
        """The resource as written: ``Topic:orders``, ``Topic:order-*``, ``Group:*``, ``*``."""
        if self.type is ResourceType.ANY:
            return WILDCARD
        if self.pattern is ResourcePattern.ANY:
            return f"{self.type.value}:{WILDCARD}"
        suffix = WILDCARD if self.pattern is ResourcePattern.PREFIXED else ""
        return f"{self.type.value}:{self.name}{suffix}"

    def covers(self, resource: Resource) -> bool:
        """Whether this pattern covers ``resource`` (a literal resource of a request)."""
        if self.type is ResourceType.ANY:
            return True
        if self.type is not resource.type:
            return False
        if self.pattern is ResourcePattern.LITERAL:
            return resource.name == self.name
        if self.pattern is ResourcePattern.PREFIXED:
            return resource.name.startswith(self.name)
        return True

    def __str__(self) -> str:
        return self.key


def _validate_resource_name(key: str, resource_type: ResourceType, name: str) -> None:
    try:
        if resource_type is ResourceType.TOPIC:
            validate_topic_name(name)
        elif resource_type is ResourceType.GROUP:
            validate_group_name(name)
        elif not _CLUSTER_NAME_RE.fullmatch(name):
            raise ValueError(f"resource {key!r}: cluster name breaks the rule {CLUSTER_NAME_RULE}")
    except InvalidNameError as exc:
        raise ValueError(f"resource {key!r}: {exc}") from None


def _parse_resource(value: Any) -> Resource:
    return value if isinstance(value, Resource) else Resource.parse(value)


def _parse_network(value: Any) -> IpNetwork:
    if isinstance(value, ipaddress.IPv4Network | ipaddress.IPv6Network):
        return value
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"source IP {value!r} is not an address or CIDR block like '10.0.0.0/8'")
    try:
        return ipaddress.ip_network(value.strip(), strict=True)
    except ValueError as exc:
        raise ValueError(f"source IP {value!r} is not an address or CIDR block: {exc}") from None


ResourceField = Annotated[Resource, BeforeValidator(_parse_resource), PlainSerializer(str, return_type=str)]
NetworkField = Annotated[IpNetwork, BeforeValidator(_parse_network), PlainSerializer(str, return_type=str)]


class _Document(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, use_enum_values=False)


class User(_Document):
    """A user: its username is the access key, its password the secret signatures are keyed by."""

    username: str
    password: str = Field("", repr=False, validate_default=True)
    """The secret; never logged (``repr`` hides it) and never sent by a client (it signs with it).
    Missing is refused like empty, naming the rule rather than pydantic's "Field required"."""
    user_type: UserType = Field(UserType.NORMAL, alias="userType")
    user_status: UserStatus = Field(UserStatus.ENABLE, alias="userStatus")

    @field_validator("username")
    @classmethod
    def _check_username(cls, value: str) -> str:
        if not _USERNAME_RE.fullmatch(value):
            raise ValueError(f"username {value!r} breaks the rule {USERNAME_RULE}")
        return value

    @field_validator("password", mode="before")
    @classmethod
    def _check_password(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and not value.strip()):
            raise ValueError("a user needs a non-empty secret (password): requests are signed with it")
        if not isinstance(value, str):
            raise ValueError(f"the secret (password) is a string, not {type(value).__name__}")
        return value

    @property
    def is_super(self) -> bool:
        return self.user_type is UserType.SUPER

    @property
    def enabled(self) -> bool:
        return self.user_status is UserStatus.ENABLE

    @property
    def subject(self) -> str:
        return f"{SUBJECT_PREFIX}{self.username}"


class PolicyEntry(_Document):
    """One rule: these actions on this resource, from these source IPs, are allowed or denied."""

    resource: ResourceField
    actions: tuple[Action, ...]
    source_ips: tuple[NetworkField, ...] = Field((), alias="sourceIps")
    """Empty: from anywhere; else the request's source address must fall in one of them."""
    decision: Decision

    @field_validator("actions", mode="before")
    @classmethod
    def _check_action_names(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = [value]
        known = ", ".join(a.value for a in Action)
        for item in value if isinstance(value, list | tuple) else ():
            if not isinstance(item, Action) and item not in Action._value2member_map_:
                raise ValueError(f"unknown action {item!r} (one of {known})")
        return value

    @model_validator(mode="after")
    def _check_actions(self) -> PolicyEntry:
        if not self.actions:
            raise ValueError(f"entry for {self.resource}: actions is empty (name at least one)")
        seen: set[Action] = set()
        for action in self.actions:
            if action in seen:
                raise ValueError(f"entry for {self.resource}: action {action.value} is listed twice")
            seen.add(action)
            if action not in _ACTIONS_BY_TYPE[self.resource.type]:
                raise ValueError(
                    f"entry for {self.resource}: action {action.value} does not apply to "
                    f"{self.resource.type.value} resources (Pub applies to topics, Sub to topics and groups)"
                )
        return self

    def grants(self, action: Action) -> bool:
        return action in self.actions or Action.ALL in self.actions


class Policy(_Document):
    policy_type: PolicyType = Field(PolicyType.CUSTOM, alias="policyType")
    entries: tuple[PolicyEntry, ...]

    @field_validator("entries")
    @classmethod
    def _check_entries(cls, value: tuple[PolicyEntry, ...]) -> tuple[PolicyEntry, ...]:
        if not value:
            raise ValueError("a policy needs at least one entry")
        return value


class Acl(_Document):
    """What one subject (``User:<name>``) may do."""

    subject: str
    policies: tuple[Policy, ...]

    @field_validator("subject")
    @classmethod
    def _check_subject(cls, value: str) -> str:
        username = value.removeprefix(SUBJECT_PREFIX)
        if not value.startswith(SUBJECT_PREFIX) or not _USERNAME_RE.fullmatch(username):
            raise ValueError(f"subject {value!r} is not 'User:<username>' (username rule {USERNAME_RULE})")
        return value

    @model_validator(mode="after")
    def _check_overlaps(self) -> Acl:
        if not self.policies:
            raise ValueError(f"ACL of {self.subject}: policies is empty")
        first_seen: dict[tuple[PolicyType, Resource], tuple[str, Decision]] = {}
        for p, policy in enumerate(self.policies):
            for e, entry in enumerate(policy.entries):
                where = f"policies[{p}].entries[{e}]"
                key = (policy.policy_type, entry.resource)
                if key in first_seen:
                    earlier, decision = first_seen[key]
                    conflict = (
                        f", one {decision.value}, one {entry.decision.value}: which wins would depend on "
                        "their order"
                        if decision is not entry.decision
                        else ""
                    )
                    raise ValueError(
                        f"ACL of {self.subject}: overlapping rules: {where} and {earlier} both "
                        f"name {entry.resource} in {policy.policy_type.value} policies{conflict} "
                        "(one entry per resource: merge their actions and source IPs)"
                    )
                first_seen[key] = (where, entry.decision)
        return self

    @property
    def username(self) -> str:
        return self.subject.removeprefix(SUBJECT_PREFIX)

    def entries_of(self, policy_type: PolicyType) -> tuple[PolicyEntry, ...]:
        return self._entries_by_type[policy_type]

    @cached_property
    def _entries_by_type(self) -> dict[PolicyType, tuple[PolicyEntry, ...]]:
        """Flattened once per (immutable) ACL: every decision walks them."""
        return {
            t: tuple(e for p in self.policies if p.policy_type is t for e in p.entries) for t in PolicyType
        }


def describe_errors(exc: ValidationError) -> list[str]:
    """One line per problem of a refused document: ``field.path: what rule it broke``.

    Pydantic prefixes messages of validators with ``Value error, ``; the field path and the rule
    are what an operator acts on, so only those are kept.
    """
    lines = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "(document)"
        message = str(error["msg"]).removeprefix("Value error, ")
        lines.append(f"{where}: {message}")
    return lines
