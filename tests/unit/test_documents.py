"""The documents a new user reads first say only true things about the tree and the CLI.

README.md, ARCHITECTURE.md and CONTRIBUTING.md went stale within a turn (a Layout without
``spark-jobs/``, a command table without ``orbitmq proxy``, links to moved files), and the README
grew to 1 700 lines. Their content now lives in the documentation site (``docs/``); these checks
make drift fail the test command instead:

* the README stays short (at most 200 lines) and every link it has resolves, down to the heading
  an anchor names;
* every relative link and every repository path the documents (the README, the two pointers and
  every hand-written page of the site) name exists;
* the architecture page's Layout lists every top-level directory, every package of
  ``services/orbitmq/`` and every script, and nothing that is not there;
* its command table names every ``orbitmq`` subcommand (read from click);
* every ``orbitmq`` command line the documents show (in a shell block or inline code) names a
  real command and only options that command has.

``mkdocs build --strict`` checks the site's links too, but only where the site is built; these
run with the unit tests and also cover the pages outside ``docs/``.
"""

from __future__ import annotations

import itertools
import re
import shlex
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from orbitmq.cli.main import main as orbitmq_cli

ROOT = Path(__file__).resolve().parents[2]
README_MAX_LINES = 200
POINTERS = ("README.md", "ARCHITECTURE.md", "CONTRIBUTING.md")
# Every hand-written page of the site; the generated reference pages are their generator's to check.
PAGES = tuple(
    sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "docs").rglob("*.md")
        if p.relative_to(ROOT / "docs").parts[0] not in ("reference", "hooks", "overrides")
    )
)
DOCUMENTS = (*POINTERS, *PAGES)
ARCHITECTURE = "docs/architecture.md"

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
    "clients",
    ".ci",
)
PATH_RE = re.compile(rf"(?<![\w./-])((?:{'|'.join(re.escape(t) for t in TOP_LEVEL)})/[\w./-]*)")
# a path followed by one of these is a pattern (``tests/unit/<area>/``, ``broker-a-s1/…``)
PATTERN_NEXT = set("<*{…$[")
LINK_RE = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE_RE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
SHELL_FENCES = {"bash", "sh", "shell", "console"}
INLINE_RE = re.compile(r"(?<!`)`((?:\.venv/bin/)?orbitmq [^`]+)`(?!`)")
SHELL_SEPARATORS = {"|", "||", "&&", ";", "&", ">", ">>", "2>", "2>&1", "<", ")", "<<'YAML'", "<<'PY'"}


def _text(name: str) -> str:
    return (ROOT / name).read_text(encoding="utf-8")


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's ``toc`` gives a heading (its default ``slugify``)."""
    text = re.sub(r"\{[^}]*\}\s*$", "", heading)  # an attr_list suffix ``{ #id }``
    text = text.replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(path: Path) -> set[str]:
    """The headings' anchors, and the ids of HTML anchors (``<a id="x">``, as the generated
    reference pages give each setting and metric)."""
    text = FENCE_RE.sub("", path.read_text(encoding="utf-8"))
    anchors = set(re.findall(r"<a\s[^>]*\bid=\"([^\"]+)\"", text))
    for line in text.splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if match:
            explicit = re.search(r"\{[^}]*#([\w-]+)[^}]*\}\s*$", match.group(1))
            anchors.add(explicit.group(1) if explicit else _slug(match.group(1)))
    return anchors


def test_the_slug_is_what_the_site_makes() -> None:
    assert _slug("Fault injection: `orbitmq chaos`") == "fault-injection-orbitmq-chaos"
    assert _slug("Cardinality budget (`benchmarks/cardinality_bench.py`)") == (
        "cardinality-budget-benchmarkscardinality_benchpy"
    )
    assert _slug("A real node beside kwok (opt-in)") == "a-real-node-beside-kwok-opt-in"


def test_the_readme_is_short() -> None:
    lines = _text("README.md").count("\n")
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines (at most {README_MAX_LINES}): move details into a docs/ page"
    )


