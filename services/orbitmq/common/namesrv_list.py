"""Name-server address lists: the one parser of every ``--namesrv`` / ``ORBITMQ_NAMESRV`` value.

RocketMQ separates name servers with ``;`` (``namesrvAddr=a:9876;b:9876``); people coming from
Kafka's ``bootstrap.servers`` write ``,``. Both are accepted, and mixing them is fine. Every
entry point (the CLI's ``--namesrv``, ``ORBITMQ_NAMESRV``, broker, proxy and sidecar settings,
the client library, the operator's overrides and the Spark jobs' options) calls
:func:`parse_namesrv_list`, so they agree on what a list is and refuse the same mistakes with
the same message.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from orbitmq.common.errors import OrbitError

NAMESRV_ENV = "ORBITMQ_NAMESRV"
SEPARATORS = ";,"
LIST_RULE = "'host:port' entries with a port from 1 to 65535, separated by ';' or ','"
"""The rule a name-server list follows, as error messages state it."""

_SPLIT_RE = re.compile(f"[{re.escape(SEPARATORS)}]")
_HOST_RE = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+)$")
"""A host name, an IPv4 address or a bracketed IPv6 address: no spaces, no stray ``:``."""


class NamesrvListError(OrbitError, ValueError):
    """A name-server list is malformed; the message names the bad entry, the whole value and
    the rule."""

    def __init__(self, value: object, problem: str) -> None:
        self.value = value
        self.problem = problem
        super().__init__(f"name server list {value!r}: {problem} (rule: {LIST_RULE})")


def parse_namesrv_list(value: str | Sequence[str] | None, *, required: bool = True) -> list[str]:
    """``"a:9876;b:9876"`` or ``"a:9876,b:9876"`` (or a list of addresses) → the addresses.

    Blank entries and surrounding spaces are skipped. ``required`` (the default) refuses an
    empty list; a broker passes False (no name server: it registers nowhere).

    Raises:
        NamesrvListError: an entry is not ``host:port`` (port 1..65535), or the list is empty
            and ``required``.
    """
    entries = _SPLIT_RE.split(value or "") if value is None or isinstance(value, str) else list(value)
    addresses = [entry.strip() for entry in entries if entry and entry.strip()]
    if required and not addresses:
        raise NamesrvListError(value, f"no address given; give at least one, or set {NAMESRV_ENV}")
    for address in addresses:
        _check_address(value, address)
    return addresses


def _check_address(value: object, address: str) -> None:
    host, colon, port = address.rpartition(":")
    if not colon or not host:
        raise NamesrvListError(value, f"entry {address!r} has no ':port'")
    if not _HOST_RE.match(host):
        raise NamesrvListError(value, f"entry {address!r} has a malformed host {host!r}")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise NamesrvListError(value, f"entry {address!r} has a port {port!r} outside 1..65535")
