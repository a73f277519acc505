"""The chaos report's plots: matplotlib figures as inline SVG text.

Figures are built on :class:`matplotlib.figure.Figure` with no pyplot, so nothing global (a
backend, open figures) is touched. Text stays ``<text>`` (``svg.fonttype: none``): the file is
smaller than with glyph outlines, the labels can be searched and a test can find them in the DOM;
the browser draws them with its own sans-serif. One point per second and matplotlib's path
simplification keep an hour's run to a few hundred kilobytes.
"""

from __future__ import annotations

import io
import itertools

import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from orbitmq.chaos.report import FaultSpan, Timeline

_RC = {
    "svg.fonttype": "none",
    "svg.hashsalt": "orbitmq-chaos",  # stable clip-path ids: the same run gives the same file
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans"],  # each <text> names the list: one, then the browser's sans-serif
    "font.size": 9,
    "path.simplify": True,
    "axes.grid": True,
    "grid.alpha": 0.3,
}
FAULT_COLOUR = "#e8731a"
_GROUP_COLOURS = ("#1f5fa8", "#2a9d4a", "#b8860b", "#7b3fa0", "#c2185b", "#00838f", "#6d4c41", "#5c6bc0")
"""Deliveries per group (repeated past eight groups); none near the fault shading's orange."""
MAX_NAMED = 60
"""Beyond this many faults, spans and bars are labelled with the round alone (the faults table
names each): 60 names of 7 points fit side by side on the 11-inch axis, rotated."""
WIDTH_IN = 11.0


def timeline_svg(line: Timeline, spans: list[FaultSpan]) -> str:
    """Acknowledged sends and deliveries per second above, send p99 below, faults shaded."""
    seconds = list(range(len(line.acknowledged)))
    with matplotlib.rc_context(_RC):
        figure = Figure(figsize=(WIDTH_IN, 6.0), layout="constrained")
        rate, latency = figure.subplots(2, 1, sharex=True, height_ratios=(3, 2))
        rate.step(seconds, line.acknowledged, where="post", label="acknowledged sends/s", color="#111111")
        for (group, counts), colour in zip(line.delivered.items(), itertools.cycle(_GROUP_COLOURS)):
            rate.step(seconds, counts, where="post", label=f"{group} deliveries/s", color=colour, linewidth=1)
        rate.set_ylabel("messages per second")
        rate.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=7)  # off the fault labels
        p99 = [float("nan") if v is None else v for v in line.p99_ms]
        latency.step(seconds, p99, where="post", color="#111111", label="send p99")
        latency.set_ylabel("send p99 (ms)")
        latency.set_xlabel("seconds since the run started")
        if any(v is not None and v > 0 for v in line.p99_ms):
            latency.set_yscale("log")  # a timeout's seconds beside steady milliseconds
        for axes in (rate, latency):
            _shade(axes, spans, labelled=axes is rate)
        rate.set_xlim(_first_busy_second(line), max(len(seconds), 1))
        return _svg(figure)


def recovery_svg(rows: list[dict[str, object]]) -> str:
    """Grouped bars per fault: seconds to writes acknowledged again and to consumers caught up;
    a fault that never recovered is marked where its bar would be."""
    named = len(rows) <= MAX_NAMED
    labels = [f"{row['round']} {row['fault']}" if named else str(row["round"]) for row in rows]
    width = 0.4
    with matplotlib.rc_context(_RC):
        figure = Figure(figsize=(WIDTH_IN, 3.8), layout="constrained")
        axes = figure.subplots()
        for shift, key, colour in (
            (-width / 2, "writes_s", "#1f5fa8"),
            (width / 2, "caught_up_s", "#2a9d4a"),
        ):
            xs = [i + shift for i in range(len(rows))]
            values = [row[key] for row in rows]
            heights = [float(v) if isinstance(v, int | float) else 0.0 for v in values]
            axes.bar(xs, heights, width, label=key.removesuffix("_s").replace("_", " "), color=colour)
            for x, value in zip(xs, values, strict=True):
                if value is None:
                    axes.text(x, 0, "never", rotation=90, ha="center", va="bottom", color="#b00020")
        axes.set_xticks(range(len(rows)), labels, rotation=60 if len(rows) > 6 else 0, ha="right")
        axes.set_ylabel("seconds after the fault")
        axes.legend(loc="upper right", fontsize=8)
        return _svg(figure)


def _first_busy_second(line: Timeline) -> int:
    """A second before the first acknowledgement or delivery: the cluster's start is not drawn."""
    series = [line.acknowledged, *line.delivered.values()]
    busy = (second for second, counts in enumerate(zip(*series, strict=True)) if any(counts))
    return max(next(busy, 0) - 1, 0)


def _shade(axes: Axes, spans: list[FaultSpan], labelled: bool) -> None:
    named = len(spans) <= MAX_NAMED
    for span in spans:
        axes.axvspan(span.start, span.end, color=FAULT_COLOUR, alpha=0.25, linewidth=0)
        if labelled:
            axes.text(
                span.start,
                0.98,
                span.label if named else str(span.round),
                transform=axes.get_xaxis_transform(),
                rotation=90,
                ha="right",
                va="top",
                fontsize=7,
                color="#8a3b00",
            )


def _svg(figure: Figure) -> str:
    """The figure's ``<svg>`` element alone (no XML prolog or DOCTYPE: it is inlined in HTML)."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    text = buffer.getvalue()
    return text[text.index("<svg") :]
