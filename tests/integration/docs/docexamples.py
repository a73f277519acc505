"""The runnable examples of a documentation page: which blocks run, what they must print.

Issue 28 asks that every shell and Python example of the Getting started and How-to pages that
can run on a local cluster be run by a test, so an example that hangs or lies fails CI. This
module is the pure half of that test: it reads a page's fenced blocks and their annotations
(``test_examples.py`` runs them). Parsing is strict because a lenient parser lets a page dodge
the test: an annotation that is misspelt, has no reason, or is attached to nothing is an error,
and so is a shell or Python block written in a language the runner does not run (``sh``,
``console``, ``py`` …): a reader copies those as readily as ``bash`` ones.

:class:`Session` and :func:`run_blocks` run a page's blocks and judge them; ``test_examples.py``
gives them a cluster, a home and a working directory.

The conventions, as a page author sees them:

* fenced ``bash`` and ``python`` blocks run, in page order, in one shell session per page;
* an HTML comment on the line right before a fence annotates that block (several may stack):
  ``<!-- docs-test: skip — why -->`` (not run; the reason is required) and
  ``<!-- docs-test: expect "text" -->`` (standard output must contain the text; may repeat);
* ``<!-- docs-test: cluster --slaves 1 -->`` anywhere on the page, on a line of its own,
  chooses the options of the page's ``orbitmq local up`` (from :data:`CLUSTER_OPTIONS`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

RUN_LANGUAGES = frozenset({"bash", "python"})
"""The languages of the blocks that run."""

REFUSED_LANGUAGES = {
    "sh": "bash",
    "shell": "bash",
    "zsh": "bash",
    "console": "bash (and its output in a text block)",
    "shell-session": "bash (and its output in a text block)",
    "shellsession": "bash (and its output in a text block)",
    "py": "python",
    "python3": "python",
    "pycon": "python (and its output in a text block)",
}
"""Shell and Python spellings that would not run, and what to write instead."""

CLUSTER_OPTIONS = {"--slaves": int, "--failover-after-ms": int, "--segment-mib": int, "--auth": None}
"""The ``orbitmq local up`` options a page may ask for (ports and data directory are the runner's)."""

_ANNOTATION = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<body>.*?)\s*-->\s*$")
_LOOSE_ANNOTATION = re.compile(r"docs-test\s*:")
_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
_DASHES = "\u2014\u2013:-"  # em dash, en dash, colon, hyphen: "skip — why", "skip: why"
_SKIP = re.compile(rf"^skip(?:\s*[{_DASHES}]+\s*|\s+)(?P<reason>\S.*)$")
_EXPECT = re.compile(r'^expect\s+"(?P<text>(?:[^"\\]|\\.)+)"$')


class AnnotationError(ValueError):
    """A page whose annotations the runner cannot trust (the message names page and line)."""


@dataclass(frozen=True)
class Block:
    """One fenced ``bash`` or ``python`` block and what its annotations ask."""

    page: Path
    line: int
    """1-based line of the opening fence."""
    language: str
    code: str
    skip_reason: str | None = None
    expects: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


@dataclass(frozen=True)
class Page:
    """A page's runnable blocks in page order, skipped ones included, and its cluster options."""

    path: Path
    blocks: tuple[Block, ...]
    cluster_args: tuple[str, ...] = field(default=())

    @property
    def runnable(self) -> tuple[Block, ...]:
        return tuple(b for b in self.blocks if b.skip_reason is None)


def _language(info: str) -> str:
    """The language of a fence's info string: ``bash title="x"`` and ``{.bash}`` give ``bash``."""
    word = info.strip().split(maxsplit=1)[0] if info.strip() else ""
    return word.strip("{}").lstrip(".").lower()


def _cluster_args(body: str, where: str) -> tuple[str, ...]:
    args = shlex.split(body)[1:]
    i = 0
    while i < len(args):
        option = args[i]
        if option not in CLUSTER_OPTIONS:
            known = sorted(CLUSTER_OPTIONS)
            raise AnnotationError(f"{where}: cluster option {option!r} is not one of {known}")
        kind = CLUSTER_OPTIONS[option]
        if kind is None:
            i += 1
            continue
        if i + 1 >= len(args) or not args[i + 1].isdigit():
            raise AnnotationError(f"{where}: cluster option {option} needs a number")
        i += 2
    return tuple(args)