def test_the_readme_links_into_the_site() -> None:
    targets = [t for t in LINK_RE.findall(_text("README.md")) if t.startswith("docs/")]
    assert len(targets) >= 5, f"README.md should link into the site's sections, links: {targets}"


def _missing_links(page: Path) -> list[str]:
    missing = []
    for target in LINK_RE.findall(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z]+:", target):
            continue
        file_part, _, anchor = target.partition("#")
        resolved = (page.parent / file_part).resolve() if file_part else page
        if not resolved.exists() or (
            resolved.suffix == ".md" and anchor and anchor not in _anchors(resolved)
        ):
            missing.append(target)
    return missing


@pytest.mark.parametrize("name", DOCUMENTS)
def test_relative_links_point_at_files_and_headings_that_exist(name: str) -> None:
    missing = _missing_links(ROOT / name)
    assert not missing, f"{name} links to files or headings that do not exist: {missing}"


def test_a_link_to_a_missing_heading_is_caught(tmp_path: Path) -> None:
    (tmp_path / "target.md").write_text("# Target\n\n## Fault injection: `orbitmq chaos`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](target.md#fault-injection-orbitmq-chaos) [here](#local) [gone](target.md#soak)\n"
        "[nowhere](missing.md) [site](https://example.org/x.md#y)\n\n## Local\n"
    )
    assert _missing_links(page) == ["target.md#soak", "missing.md"]


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


def _section(name: str, heading: str) -> str:
    return _text(name).split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]


def _layout_entries() -> set[str]:
    """The paths of the Layout block, nested by their indentation (4 spaces a level)."""
    block = _section(ARCHITECTURE, "Layout").split("```", 2)[1]
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
    assert not stale, f"the Layout in {ARCHITECTURE} lists paths that do not exist: {stale}"

    tracked_top = {
        p.name
        for p in ROOT.iterdir()
        if (p.is_dir() and not p.name.startswith(".") and not p.name.endswith(".egg-info"))
        or p.name in {"pyproject.toml", "setup.py", "Dockerfile", "mkdocs.yml"}
    } - {"build", "site"}
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
    assert not absent, f"the Layout in {ARCHITECTURE} omits: {absent}"


def _leaf_commands(group: click.Group, prefix: tuple[str, ...] = ()) -> dict[str, click.Command]:
    leaves: dict[str, click.Command] = {}
    for name, command in group.commands.items():
        path = (*prefix, name)
        if isinstance(command, click.Group):
            leaves.update(_leaf_commands(command, path))
        else:
            leaves[" ".join(path)] = command
    return leaves


def _alternatives(span: str) -> set[str]:
    """The commands ``admin topic create|update`` names: one per alternative of each word."""
    words = []
    for word in span.split():
        if word.startswith(("-", "[")):
            break
        words.append(word.replace("\\|", "|").split("|"))
    return {" ".join(combo) for combo in itertools.product(*words)}


def _command_table() -> list[set[str]]:
    """The commands each row of the architecture page's command table names."""
    rows = []
    for line in _section(ARCHITECTURE, "Processes and the CLI").splitlines():
        if not line.startswith("| `orbitmq"):
            continue
        cell = re.split(r"(?<!\\)\|", line)[1]
        named: set[str] = set()
        for span in re.findall(r"`orbitmq ([^`]*)`", cell):
            named |= _alternatives(span)
        rows.append(named)
    return rows


def test_the_command_table_names_every_subcommand() -> None:
    leaves = _leaf_commands(orbitmq_cli)
    named = set().union(*_command_table())
    assert not sorted(set(leaves) - named), f"the command table lacks: {sorted(set(leaves) - named)}"
    assert not sorted(named - set(leaves)), (
        f"the command table names unknown commands: {sorted(named - set(leaves))}"
    )


def _options(command: click.Command) -> set[str]:
    return {
        opt
        for param in command.params
        if isinstance(param, click.Option)
        for opt in param.opts + param.secondary_opts
        if opt.startswith("--")
    } | {"--help"}


def _takes_value(command: click.Command, option: str) -> bool:
    return any(
        isinstance(p, click.Option) and option in p.opts and not p.is_flag and not p.count
        for p in command.params
    )


