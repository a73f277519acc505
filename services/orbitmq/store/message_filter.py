"""Filters the store applies while reading a consume queue.

The store first asks :meth:`MessageFilter.matches_tags_code` with the unit's tag hash (no
commit-log read); only filters that need message properties (SQL92, later) also get
:meth:`MessageFilter.matches_properties` after the record is read.
"""

from __future__ import annotations

from typing import Protocol

from orbitmq.store.record import tags_code

SUBSCRIBE_ALL = "*"
TAG_SEPARATOR = "||"


class MessageFilter(Protocol):
    needs_properties: bool

    def matches_tags_code(self, code: int) -> bool: ...

    def matches_properties(self, properties: dict[str, str]) -> bool: ...


class TagFilter:
    """``*`` or ``TagA || TagB``: matches when the unit's tag hash is one of the tags' hashes."""

    needs_properties = False

    def __init__(self, expression: str | None) -> None:
        self.expression = (expression or SUBSCRIBE_ALL).strip() or SUBSCRIBE_ALL
        if self.expression == SUBSCRIBE_ALL:
            self.tags: frozenset[str] = frozenset()
        else:
            tags = [t.strip() for t in self.expression.split(TAG_SEPARATOR)]
            if any(not t for t in tags):
                raise ValueError(
                    f"tag expression {self.expression!r} must be '*' or tags joined by '||' with none empty"
                )
            self.tags = frozenset(tags)
        self.codes = frozenset(tags_code(t) for t in self.tags)

    @property
    def matches_all(self) -> bool:
        return not self.tags

    def matches_tags_code(self, code: int) -> bool:
        return not self.codes or code in self.codes

    def matches_tag(self, tag: str | None) -> bool:
        """The exact check a client makes after the hash check."""
        return not self.tags or tag in self.tags

    def matches_properties(self, properties: dict[str, str]) -> bool:
        return True
