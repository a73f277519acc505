"""The official Apache RocketMQ 5 Java client (``rocketmq-client-java``) as a child process: the
program of ``clients/java-interop/``, built once by Maven and cached, run one JVM a scenario.

The program's subcommands (``send``, ``simple-consume``, ``push-consume``, see its Java sources)
print one JSON object a line; :class:`JavaClient` runs one, hands it its input as JSON lines
(messages to send) and returns its events. It runs under asyncio, so a cluster served on the
same event loop (the tests' in-process name server, broker and proxy) keeps serving while the
JVM talks to it. Each run gets a work directory: the JVM's ``user.home`` and the client's log
root (RocketMQ's client logs under ``~/logs/rocketmq`` otherwise), its stderr, its input.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

from orbitmq.common import maven

PROJECT = Path(__file__).resolve().parents[3] / "clients" / "java-interop"
"""The Maven project: part of the repository, not of the package."""
CACHE_ENV = "ORBITMQ_JAVA_CLIENT_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "orbitmq" / "java-interop"
JAR = "java-interop.jar"
MAIN_CLASS = "io.orbitmq.interop.InteropClient"
CLIENT_JVM_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss512k")
"""A scenario's JVM lives seconds: the serial collector and C1 alone start fastest (~0.3 s less
than the defaults on 2 cores). A benchmark passes its own options (the defaults, as an
application runs)."""
STDERR_TAIL_CHARS = 3000


class JavaClientError(RuntimeError):
    """The Java client could not be built or run, or a run failed; the message says why."""


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def build() -> Path:
    """The built program's directory (its jar and ``lib/*.jar``), from the cache under
    ``$ORBITMQ_JAVA_CLIENT_CACHE`` (default ``~/.cache/orbitmq/java-interop``) or built there first
    (keyed by the hash of the pom and sources; one build at a time across processes)."""
    return maven.build(PROJECT, JAR, cache_root(), JavaClientError, what="the Java client interop program")


def command(work_dir: Path, jvm_options: Iterable[str] = CLIENT_JVM_OPTIONS) -> list[str]:
    """``java ... io.orbitmq.interop.InteropClient`` with ``work_dir`` as home and log root;
    the caller appends the subcommand and its options."""
    built = build()
    maven.require_tools("java", what="the Java client interop program", error_cls=JavaClientError)
    return [
        "java", *jvm_options,
        f"-Duser.home={work_dir}",
        f"-Drocketmq.log.root={work_dir / 'logs'}",
        "-cp", maven.classpath(built, JAR), MAIN_CLASS,
    ]  # fmt: skip


def flags(options: Mapping[str, Any]) -> list[str]:
    """``{"filter_sql": "a > 1", "with_bodies": True, "topic": ["A", "B"]}`` as
    ``--filter-sql 'a > 1' --with-bodies --topic A --topic B``; None and False are left out."""
    argv: list[str] = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, list | tuple):
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, str(value)]
    return argv


@dataclass
class Events:
    """What a run printed, in order."""

    lines: list[dict[str, Any]] = field(default_factory=list)

    def of(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line["event"] == name]

    @property
    def summary(self) -> dict[str, Any]:
        summaries = self.of("summary")
        if not summaries:
            raise JavaClientError(f"the run printed no summary; its last events: {self.lines[-5:]}")
        return summaries[-1]


class JavaClient:
    """One subcommand of the Java program in its own JVM (and process group).

    ``async with JavaClient(work_dir, "push-consume", endpoint=..., group=...) as client:``
    starts it; :meth:`started` waits for its "started" event (its client is up); :meth:`finish`
    waits for its exit and returns its events, or raises :class:`JavaClientError` with its
    stderr when it fails. Leaving the block early kills it. ``messages`` go to its standard
    input, one JSON object a line (the ``send`` subcommand's input); ``name`` (default: the
    subcommand) names its files in ``work_dir`` when a test runs several at once. Options are
    the program's, as keywords (:func:`flags`).

    Building happens here when the cache lacks this build: it blocks, so a test builds first
    (:func:`build`, e.g. in a session fixture) rather than with a cluster on its event loop.
    """

    def __init__(
        self,
        work_dir: Path,
        subcommand: str,
        *,
        messages: Iterable[Mapping[str, Any]] = (),
        jvm_options: Iterable[str] = CLIENT_JVM_OPTIONS,
        name: str = "",
        **options: Any,
    ) -> None:
        self.work_dir = work_dir
        self.name = name or subcommand
        self.argv = [*command(work_dir, jvm_options), subcommand, *flags(options)]
        self.events = Events()
        self._messages = messages
        self._process: asyncio.subprocess.Process | None = None
        self._stderr = work_dir / f"{self.name}.stderr"

    async def __aenter__(self) -> JavaClient:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        stdin_path = self.work_dir / f"{self.name}.stdin.jsonl"
        with stdin_path.open("w") as stdin:
            for message in self._messages:
                stdin.write(json.dumps(message) + "\n")
        with stdin_path.open("rb") as stdin, self._stderr.open("wb") as stderr:
            self._process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=stdin,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr,
                start_new_session=True,
                limit=1 << 24,  # an event with a whole body in it is one long line
            )
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        process = self._process
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()

    async def _next_line(self) -> dict[str, Any] | None:
        assert self._process is not None and self._process.stdout is not None
        line = await self._process.stdout.readline()
        if not line:
            return None
        try:
            event = json.loads(line)
        except ValueError:
            raise JavaClientError(f"{self.name} printed a line that is not JSON: {line[:300]!r}") from None
        self.events.lines.append(event)
        return event

    async def started(self, timeout_s: float = 30.0) -> None:
        """Until the program says its client is up (its "started" event)."""
        async with asyncio.timeout(timeout_s):
            while (event := await self._next_line()) is not None:
                if event["event"] == "started":
                    return
        await self._failed("exited before its client started")

    async def finish(self, timeout_s: float = 60.0) -> Events:
        """Until the program exits (it stops by itself: a count reached, an idle time passed)."""
        assert self._process is not None
        try:
            async with asyncio.timeout(timeout_s):
                while await self._next_line() is not None:
                    pass
                await self._process.wait()
        except TimeoutError:
            raise JavaClientError(
                f"{self.name} still running after {timeout_s:.0f} s; its last events: "
                f"{self.events.lines[-5:]}\n{self._stderr_tail()}"
            ) from None
        if self._process.returncode != 0:
            await self._failed(f"exited with {self._process.returncode}")
        return self.events

    async def _failed(self, what: str) -> NoReturn:
        if self._process is not None and self._process.returncode is None:
            await asyncio.wait_for(self._process.wait(), 10)
        raise JavaClientError(f"{self.name} {what}: {' '.join(self.argv[-12:])}\n{self._stderr_tail()}")

    def _stderr_tail(self) -> str:
        with contextlib.suppress(OSError):
            text = self._stderr.read_text(errors="replace")[-STDERR_TAIL_CHARS:]
            return f"--- its stderr ({self._stderr}):\n{text}" if text else "(nothing on its stderr)"
        return ""


async def run(
    work_dir: Path,
    subcommand: str,
    *,
    messages: Iterable[Mapping[str, Any]] = (),
    timeout_s: float = 60.0,
    **options: Any,
) -> Events:
    """Run ``subcommand`` to its end and return its events (see :class:`JavaClient`)."""
    async with JavaClient(work_dir, subcommand, messages=messages, **options) as client:
        return await client.finish(timeout_s)
