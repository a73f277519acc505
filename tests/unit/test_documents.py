"""The documents a new user reads first say only true things about the tree and the CLI.

README.md, ARCHITECTURE.md and CONTRIBUTING.md went stale within a turn (a Layout without
``spark-jobs/``, a command table without ``orbitmq proxy``, links to moved files). These checks
make that drift fail the test command instead:

* every relative link and every repository path they name exists;
* the README's Layout lists every top-level directory, every package of ``services/orbitmq/``
  and every script, and nothing that is not there;
* the README's command table names every ``orbitmq`` subcommand (read from click), and a row
  that shows options in brackets shows all of that command's options and no others.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import click
import pytest

from orbitmq.cli.main import main as orbitmq_cli

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ("README.md", "ARCHITECTURE.md", "CONTRIBUTING.md")

# A path is checked when it starts at one of these top-level entries.
TOP_LEVEL = (
    "scripts",
    "services",
    "tests",
    "charts",
    "operator",
    "spark-jobs",
    "protos",
    "benchmarks",
    "docs",
    ".ci",
)
PATH_RE = re.compile(rf"(?<![\w./-])((?:{'|'.join(re.escape(t) for t in TOP_LEVEL)})/[\w./-]*)")
# a path followed by one of these is a pattern (``tests/unit/<area>/``, ``broker-a-s1/…``)
PATTERN_NEXT = set("<*{…$[")
LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _text(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


@pytest.mark.parametrize("name", DOCUMENTS)
def test_relative_links_point_at_files_that_exist(name: str) -> None:
    missing = []
    for target in LINK_RE.findall(_text(name)):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        if not (ROOT / target.split("#", 1)[0]).exists():
            missing.append(target)
    assert not missing, f"{name} links to paths that do not exist: {missing}"


@pytest.mark.parametrize("name", DOCUMENTS)
def test_every_repository_path_named_exists(name: str) -> None:
    text = _text(name)
    missing = []
    for match in PATH_RE.finditer(text):
        path = match.group(1).rstrip(".")
        following = text[match.end() : match.end() + 1]
        if following in PATTERN_NEXT or not path:
            continue
        if not (ROOT / path).exists():
            missing.append(path)
    assert not missing, f"{name} names paths that do not exist: {sorted(set(missing))}"


def _layout_entries() -> set[str]:
    """The paths of the README's Layout block, nested by their indentation (4 spaces a level)."""
    readme = _text("README.md")
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    entries: set[str] = set()
    parents: list[str] = []
    for line in block.splitlines()[1:]:
        if not line.strip() or line.startswith(" " * 8):  # blank, or a description's continuation
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 4
        name = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
        parents = [*parents[:depth], name.rstrip("/") + "/"]
        path = "".join(parents).rstrip("/")
        parts = path.split("/")
        entries |= {
            "/".join(parts[: i + 1]) for i in range(len(parts))
        }  # `services/orbitmq/` names `services`
    return entries


def test_the_layout_lists_what_is_there() -> None:
    entries = _layout_entries()
    stale = sorted(e for e in entries if not (ROOT / e).exists())
    assert not stale, f"the README's Layout lists paths that do not exist: {stale}"

    tracked_top = {
        p.name
        for p in ROOT.iterdir()
        if (p.is_dir() and not p.name.startswith(".") and not p.name.endswith(".egg-info"))
        or p.name in {"pyproject.toml", "setup.py", "Dockerfile"}
    } - {"build"}
    expected = (
        tracked_top
        | {
            f"services/orbitmq/{p.name}"
            for p in (ROOT / "services/orbitmq").iterdir()
            if (p / "__init__.py").exists()
        }
        | {f"scripts/{p.name}" for p in (ROOT / "scripts").iterdir() if not p.name.startswith(("_", "."))}
        | {".ci/run"}
    )
    absent = sorted(expected - entries)
    assert not absent, f"the README's Layout omits: {absent}"


def _leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> dict[str, click.Command]:
    leaves: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        path = (*prefix, name)
        if isinstance(command, click.Group):
            leaves.update(_leaf_commands(command, path))
        else:
            leaves[" ".join(path)] = command
    return leaves


def _command_table() -> list[tuple[set[str], str]]:
    """Rows of the README's command table: the commands a row names and its first cell."""
    readme = _text("README.md")
    section = readme.split("## Processes and the CLI", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        if not line.startswith("| `orbitmq"):
            continue
        cell = re.split(r"(?<!\\)\|", line)[1]
        named: set[str] = set()
        for span in re.findall(r"`orbitmq ([^`]*)`", cell):
            words = []
            for word in span.split():
                if word.startswith(("-", "[")):
                    break
                words.append(word.replace("\\|", "|").split("|"))
            named |= {" ".join(combo) for combo in itertools.product(*words)}
        rows.append((named, cell))
    return rows


def test_the_command_table_names_every_subcommand() -> None:
    leaves = _leaf_commands(orbitmq_cli)
    named = set().union(*(commands for commands, _ in _command_table()))
    assert not sorted(set(leaves) - named), f"README's command table lacks: {sorted(set(leaves) - named)}"
    assert not sorted(named - set(leaves)), (
        f"README's command table names unknown commands: {sorted(named - set(leaves))}"
    )


def test_a_synopsis_row_shows_every_option_of_its_command() -> None:
    leaves = _leaf_commands(orbitmq_cli)
    for commands, cell in _command_table():
        shown = set(re.findall(r"(--[a-z0-9-]+)", cell))
        for name in commands:
            options = {
                opt
                for param in leaves[name].params
                if isinstance(param, click.Option)
                for opt in param.opts + param.secondary_opts
                if opt.startswith("--") and opt != "--help"
            }
            unknown = shown - options
            assert not unknown, f"README shows options `orbitmq {name}` does not have: {sorted(unknown)}"
            if "[--" in cell:
                absent = options - shown
                # a boolean flag's --no-x form is one option with --x
                absent = {o for o in absent if not (o.startswith("--no-") and f"--{o[5:]}" in shown)}
                assert not absent, f"README's synopsis of `orbitmq {name}` lacks: {sorted(absent)}"
