"""``reference/errors.md``: every wire error reason, what it means and what to do.

Sources, all in the code: the ``ErrorReason`` enum and its comments in
``protos/orbitmq/v1/broker.proto``; the gRPC status each reason is answered with and whether the
failure is retriable (:class:`orbitmq.common.rpc.RpcFailure`, and its subclasses that fix a
reason, such as :class:`~orbitmq.common.guard.AuthenticationFailure`); what the producer does
with it (:mod:`orbitmq.client.retry`); the RocketMQ 5 code the proxy answers with
(:mod:`orbitmq.proxy.codes`); the modules that raise it (an :mod:`ast` scan for
``ErrorReason.<NAME>``); and the cause and action table
(:mod:`orbitmq.common.error_reasons`).
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from orbitmq.docsgen.markdown import Anchors, code, page_header, prose, slug, table

PROTO = Path("protos/orbitmq/v1/broker.proto")
SERVICES = Path("services/orbitmq")
MAPPING_MODULES = frozenset({"common/rpc.py", "common/error_reasons.py", "proxy/codes.py", "client/retry.py"})
"""Modules that only map or describe reasons: not where a reason is raised."""

_VALUE = re.compile(r"^\s*([A-Z][A-Z0-9_]*)\s*=\s*(\d+);")


def render(root: Path = Path()) -> str:
    import grpc

    from orbitmq.client.retry import MOVING_REASONS, RETRIABLE_REASONS
    from orbitmq.common.error_reasons import GUIDES
    from orbitmq.common.rpc import RpcFailure
    from orbitmq.proxy.codes import REASON_CODES
    from orbitmq.rocketmq_v2 import definition_pb2 as v2
    from orbitmq.v1.broker_pb2 import ErrorReason

    comments = proto_comments((root / PROTO).read_text())
    raised = raise_sites(root / SERVICES)
    fixed = fixed_reason_classes(root / SERVICES)
    wrapped = wrapped_exceptions(root / SERVICES)
    missing = sorted(set(ErrorReason.values()) - set(GUIDES))
    if missing:
        raise ValueError(
            f"no guide in orbitmq.common.error_reasons for {[ErrorReason.Name(m) for m in missing]}"
        )
    anchors = Anchors()
    lines = page_header(
        "Error reference",
        "`protos/orbitmq/v1/broker.proto` (`enum ErrorReason`), `orbitmq.common.rpc`, "
        "`orbitmq.client.retry`, `orbitmq.proxy.codes` and `orbitmq.common.error_reasons`",
        "A failed orbitmq call carries a reason: a gRPC status whose details hold a "
        "`google.rpc.ErrorInfo` with domain `orbitmq.io` and the reason's name, and a message that "
        "names the bad value and the rule it broke. The CLI prints the reason and the message; the "
        "client library raises `RpcFailure` (`SendFailed` for a send that used up its attempts), "
        "whose `reason` is the value below and whose `retriable` says whether the same call may "
        "succeed later. The proxy answers the official RocketMQ 5 clients with the v2 code listed. "
        "Anchor of a reason: its name in lower case, `_` as `-` (`#disk-full`).",
    )
    summary = []
    sections: list[str] = []
    for name, number in ErrorReason.items():
        anchor = anchors.add(slug(name))
        classes = fixed.get(name, [])
        # a reason only ever raised through its own failure class is answered with that class's code
        class_files = {module.removeprefix("orbitmq.").replace(".", "/") + ".py" for module, _ in classes}
        plain = not classes or bool(set(raised.get(name, ())) - class_files)
        failures = [RpcFailure(number, "")] if plain else []
        for module, cls_name in classes:
            cls = getattr(importlib.import_module(module), cls_name)
            failures.append(cls(""))
        status_codes = sorted({f.code.name for f in failures})
        retriable = {f.retriable for f in failures}
        v2_code = v2.Code.Name(REASON_CODES.get(number, v2.INTERNAL_SERVER_ERROR))
        if number == ErrorReason.ERROR_REASON_UNSPECIFIED:
            producer = "retried when the gRPC status is UNAVAILABLE or DEADLINE_EXCEEDED, else fails"
            status_codes = ["any"]
            retriable = {False}
        elif number in RETRIABLE_REASONS or {f.code for f in failures} & {grpc.StatusCode.UNAVAILABLE}:
            producer = "retried on a fresh route within `send_timeout_ms`"
        elif number in MOVING_REASONS:
            producer = "tried once on each other broker group, then fails"
        else:
            producer = "fails at once"
        summary.append(
            (
                f"[{code(name)}](#{anchor})",
                str(number),
                ", ".join(code(c) for c in status_codes),
                _yes(retriable),
            )
        )
        guide = GUIDES[number]
        facts = [
            ("Number", str(number)),
            ("gRPC status", ", ".join(code(c) for c in status_codes)),
            ("Retriable (`RpcFailure.retriable`)", _yes(retriable)),
            ("Producer", producer),
            ("RocketMQ 5 code (proxy)", code(v2_code)),
        ]
        if classes:
            names = (["RpcFailure"] if plain else []) + [cls_name for _, cls_name in classes]
            facts.append(("Raised as", ", ".join(code(cls_name) for cls_name in names)))
        if name in wrapped:
            facts.append(("Also from", ", ".join(code(cls_name) for cls_name in wrapped[name])))
        if raised.get(name):
            facts.append(("Raised in", ", ".join(code(site) for site in raised[name])))
        sections += [f"### {code(name)} {{#{anchor}}}", ""]
        if comments.get(name):
            sections += [prose(comments[name]), ""]
        sections += [f"**Cause.** {prose(guide.cause)}", "", f"**What to do.** {prose(guide.action)}", ""]
        sections += [*table(("Property", "Value"), facts), ""]
    lines += ["## Summary", ""]
    lines += [*table(("Reason", "Number", "gRPC status", "Retriable"), summary), ""]
    lines += ["## Reasons", "", *sections]
    return "\n".join(lines).rstrip() + "\n"


def _yes(values: set[bool]) -> str:
    return "varies" if len(values) > 1 else "yes" if values == {True} else "no"


def proto_comments(text: str) -> dict[str, str]:
    """Enum value name -> the ``//`` comment lines right above it, inside ``enum ErrorReason``."""
    body = text.split("enum ErrorReason {", 1)[1].split("}", 1)[0]
    out: dict[str, str] = {}
    pending: list[str] = []
    for line in body.splitlines():
        stripped = line.strip()
        if stripped.startswith("//"):
            pending.append(stripped.removeprefix("//").strip())
            continue
        match = _VALUE.match(line)
        if match and pending:
            out[match[1]] = " ".join(pending)
        pending = []
    return out


