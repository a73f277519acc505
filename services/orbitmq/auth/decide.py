"""Whether a user may do an action on a resource: ACL 2.0's precedence, and a per-connection cache.

Precedence (RocketMQ 5.3, ``AclAuthorizationHandler``), applied to the entries that match the
request (resource covered, action granted, source IP inside one of the entry's blocks if it
names any):

1. a disabled user is refused everything; a super user is allowed everything else;
2. custom entries are consulted; only when none matches, the default ones;
3. of the matching entries, the most specific resource decides: a typed resource before ``*``,
   then an exact name before a prefix before ``Type:*``, then the longer prefix;
4. among equally specific entries, ``Deny`` wins over ``Allow``;
5. nothing matches: denied (with authorization on, what is not allowed is denied).

So ``Topic:* Allow`` with ``Topic:secret Deny`` denies ``secret`` and allows the rest, and
``Topic:* Deny`` with ``Topic:orders Allow`` allows ``orders`` only: a specific rule is an
exception to a broad one, whichever way it goes.

A request may need several permissions (a pull needs ``Sub`` on the topic and on the group):
:func:`authorize` checks each and answers the first refusal.

:class:`DecisionCache` keeps verdicts of one connection (one user, one source address), keyed by
(username, actions, resource) and dropped whole when the policy version moves, so a change of
users or ACLs takes effect on the next request.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from orbitmq.auth.model import (
    Acl,
    Action,
    Decision,
    IpNetwork,
    PolicyEntry,
    PolicyType,
    Resource,
    ResourceType,
    User,
)

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
DEFAULT_CACHE_ENTRIES = 4096
"""Verdicts one connection keeps: a client touches a handful of topics and groups; the bound only
stops a client that walks through many names from growing a server's memory."""


@dataclass(frozen=True, slots=True)
class Need:
    """A permission a request needs: any one of ``actions`` on ``resource`` (a literal resource).

    Several actions are alternatives, as in RocketMQ (a route query is allowed with ``Pub``,
    ``Sub`` or ``Get`` on the topic).
    """

    actions: tuple[Action, ...]
    resource: Resource

    def __str__(self) -> str:
        return f"{'|'.join(a.value for a in self.actions)} on {self.resource}"


class Why(enum.Enum):
    """Which rule made a verdict."""

    DISABLED = "the user is disabled"
    SUPER = "the user is a super user"
    NO_ACL = "the user has no ACL"
    ENTRY = "an entry decided"
    NO_MATCH = "no entry matched"
    NOTHING_NEEDED = "nothing was needed"


@dataclass(frozen=True, slots=True)
class Verdict:
    """A decision and why; the text of :attr:`reason` is made only when someone reads it (a
    refusal's log line), not on every decision."""

    decision: Decision
    why: Why
    username: str = ""
    need: Need | None = None
    entry: PolicyEntry | None = None
    policy_type: PolicyType | None = None
    source_ip: str | IpAddress | None = None

    @property
    def allowed(self) -> bool:
        return self.decision is Decision.ALLOW

    @property
    def reason(self) -> str:
        if self.why is Why.ENTRY and self.entry is not None and self.policy_type is not None:
            kind, entry = self.policy_type.value.lower(), self.entry
            deciding = f"{kind} entry {entry.resource} {entry.decision.value}"
            return f"{deciding} decides {self.need} for {self.username}"
        if self.why is Why.NO_MATCH:
            return f"no entry of User:{self.username} allows {self.need} from {self.source_ip}"
        if self.why is Why.NOTHING_NEEDED:
            return self.why.value
        return f"user {self.username}: {self.why.value}"


def decide(user: User, acl: Acl | None, need: Need, source_ip: str | IpAddress | None) -> Verdict:
    """Decide one need for ``user`` with its ``acl`` (None: it has none) from ``source_ip``.

    ``source_ip``: the peer's address (``"10.1.2.3"``, an address object, or None when unknown,
    e.g. a Unix socket); entries that name source IPs never match an unknown or unparsable one.
    """
    if not user.enabled:
        return Verdict(Decision.DENY, Why.DISABLED, user.username, need)
    if user.is_super:
        return Verdict(Decision.ALLOW, Why.SUPER, user.username, need)
    if acl is None:
        return Verdict(Decision.DENY, Why.NO_ACL, user.username, need)
    address = _address(source_ip) if source_ip is not None else None
    for policy_type in (PolicyType.CUSTOM, PolicyType.DEFAULT):
        matching = [e for e in acl.entries_of(policy_type) if _matches(e, need, address)]
        if matching:
            entry = max(matching, key=_precedence)
            return Verdict(entry.decision, Why.ENTRY, user.username, need, entry, policy_type)
    return Verdict(Decision.DENY, Why.NO_MATCH, user.username, need, source_ip=source_ip)


