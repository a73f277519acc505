"""``reference/settings.md``: the settings of each server process, from their pydantic models.

Each process loads its settings with :func:`orbitmq.common.settings.load_settings`: a YAML/JSON
file, then ``<PREFIX><FIELD>`` environment variables, then command-line flags, later sources
winning field by field. The page lists every field of each model with its type, default,
constraints (the ``Field`` bounds pydantic enforces), the environment variable the loader reads,
the flag of the process's command that sets it (a click option of the same name) and the
field's docstring, which is where the code documents it (attribute docstrings, read from the
source with :mod:`ast`, since pydantic keeps them only when a model asks it to); a field without
one is described by its flag's help, when it has a flag.
"""

from __future__ import annotations

import ast
import enum
import inspect
import itertools
import textwrap
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import annotated_types
import click
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from orbitmq.docsgen.markdown import Anchors, anchor_tag, code, page_header, prose, slug, table, value


@dataclass(frozen=True)
class Role:
    """One server process: its settings model, environment prefix and command."""

    title: str
    model: Callable[[], type[BaseModel]]
    prefix: Callable[[], str]
    command: str
    """The ``orbitmq`` subcommand that runs it (its options named like fields set them)."""
    source: str


def _broker() -> type[BaseModel]:
    from orbitmq.broker.settings import BrokerSettings

    return BrokerSettings


def _namesrv() -> type[BaseModel]:
    from orbitmq.nameserver.settings import NameServerSettings

    return NameServerSettings


def _proxy() -> type[BaseModel]:
    from orbitmq.proxy.settings import ProxySettings

    return ProxySettings


def _sidecar() -> type[BaseModel]:
    from orbitmq.sidecar.settings import SidecarSettings

    return SidecarSettings


def _prefix(module: str) -> Callable[[], str]:
    def read() -> str:
        import importlib

        return str(importlib.import_module(module).ENV_PREFIX)

    return read


ROLES: tuple[Role, ...] = (
    Role(
        "Broker", _broker, _prefix("orbitmq.broker.settings"), "broker", "services/orbitmq/broker/settings.py"
    ),
    Role(
        "Name server",
        _namesrv,
        _prefix("orbitmq.nameserver.settings"),
        "namesrv",
        "services/orbitmq/nameserver/settings.py",
    ),
    Role("Proxy", _proxy, _prefix("orbitmq.proxy.settings"), "proxy", "services/orbitmq/proxy/settings.py"),
    Role(
        "Sidecar",
        _sidecar,
        _prefix("orbitmq.sidecar.settings"),
        "sidecar",
        "services/orbitmq/sidecar/settings.py",
    ),
)

_BOUNDS = (
    (annotated_types.Ge, "ge", "≥"),
    (annotated_types.Gt, "gt", ">"),
    (annotated_types.Le, "le", "≤"),
    (annotated_types.Lt, "lt", "<"),
    (annotated_types.MinLen, "min_length", "at least {} items"),
    (annotated_types.MaxLen, "max_length", "at most {} items"),
)
_UNITS = (("_bytes", 1024**3, "GiB"), ("_bytes", 1024**2, "MiB"), ("_bytes", 1024, "KiB"))


def render(roles: tuple[Role, ...] = ROLES, main: click.Group | None = None) -> str:
    """The page for ``roles``, their flags read from ``main`` (default: the ``orbitmq`` group)."""
    if main is None:
        from orbitmq.cli.main import main

    anchors = Anchors()
    lines = page_header(
        "Settings reference",
        "the settings models of the broker, name server, proxy and sidecar "
        "(`services/orbitmq/*/settings.py`)",
        "Each server process reads its settings from a YAML/JSON file (`--config`, field names as "
        "below), then from environment variables (the prefix of the process and the field name in "
        "upper case), then from its command-line flags; a later source wins field by field. A bad "
        "value stops the process at start with the field, the value, the rule and where it came "
        "from. Anchor of a setting: its environment variable without `ORBITMQ_`, lower case, `_` "
        "as `-` (`#broker-flush-mode` for `ORBITMQ_BROKER_FLUSH_MODE`).",
    )
    for role in roles:
        lines += _role_section(role, main, anchors)
    return "\n".join(lines).rstrip() + "\n"