def raise_sites(services: Path) -> dict[str, list[str]]:
    """Reason name -> the modules (``broker/servicer.py``) that use ``ErrorReason.<NAME>``."""
    out: dict[str, set[str]] = {}
    for path in sorted(services.rglob("*.py")):
        relative = path.relative_to(services).as_posix()
        if relative in MAPPING_MODULES or "_pb2" in relative or relative.startswith("docsgen/"):
            continue
        text = path.read_text()
        if "ErrorReason" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "ErrorReason"
                and node.attr.isupper()
            ):
                out.setdefault(node.attr, set()).add(relative)
    return {name: sorted(sites) for name, sites in out.items()}


def fixed_reason_classes(services: Path) -> dict[str, list[tuple[str, str]]]:
    """Reason name -> (module, class) of each ``RpcFailure`` subclass whose ``__init__`` passes
    that reason to ``super().__init__`` (a failure that always means one reason)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for path, tree in _trees(services):
        module = "orbitmq." + path.relative_to(services).with_suffix("").as_posix().replace("/", ".")
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            if "RpcFailure" not in {getattr(base, "id", None) for base in cls.bases}:
                continue
            for node in ast.walk(cls):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "__init__"
                    and node.args
                    and isinstance(node.args[0], ast.Attribute)
                    and getattr(node.args[0].value, "id", None) == "ErrorReason"
                ):
                    out.setdefault(node.args[0].attr, []).append((module, cls.name))
    return {name: sorted(classes) for name, classes in out.items()}


def wrapped_exceptions(services: Path) -> dict[str, list[str]]:
    """Exceptions a servicer's error mapping turns into a reason (:func:`orbitmq.common.rpc.
    _as_failure`): ``InvalidNameError`` -> INVALID_NAME, any other ``OrbitError`` that is also a
    ``ValueError`` -> INVALID_ARGUMENT."""
    out: dict[str, list[str]] = {"INVALID_NAME": ["InvalidNameError"], "INVALID_ARGUMENT": []}
    for _path, tree in _trees(services):
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
            bases = {getattr(base, "id", None) for base in cls.bases}
            if {"OrbitError", "ValueError"} <= bases and cls.name != "InvalidNameError":
                out["INVALID_ARGUMENT"].append(cls.name)
    out["INVALID_ARGUMENT"].sort()
    return out


def _trees(services: Path) -> list[tuple[Path, ast.Module]]:
    found = []
    for path in sorted(services.rglob("*.py")):
        if "_pb2" in path.name:
            continue
        text = path.read_text()
        if "Error" in text or "Failure" in text:
            found.append((path, ast.parse(text)))
    return found