def authorize(
    user: User, acl: Acl | None, needs: Iterable[Need], source_ip: str | IpAddress | None
) -> Verdict:
    """All of ``needs`` allowed: the last allowing verdict; else the first refusal.

    A disabled user is refused even a call that needs nothing (a producer's heartbeat).
    """
    verdict = _nothing_needed(user)
    for need in needs:
        verdict = decide(user, acl, need, source_ip)
        if not verdict.allowed:
            return verdict
    return verdict


def _nothing_needed(user: User) -> Verdict:
    if not user.enabled:
        return Verdict(Decision.DENY, Why.DISABLED, user.username)
    return Verdict(Decision.ALLOW, Why.NOTHING_NEEDED, user.username)


def _matches(entry: PolicyEntry, need: Need, address: IpAddress | None) -> bool:
    if not entry.resource.covers(need.resource):
        return False
    if not any(entry.grants(action) for action in need.actions):
        return False
    if not entry.source_ips:
        return True
    return address is not None and _in_any(address, entry.source_ips)


def _in_any(address: IpAddress, networks: tuple[IpNetwork, ...]) -> bool:
    return any(address.version == n.version and address in n for n in networks)


def _precedence(entry: PolicyEntry) -> tuple[bool, int, int, bool]:
    resource = entry.resource
    return (
        resource.type is not ResourceType.ANY,
        resource.pattern,
        len(resource.name),
        entry.decision is Decision.DENY,
    )


@lru_cache(maxsize=1024)
def _address(source_ip: str | IpAddress) -> IpAddress | None:
    if not isinstance(source_ip, str):
        return source_ip
    try:
        return ipaddress.ip_address(source_ip)
    except ValueError:
        return None


class DecisionCache:
    """Verdicts of one connection, valid while the policy version they were made under holds.

    A connection has one user and one source address, so neither is part of the key beyond the
    username (kept so a connection that changes credentials cannot reuse another's verdicts).
    The owner bumps ``policy_version`` whenever users or ACLs change (any change: a stored
    version number of the user and ACL tables); the next lookup then starts from empty.
    """

    def __init__(self, max_entries: int = DEFAULT_CACHE_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be at least 1, not {max_entries}")
        self._max_entries = max_entries
        self._version: int | None = None
        self._verdicts: dict[tuple[str, Need], Verdict] = {}
        self.hits = 0
        self.misses = 0

    def decide(
        self,
        policy_version: int,
        user: User,
        acl: Acl | None,
        need: Need,
        source_ip: str | IpAddress | None,
    ) -> Verdict:
        """:func:`decide`, answered from the cache when the same need was decided under this version."""
        if policy_version != self._version:
            self._verdicts.clear()
            self._version = policy_version
        key = (user.username, need)
        verdict = self._verdicts.get(key)
        if verdict is not None:
            self.hits += 1
            return verdict
        self.misses += 1
        verdict = decide(user, acl, need, source_ip)
        if len(self._verdicts) >= self._max_entries:
            # Oldest first (dicts keep insertion order): a client's working set is re-added at once.
            del self._verdicts[next(iter(self._verdicts))]
        self._verdicts[key] = verdict
        return verdict

    def authorize(
        self,
        policy_version: int,
        user: User,
        acl: Acl | None,
        needs: Iterable[Need],
        source_ip: str | IpAddress | None,
    ) -> Verdict:
        """:func:`authorize` through the cache."""
        verdict = _nothing_needed(user)
        for need in needs:
            verdict = self.decide(policy_version, user, acl, need, source_ip)
            if not verdict.allowed:
                return verdict
        return verdict

    def __len__(self) -> int:
        return len(self._verdicts)