def parse_page(path: Path, text: str | None = None) -> Page:
    """The blocks of the page at ``path`` (its text may be given, for tests)."""
    lines = (path.read_text(encoding="utf-8") if text is None else text).splitlines()
    blocks: list[Block] = []
    cluster_args: tuple[str, ...] = ()
    pending: list[tuple[int, str]] = []  # annotations waiting for the fence below them
    i = 0
    while i < len(lines):
        line = lines[i]
        where = f"{path}:{i + 1}"
        annotation = _ANNOTATION.match(line)
        if annotation:
            body = annotation.group("body")
            if body.split(maxsplit=1)[:1] == ["cluster"]:
                if cluster_args:
                    raise AnnotationError(f"{where}: a second cluster annotation")
                cluster_args = _cluster_args(body, where) or ("--slaves", "0")
            else:
                pending.append((i + 1, body))
            i += 1
            continue
        if _LOOSE_ANNOTATION.search(line):
            raise AnnotationError(f"{where}: a docs-test annotation is a whole line '<!-- docs-test: … -->'")
        fence = _FENCE_OPEN.match(line)
        if not fence:
            if pending and line.strip():
                raise AnnotationError(f"{path}:{pending[0][0]}: annotation not followed by a fenced block")
            if pending:  # a blank line between annotation and fence detaches it
                raise AnnotationError(f"{path}:{pending[0][0]}: annotation must be right before the fence")
            i += 1
            continue
        indent, marker = fence.group("indent"), fence.group("fence")
        language = _language(fence.group("info"))
        body_lines: list[str] = []
        j = i + 1
        closing = re.compile(rf"^[ \t]*{re.escape(marker[0])}{{{len(marker)},}}\s*$")
        while j < len(lines) and not closing.match(lines[j]):
            content = lines[j]
            body_lines.append(content[len(indent) :] if content.startswith(indent) else content.lstrip())
            j += 1
        if j == len(lines):
            raise AnnotationError(f"{where}: fence never closed")
        if language in REFUSED_LANGUAGES:
            raise AnnotationError(
                f"{where}: a {language!r} block does not run; write {REFUSED_LANGUAGES[language]}"
            )
        if language in RUN_LANGUAGES:
            blocks.append(_block(path, i + 1, language, "\n".join(body_lines) + "\n", pending))
        elif pending:
            raise AnnotationError(f"{path}:{pending[0][0]}: annotation on a {language or 'plain'} block")
        pending = []
        i = j + 1
    if pending:
        raise AnnotationError(f"{path}:{pending[0][0]}: annotation not followed by a fenced block")
    return Page(path=path, blocks=tuple(blocks), cluster_args=cluster_args)


def _block(path: Path, line: int, language: str, code: str, annotations: list[tuple[int, str]]) -> Block:
    skip_reason: str | None = None
    expects: list[str] = []
    for number, body in annotations:
        where = f"{path}:{number}"
        if body == "skip" or (body.startswith("skip") and not body[4:].strip(" " + _DASHES)):
            raise AnnotationError(f"{where}: skip needs a reason ('docs-test: skip — needs Kubernetes')")
        if skip := _SKIP.match(body):
            if skip_reason is not None:
                raise AnnotationError(f"{where}: a second skip")
            skip_reason = skip.group("reason")
        elif expect := _EXPECT.match(body):
            expects.append(re.sub(r"\\(.)", r"\1", expect.group("text")))
        else:
            raise AnnotationError(f'{where}: unknown annotation {body!r} (skip — reason, or expect "text")')
    if skip_reason is not None and expects:
        raise AnnotationError(f"{path}:{line}: a skipped block cannot expect output")
    if not code.strip():
        raise AnnotationError(f"{path}:{line}: empty {language} block")
    return Block(path, line, language, code, skip_reason=skip_reason, expects=tuple(expects))


