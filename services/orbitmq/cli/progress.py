"""Progress of long CLI operations (``produce --count``, benchmarks) for a person at a terminal.

Drawn on standard error, only when standard error is a terminal and the command was not asked
for ``--json``: a script reading the output, or a log file, gets no bar and no control
characters. A bar with a known total (:func:`progress`) is redrawn at most ten times a second
from the caller's own calls (no refresh thread), so a fast loop pays one clock read per step.
An operation of unknown length (:func:`activity`, a benchmark) shows a spinner and the elapsed
time, redrawn twice a second by rich's thread: too rarely to weigh on what a benchmark measures.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

REDRAW_S = 0.1
"""Least time between two redraws of the bar."""


def wanted(as_json: bool) -> bool:
    """Whether to draw progress: for a person (standard error is a terminal), not for ``--json``."""
    return not as_json and sys.stderr.isatty()


class _RateColumn(ProgressColumn):
    """Steps a second (rich's speed column counts bytes)."""

    def render(self, task: Task) -> Text:
        return Text(f"{task.speed:,.0f}/s" if task.speed else "", style="progress.data.speed")


@contextmanager
def progress(description: str, total: int | None, *, enabled: bool) -> Iterator[Callable[[int], None]]:
    """A function that advances a bar by ``n`` steps of ``total``; it does nothing when not
    ``enabled``. The bar disappears when the block ends (the caller prints its summary)."""
    if not enabled:
        yield lambda n: None
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _RateColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
        auto_refresh=False,
        redirect_stdout=False,
        redirect_stderr=False,
    )
    task = bar.add_task(description, total=total)
    last = 0.0

    def advance(n: int) -> None:
        nonlocal last
        bar.advance(task, n)
        now = time.monotonic()
        if now - last >= REDRAW_S:
            last = now
            bar.refresh()

    with bar:
        yield advance


@contextmanager
def activity(description: str, *, enabled: bool) -> Iterator[Callable[[str], object]]:
    """A spinner and the elapsed time while the block runs, when ``enabled``. Yields the
    function that prints an output line: above the spinner when standard output is the same
    terminal, else plainly to standard output."""
    if not enabled:
        yield click.echo
        return
    spinner = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        refresh_per_second=2,
        redirect_stdout=False,
        redirect_stderr=False,
    )
    spinner.add_task(description, total=None)

    def above(line: str) -> None:
        spinner.console.print(line, markup=False, highlight=False, soft_wrap=True)

    with spinner:
        yield above if sys.stdout.isatty() else click.echo
