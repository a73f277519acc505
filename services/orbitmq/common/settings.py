"""One loader for a process's settings: a YAML/JSON file, then environment, then flags.

Each later source overrides the earlier ones field by field; the merged values are validated
by the settings model, so an unknown or bad setting is refused at start-up with its name, its
value, the rule and where it came from.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from orbitmq.common.errors import OrbitError

T = TypeVar("T", bound=BaseModel)


class SettingsError(OrbitError):
    """Settings that cannot be used; the message says which, why, and from where."""


def load_settings(
    model: type[T],
    *,
    file: Path | None = None,
    env_prefix: str,
    flags: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> T:
    """Merge file < environment (``<env_prefix><FIELD>``) < flags, then validate with ``model``."""
    environ = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    origin: dict[str, str] = {}
    if file is not None:
        for key, value in _read_file(file).items():
            values[key] = value
            origin[key] = str(file)
    for field in model.model_fields:
        name = f"{env_prefix}{field.upper()}"
        if name in environ:
            values[field] = environ[name]
            origin[field] = f"environment {name}"
    for key, value in (flags or {}).items():
        if value is not None:
            values[key] = value
            origin[key] = f"flag --{key.replace('_', '-')}"
    try:
        return model(**values)
    except ValidationError as error:
        problems = []
        for issue in error.errors():
            field = ".".join(str(part) for part in issue["loc"]) or "settings"
            if issue["loc"]:
                source = origin.get(str(issue["loc"][0]), "default")
            else:  # a rule across fields: where the fields it names came from
                source = ", ".join(o for key, o in origin.items() if key in issue["msg"]) or "default"
            shown = f" (got {issue['input']!r})" if "input" in issue and field != "settings" else ""
            problems.append(f"{field}: {issue['msg']}{shown} [from {source}]")
        raise SettingsError("invalid settings: " + "; ".join(problems)) from None


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as error:
        raise SettingsError(f"cannot read settings file {path}: {error.strerror}") from None
    try:
        data = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as error:
        raise SettingsError(f"settings file {path} is not valid YAML/JSON: {error}") from None
    if not isinstance(data, dict):
        raise SettingsError(f"settings file {path} must hold a mapping of setting names to values")
    return {str(key).replace("-", "_"): value for key, value in data.items()}