class ExampleFailed(AssertionError):
    """A block that failed, hung or did not print what it promised (the message shows it all)."""


@dataclass
class Outcome:
    """How one block ended in the session."""

    stdout: str
    stderr: str
    exit_code: int | None
    """None: the block finished; otherwise the shell's exit status (bash -e left on a failure)."""
    timed_out: bool = False


class Session:
    """One ``bash -e -o pipefail`` reading a page's blocks from a pipe, one block at a time, so
    exports and ``cd`` carry from block to block while each block has its own output and timeout.
    Python blocks run as ``python FILE`` in it: they see its environment and working directory."""

    def __init__(self, workdir: Path, scratch: Path, env: dict[str, str]) -> None:
        self.scratch = scratch
        self._stderr = (scratch / "session.err").open("w")
        self.process = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail"],
            cwd=workdir,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
            text=True,
            start_new_session=True,  # its own process group: the page's background processes too
        )
        self._count = 0

    def run(self, block: Block, timeout_s: float) -> Outcome:
        stem = self.scratch / f"block-{self._count:02d}"
        self._count += 1
        source = stem.with_suffix(".py" if block.language == "python" else ".sh")
        source.write_text(block.code, encoding="utf-8")
        out, err, done = (stem.with_suffix(suffix) for suffix in (".out", ".err", ".done"))
        command = f"python {_quote(source)}" if block.language == "python" else f"source {_quote(source)}"
        assert self.process.stdin is not None
        try:
            redirections = f"</dev/null >{_quote(out)} 2>{_quote(err)}"
            self.process.stdin.write(f"{command} {redirections}\n: >{_quote(done)}\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            pass  # the shell has left (an earlier block's exit): reported below
        deadline = time.monotonic() + timeout_s
        while not done.exists() and self.process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        timed_out = not done.exists() and self.process.poll() is None
        if timed_out:
            self.close()
        exit_code = None if done.exists() else self.process.poll()
        return Outcome(_read(out), _read(err), exit_code, timed_out)

    def close(self) -> None:
        """End the shell and everything the page started in the background."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=10)
            time.sleep(0.3)  # background children handle the same SIGTERM
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self._stderr.close()


def run_blocks(
    page: Page, session: Session, timeout_s: float, context: Callable[[], str] = lambda: ""
) -> list[tuple[Block, float]]:
    """Run ``page``'s blocks that are not skipped, in order; raise :class:`ExampleFailed` at the
    first that fails, hangs past ``timeout_s`` or lacks an expected text on standard output
    (``context`` adds e.g. the cluster's log to a failure). Returns each block's time."""
    timings: list[tuple[Block, float]] = []
    for block in page.runnable:
        started = time.monotonic()
        outcome = session.run(block, timeout_s)
        timings.append((block, time.monotonic() - started))
        missing = [text for text in block.expects if text not in outcome.stdout]
        if outcome.timed_out or outcome.exit_code is not None or missing:
            raise ExampleFailed(_failure(block, outcome, missing, timeout_s, context))
    return timings


def _failure(
    block: Block, outcome: Outcome, missing: list[str], timeout_s: float, context: Callable[[], str]
) -> str:
    if outcome.timed_out:
        why = f"did not finish within {timeout_s:g} s"
    elif outcome.exit_code is not None:
        why = f"failed: exit status {outcome.exit_code}"
    else:
        why = "did not print " + ", ".join(repr(text) for text in missing) + " on standard output"
    parts = [
        f"{block.where}: {block.language} block {why}",
        _section("code", block.code),
        _section("stdout", outcome.stdout),
        _section("stderr", outcome.stderr),
    ]
    if outcome.exit_code is not None or outcome.timed_out:
        parts.append(context())
    return "\n".join(part for part in parts if part)


def _section(title: str, text: str) -> str:
    return f"--- {title} ---\n{text.rstrip() or '(nothing)'}"


def _quote(path: Path) -> str:
    return shlex.quote(str(path))


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
