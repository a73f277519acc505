"""``reference/cli.md``: every ``orbitmq`` command and option, read from the click group.

The page walks :data:`orbitmq.cli.main.main` as click itself would (its commands, their params),
so a new command or option, a changed default or help text shows up on the next
``scripts/gen-docs``. Options many commands share (the name server, TLS and credential options
of every client command) are described once under "Shared options"; each command still lists
them with its own anchor, so ``cli.md#orbitmq-produce--namesrv`` works like any other option.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import click

from orbitmq.docsgen.markdown import (
    Anchors,
    anchor_tag,
    code,
    page_header,
    portable,
    prose,
    slug,
    table,
    value,
)

_HEADER = ("Option / environment", "Type", "Default", "Description")
SHARED_MIN = 5
"""An option given by at least this many commands, with the same help in all, is described once."""


def render(main: click.Group | None = None) -> str:
    """The page for ``main`` (default: the ``orbitmq`` command group)."""
    if main is None:
        from orbitmq.cli.main import main
    root = click.Context(main, info_name="orbitmq")
    commands = list(_walk(main, root))
    settings = _settings_fields()
    rows = {
        path: [_option_row(param, settings.get(path)) for param in _options(cmd)] for path, cmd, _ in commands
    }
    shared = _shared(rows)
    anchors = Anchors()
    lines = page_header(
        "CLI reference",
        "the click commands of `services/orbitmq/cli/`",
        "Every `orbitmq` command, in the order `orbitmq --help` lists them, with its options: the "
        "type and allowed values, the default, the environment variable read when the option is "
        "not given (`$NAME` under the option), and the help text. Anchors: "
        "`#orbitmq-<command words>` for a command (`#orbitmq-admin-topic-create`) and "
        "`#orbitmq-<command words>--<option>` for one of its options (`#orbitmq-broker--listen`).",
    )
    lines += _shared_section(rows, shared, anchors)
    for path, cmd, ctx in commands:
        lines += _command_section(path, cmd, ctx, rows[path], shared, anchors)
    return "\n".join(lines).rstrip() + "\n"


def _shared(rows: dict[str, list[tuple[str, ...]]]) -> set[tuple[str, str]]:
    """(names, help) of the options described once: the same help wherever the name appears."""
    helps: dict[str, set[str]] = {}
    counts: Counter[str] = Counter()
    for cmd_rows in rows.values():
        for row in cmd_rows:
            helps.setdefault(row[0], set()).add(row[-1])
            counts[row[0]] += 1
    return {
        (names, next(iter(texts)))
        for names, texts in helps.items()
        if len(texts) == 1 and counts[names] >= SHARED_MIN
    }


def _walk(cmd: click.Command, ctx: click.Context) -> Iterator[tuple[str, click.Command, click.Context]]:
    yield ctx.command_path, cmd, ctx
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from _walk(sub, click.Context(sub, info_name=name, parent=ctx))


def _options(cmd: click.Command) -> list[click.Option]:
    return [p for p in cmd.params if isinstance(p, click.Option) and not p.hidden]


def _settings_fields() -> dict[str, tuple[str, frozenset[str]]]:
    """Command path of each server process -> (its environment prefix, its field names): an
    option named like a field sets that setting (the server commands pass their flags on)."""
    from orbitmq.docsgen.settings_page import ROLES

    return {
        f"orbitmq {role.command}": (role.prefix(), frozenset(role.model().model_fields)) for role in ROLES
    }


def _option_row(
    param: click.Option, settings: tuple[str, frozenset[str]] | None = None
) -> tuple[str, str, str, str, str]:
    """(names, type, default, environment, help) of one option, each rendered for a cell;
    ``settings`` (environment prefix, field names) links an option that sets a server setting."""
    names = " ".join(code(opt) for opt in (*param.opts, *param.secondary_opts))
    env = param.envvar if isinstance(param.envvar, str) else ", ".join(param.envvar or ())
    help_text = prose(param.help)
    if settings is not None and param.name in settings[1]:
        variable = f"{settings[0]}{param.name.upper()}"
        link = f"[{code(param.name)}](settings.md#{slug(variable.removeprefix('ORBITMQ_'))})"
        help_text = f"{help_text} Setting {link}.".strip()
        env = env or variable  # the settings loader reads it when the flag is not given
    if param.required:
        help_text = ("**Required.** " + help_text).strip()
    if param.multiple:
        help_text = (help_text + " May be given more than once.").strip()
    return names, _type_of(param), _default_of(param), code(env) if env else "", help_text


def _type_of(param: click.Option) -> str:
    kind = param.type
    if param.is_flag and not param.secondary_opts:
        return "flag"
    if isinstance(kind, click.Choice):
        return "one of " + ", ".join(code(str(choice)) for choice in kind.choices)
    if isinstance(kind, click.IntRange | click.FloatRange):
        base = "integer" if isinstance(kind, click.IntRange) else "number"
        low = "" if kind.min is None else f"{kind.min} ≤ "
        high = "" if kind.max is None else f" ≤ {kind.max}"
        return f"{base}, {low}x{high}" if low or high else base
    if isinstance(kind, click.Path):
        return "directory" if not kind.file_okay else "file" if not kind.dir_okay else "path"
    return {"text": "text", "integer": "integer", "float": "number", "boolean": "boolean"}.get(
        kind.name, kind.name
    )


def _default_of(param: click.Option) -> str:
    default = param.default
    if callable(default):
        return "computed"
    if default is None or type(default).__name__ == "Sentinel":  # click's UNSET
        return "off" if param.is_flag and not param.secondary_opts else ""
    if param.is_flag and not param.secondary_opts:
        return "on" if default else "off"
    if isinstance(default, list | tuple):
        return ", ".join(value(item) for item in default) if default else ""
    if isinstance(default, bool | int | float):
        return value(default)
    return code(portable(str(default)))


def _shared_section(
    rows: dict[str, list[tuple[str, ...]]], shared: set[tuple[str, str]], anchors: Anchors
) -> list[str]:
    seen: dict[tuple[str, str], tuple[str, ...]] = {}
    for cmd_rows in rows.values():
        for row in cmd_rows:
            if (row[0], row[-1]) in shared:
                seen.setdefault((row[0], row[-1]), row)
    lines = [
        "## Shared options",
        "",
        "These options mean the same in every command that has them (the client commands reach "
        "the cluster through them); each command below lists which of them it takes.",
        "",
    ]
    body = []
    for (names, _help), row in sorted(seen.items()):
        anchor = anchors.add("shared--" + _option_slug(names))
        body.append((anchor_tag(anchor) + _option_cell(row), row[1], row[2], row[4]))
    return [*lines, *table(_HEADER, body), ""]


def _command_section(
    path: str,
    cmd: click.Command,
    ctx: click.Context,
    cmd_rows: list[tuple[str, ...]],
    shared: set[tuple[str, str]],
    anchors: Anchors,
) -> list[str]:
    anchor = anchors.add(slug(path))
    depth = min(2 + path.count(" ") - 1, 4) if " " in path else 2
    lines = [f"{'#' * depth} `{path}` {{#{anchor}}}", ""]
    usage = " ".join([path, *cmd.collect_usage_pieces(ctx)])
    lines += ["```text", usage, "```", ""]
    if cmd.help:
        lines += [_help_block(cmd.help), ""]
    if isinstance(cmd, click.Group):
        subs = [name for name in cmd.list_commands(ctx) if not cmd.get_command(ctx, name).hidden]  # type: ignore[union-attr]
        links = ", ".join(f"[`{name}`](#{slug(f'{path} {name}')})" for name in subs)
        lines += [f"Commands: {links}.", ""]
    arguments = [p for p in cmd.params if isinstance(p, click.Argument)]
    if arguments:
        described = ", ".join(
            code(p.human_readable_name)
            + (" (optional)" if not p.required else "")
            + (", repeatable" if p.nargs == -1 else "")
            for p in arguments
        )
        lines += [f"Arguments: {described}.", ""]
    if cmd_rows:
        body = []
        for row in cmd_rows:
            option_anchor = anchors.add(f"{anchor}--{_option_slug(row[0])}")
            text = row[-1]
            if (row[0], row[-1]) in shared:
                text = f"[Shared option](#shared--{_option_slug(row[0])})."
            body.append((anchor_tag(option_anchor) + _option_cell(row), row[1], row[2], text))
        lines += [*table(_HEADER, body), ""]
    return lines


def _option_cell(row: tuple[str, ...]) -> str:
    """The option's names, and under them the environment variable read in its place."""
    return row[0] + (f"<br>{code('$' + row[3].strip('`'))}" if row[3] else "")


def _option_slug(names: str) -> str:
    """The option's first long name without its dashes (``--tls-ca`` -> ``tls-ca``)."""
    first = names.split(" ")[0].strip("`")
    return slug(first)


def _help_block(text: str) -> str:
    """A command's help: its paragraphs as click shows them, as Markdown paragraphs."""
    import inspect

    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(prose(paragraph.replace("\b\n", "")) for paragraph in paragraphs)
