"""Rules for the names of topics and consumer/producer groups.

The rules are RocketMQ's: a name is made of ASCII letters, digits, ``_``, ``-``, ``%`` and ``|``
(``%`` and ``|`` appear in system names such as ``%RETRY%group`` and ``%DLQ%group``); a topic
name has at most 127 characters, a group name at most 255. ``@`` is excluded, which is what lets
consumer offsets be keyed by ``topic@group`` without ambiguity.
"""

from __future__ import annotations

import re

from orbitmq.common.errors import OrbitError

NAME_CHARSET = "[%|a-zA-Z0-9_-]"
NAME_RULE = f"^{NAME_CHARSET}+$"
"""The pattern every topic and group name must match (shown in error messages)."""
TOPIC_NAME_MAX_LENGTH = 127
GROUP_NAME_MAX_LENGTH = 255

_NAME_RE = re.compile(f"{NAME_CHARSET}+")
_BAD_CHAR_RE = re.compile(r"[^%|a-zA-Z0-9_-]")
_SHOWN_NAME_CHARS = 80


class InvalidNameError(OrbitError, ValueError):
    """A topic or group name breaks the naming rule; the message names the value and the rule."""

    def __init__(self, kind: str, name: object, problem: str, rule: str) -> None:
        self.kind = kind
        self.name = name
        self.problem = problem
        self.rule = rule
        super().__init__(f"invalid {kind} name {_shown(name)}: {problem} (rule: {rule})")


def validate_topic_name(name: str) -> str:
    """Return ``name`` unchanged if it is a valid topic name, else raise :class:`InvalidNameError`."""
    return _validate("topic", name, TOPIC_NAME_MAX_LENGTH)


def validate_group_name(name: str) -> str:
    """Return ``name`` unchanged if it is a valid group name, else raise :class:`InvalidNameError`."""
    return _validate("group", name, GROUP_NAME_MAX_LENGTH)


def _validate(kind: str, name: str, max_length: int) -> str:
    rule = f"{NAME_RULE}, at most {max_length} characters"
    if not isinstance(name, str):
        raise InvalidNameError(kind, name, f"must be a string, not {type(name).__name__}", rule)
    if not name:
        raise InvalidNameError(kind, name, "must not be empty", rule)
    if len(name) > max_length:
        raise InvalidNameError(kind, name, f"{len(name)} characters is longer than {max_length}", rule)
    if not _NAME_RE.fullmatch(name):
        bad = sorted(set(_BAD_CHAR_RE.findall(name)))
        shown = ", ".join(repr(c) for c in bad)
        raise InvalidNameError(kind, name, f"contains characters outside {NAME_CHARSET}: {shown}", rule)
    return name


def _shown(name: object) -> str:
    """``repr`` of the name, shortened when it is long enough to drown the message."""
    text = repr(name)
    if len(text) <= _SHOWN_NAME_CHARS:
        return text
    return f"{text[:_SHOWN_NAME_CHARS]}... ({len(str(name))} characters)"