def _role_section(role: Role, main: click.Group, anchors: Anchors) -> list[str]:
    model, prefix = role.model(), role.prefix()
    command = main.commands[role.command]
    flags = {p.name: p for p in command.params if isinstance(p, click.Option)}
    section = anchors.add(slug(prefix.removeprefix("ORBITMQ_")) + "-settings")
    lines = [
        f"## {role.title} {{#{section}}}",
        "",
        f"`orbitmq {role.command}` ([CLI](cli.md#orbitmq-{role.command})); model "
        f"`{model.__name__}` in `{role.source}`; environment prefix `{prefix}`.",
        "",
    ]
    doc = inspect.getdoc(model)
    if doc:
        lines += [prose(doc), ""]
    rows = []
    for name, field in _ordered_fields(model):
        env = f"{prefix}{name.upper()}"
        anchor = anchors.add(slug(env.removeprefix("ORBITMQ_")))
        flag = flags.get(name)
        setting = anchor_tag(anchor) + code(name) + "<br>" + code("$" + env)
        if flag is not None:
            setting += f"<br>[{code(flag.opts[0])}](cli.md#orbitmq-{role.command}--{slug(flag.opts[0])})"
        kind = ", ".join(filter(None, (_type_name(field.annotation), _constraints(field))))
        rows.append(
            (
                setting,
                kind,
                _default(name, field),
                prose(field.description or _docstrings(model).get(name) or (flag.help if flag else "")),
            )
        )
    lines += [*table(("Setting / environment / flag", "Type", "Default", "Description"), rows), ""]
    return lines


def _ordered_fields(model: type[BaseModel]) -> list[tuple[str, FieldInfo]]:
    """The model's own fields first (in source order), then those of its mixins (TLS, auth)."""
    own = [name for name in model.model_fields if name in inspect.get_annotations(model)]
    rest = [name for name in model.model_fields if name not in own]
    return [(name, model.model_fields[name]) for name in (*own, *rest)]


@cache
def _docstrings(model: type[BaseModel]) -> dict[str, str]:
    """Field name -> the string literal right after its annotated assignment, over the MRO
    (the most derived class wins)."""
    out: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        body = tree.body[0].body  # type: ignore[attr-defined]
        for statement, following in itertools.pairwise(body):
            if (
                isinstance(statement, ast.AnnAssign)
                and isinstance(statement.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                out[statement.target.id] = inspect.cleandoc(following.value.value)
    return out


def _type_name(annotation: Any) -> str:
    """A type as a reader needs it: ``integer``, ``text or unset``, ``one of A, B``."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        parts = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        optional = len(parts) < len(typing.get_args(annotation))
        text = " or ".join(_type_name(part) for part in parts)
        return f"{text} or unset" if optional else text
    if origin is typing.Literal:
        return "one of " + ", ".join(code(str(arg)) for arg in typing.get_args(annotation))
    if origin in (list, tuple, set, frozenset):
        (item, *_rest) = typing.get_args(annotation) or (Any,)
        return f"list of {_type_name(item)}"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(code(str(member.value)) for member in annotation)
    names = {bool: "boolean", int: "integer", float: "number", str: "text", Path: "path"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(name: str, field: FieldInfo) -> str:
    if field.default_factory is not None:
        factory = field.default_factory
        return f"computed: {code(getattr(factory, '__name__', 'factory') + '()')}"
    default = field.default
    if default is PydanticUndefined:
        return "**required**"
    if default is None:
        return "unset"
    if isinstance(default, enum.Enum):
        return code(str(default.value))
    if isinstance(default, Path):
        return value(str(default))
    shown = value(default)
    if isinstance(default, int) and not isinstance(default, bool):
        shown += _human(name, default)
    return shown


def _human(name: str, number: int) -> str:
    """`` (1 GiB)`` for a byte count, `` (30 s)`` for milliseconds: what the digits mean."""
    for suffix, size, unit in _UNITS:
        if name.endswith(suffix) and number >= size and number % size == 0:
            return f" ({number // size} {unit})"
    if name.endswith("_ms") and number >= 1000:
        for size, unit in ((86_400_000, "d"), (3_600_000, "h"), (60_000, "min"), (1000, "s")):
            if number % size == 0:
                return f" ({number // size} {unit})"
    return ""


def _constraints(field: FieldInfo) -> str:
    rules = []
    for item in field.metadata:
        for kind, attribute, symbol in _BOUNDS:
            if isinstance(item, kind):
                bound = getattr(item, attribute)
                rules.append(symbol.format(bound) if "{}" in symbol else f"{symbol} {bound}")
    return ", ".join(rules)