def _check_invocation(words: list[str]) -> list[str]:
    """What is wrong with one ``orbitmq …`` invocation (``words`` follow ``orbitmq``)."""
    command: click.Command = orbitmq_cli
    path = ["orbitmq"]
    problems = []
    skip_value = False
    for word in words:
        if word in SHELL_SEPARATORS or word.startswith(("#", "$(", "`")):
            break
        if skip_value:
            skip_value = False
            continue
        bare = word.strip("[]")
        if isinstance(command, click.Group) and not bare.startswith("-"):
            if word in ("…", "..."):
                break
            sub = command.commands.get(word)
            if sub is None:
                problems.append(f"`{' '.join(path)} {word}`: no such command")
                break
            command, path = sub, [*path, word]
            continue
        if bare.startswith("--"):
            option = bare.split("=", 1)[0]
            if option not in _options(command):
                problems.append(f"`{' '.join(path)}` has no option {option}")
            # a group's option takes its value as the next word, which is no subcommand
            skip_value = "=" not in bare and _takes_value(command, option)
    return problems


def _commands_at(words: list[str]) -> Iterator[int]:
    """Where ``orbitmq`` is the command run: first on the line or after a separator, perhaps
    behind variable assignments and ``sudo``/``exec``/``time`` (not ``-n orbitmq``)."""
    command_position = True
    for i, word in enumerate(words):
        if word == "orbitmq" or word.endswith("/bin/orbitmq"):
            if command_position:
                yield i
            command_position = False
        elif word in SHELL_SEPARATORS or word.endswith(("$(", "(")):
            command_position = True
        elif command_position and (re.match(r"^[A-Za-z_]\w*=", word) or word in ("sudo", "exec", "time")):
            continue
        else:
            command_position = False


def _shell_lines(block: str) -> Iterator[str]:
    """The logical lines of a shell block: continuations joined, heredoc bodies left out."""
    lines = iter(block.replace("\\\n", " ").splitlines())
    for line in lines:
        yield line
        heredoc = re.search(r"<<-?'?(\w+)'?", line)
        if heredoc:
            for body in lines:
                if body.strip() == heredoc.group(1):
                    break


def _invocations(text: str) -> Iterator[list[str]]:
    for language, block in FENCE_RE.findall(text):
        if language not in SHELL_FENCES:
            continue
        for line in _shell_lines(block):
            line = line.lstrip("$ ")
            try:
                words = shlex.split(line, comments=True)
            except ValueError:  # an unbalanced quote: not a command line
                continue
            for i in _commands_at(words):
                yield words[i + 1 :]
    prose = FENCE_RE.sub("", text)
    for span in INLINE_RE.findall(prose):
        if "|" in span:  # alternatives (`topic create|update`): the table's test reads those
            continue
        words = span.split()
        yield words[1:]


@pytest.mark.parametrize("name", DOCUMENTS)
def test_every_command_line_shown_is_real(name: str) -> None:
    problems = [p for words in _invocations(_text(name)) for p in _check_invocation(words)]
    assert not problems, f"{name} shows command lines the CLI does not take: {sorted(set(problems))}"


def test_a_wrong_command_line_is_caught() -> None:
    """The check above would pass on anything if the parsing went wrong: show that it bites."""
    page = (
        "```bash\norbitmq produce --topic T --no-such-option \\\n  --count 1\n"
        "orbitmq admin topic frobnicate --topic T\n```\n"
        "and inline `orbitmq consume --group g --nope`.\n"
    )
    problems = [p for words in _invocations(page) for p in _check_invocation(words)]
    assert problems == [
        "`orbitmq produce` has no option --no-such-option",
        "`orbitmq admin topic frobnicate`: no such command",
        "`orbitmq consume` has no option --nope",
    ]
    good = "```bash\nexport X=1\n.venv/bin/orbitmq admin topic create --topic Orders --read-queues 8\n```\n"
    assert [p for words in _invocations(good) for p in _check_invocation(words)] == []
