"""The HTML report of a chaos run: one self-contained file built from the result and the history.

The plots are matplotlib figures inlined as SVG (:mod:`.plots`), the style is one ``<style>``
element: no script, stylesheet, font or image is fetched, so the file can be mailed, attached to
a CI run or opened years later. This module holds the pure part (per-second bins, p99, fault
spans, the tables) and imports matplotlib only when it renders, so the harness runs without the
``report`` extra and says what to install (:func:`missing_dependency`).

Tables render any checker's summary generically (nested dicts as nested tables, lists of dicts as
tables): a checker added to the registry shows up without a change here.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

from orbitmq.chaos.checkers import recovery
from orbitmq.chaos.history import FaultRecord, History, Outcome, Send

INSTALL_HINT = "pip install 'orbitmq[report]'"
MIN_SPAN_S = 0.3
"""Narrowest drawn fault span: a kill healed in 0.1 s must still show on an hour's axis."""


@dataclass(frozen=True)
class Timeline:
    """Per-second series of a run, second ``i`` covering ``[i, i + 1)`` seconds since its start."""

    acknowledged: list[int]
    """Sends acknowledged in that second (by when the acknowledgement arrived)."""
    delivered: dict[str, list[int]]
    """Per live consumer group (sorted by name), its deliveries (not the final drain's): one
    line a group, so a group that stalls while the others go on shows."""
    p99_ms: list[float | None]
    """p99 latency of the send attempts that ended in that second, whatever their outcome: a
    timed-out attempt is latency a producer saw. None for a second without one."""


@dataclass(frozen=True)
class FaultSpan:
    start: float
    end: float
    round: int
    fault: str

    @property
    def label(self) -> str:
        return f"{self.round} {self.fault}"


def percentile(values: Iterable[float], q: float) -> float | None:
    """Nearest-rank percentile (the checkers' definition: index ``int(q * n)``, capped)."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def per_second(times: Iterable[float], seconds: int) -> list[int]:
    """How many of ``times`` fall in each second ``0 … seconds - 1``; later or negative ones are
    left out (the bins end where the run's live traffic did)."""
    counts = [0] * seconds
    for at in times:
        if 0 <= at < seconds:
            counts[int(at)] += 1
    return counts


def p99_per_second(sends: Iterable[Send], seconds: int) -> list[float | None]:
    """p99 of ``ended - started`` in milliseconds, per second the attempts ended in."""
    latencies: list[list[float]] = [[] for _ in range(seconds)]
    for send in sends:
        if 0 <= send.ended < seconds:
            latencies[int(send.ended)].append((send.ended - send.started) * 1000)
    return [None if (p99 := percentile(bin_, 0.99)) is None else round(p99, 2) for bin_ in latencies]


def run_seconds(history: History) -> int:
    """Seconds the live traffic and the faults covered (the final drain comes after)."""
    ends = [s.ended for s in history.sends] + [d.at for d in history.deliveries]
    for fault in history.faults:
        ends += [fault.injected_at, fault.healed_at or 0.0, fault.round_ended_at or 0.0]
    return math.floor(max(ends, default=0.0)) + 1


def timeline(history: History) -> Timeline:
    seconds = run_seconds(history)
    acked = (s.ended for s in history.sends if s.outcome is Outcome.ACKNOWLEDGED)
    groups: dict[str, list[float]] = {}
    for delivery in history.deliveries:
        groups.setdefault(delivery.group, []).append(delivery.at)
    return Timeline(
        per_second(acked, seconds),
        {group: per_second(groups[group], seconds) for group in sorted(groups)},
        p99_per_second(history.sends, seconds),
    )


def fault_spans(faults: Iterable[FaultRecord]) -> list[FaultSpan]:
    """Injection to heal (SIGCONT sent, killed process replaced); a fault never seen healed
    spans to its round's end."""
    spans = []
    for fault in faults:
        end = fault.healed_at if fault.healed_at is not None else fault.round_ended_at
        end = max(end or fault.injected_at, fault.injected_at + MIN_SPAN_S)
        spans.append(FaultSpan(fault.injected_at, end, fault.round, fault.fault))
    return spans


def missing_dependency() -> str | None:
    """What to install for the plots, or None when matplotlib imports."""
    try:
        import matplotlib  # noqa: F401 - the report extra's one dependency
    except ImportError as error:
        return f"the chaos HTML report needs matplotlib ({error}): {INSTALL_HINT}"
    return None


def render(result: dict[str, object], history: History) -> str:
    """The whole report as one HTML document."""
    from orbitmq.chaos import plots  # matplotlib: only when a report is asked for

    rows = recovery(history)
    verdict = "passed" if result.get("ok") else "FAILED"
    checks = result.get("checks")
    checks = checks if isinstance(checks, dict) else {}
    stopped_early = result.get("stopped_early")
    sections = [
        f"<h1>orbitmq chaos: <span class={_verdict_class(bool(result.get('ok')))}>{verdict}</span></h1>",
        f"<p class=failed>Stopped early: {html.escape(str(stopped_early))}</p>" if stopped_early else "",
        _verdicts_html(checks),
        "<h2>Throughput and send latency</h2>",
        "<p>Per second; shaded: each fault from injection to heal, labelled with its round.</p>",
        plots.timeline_svg(timeline(history), fault_spans(history.faults)),
        "<h2>Recovery per fault</h2>",
        "<p>Seconds from the fault to the first acknowledged write started after it "
        "(writes) and until consumers had what was acknowledged by then (caught up).</p>",
        plots.recovery_svg(rows) if rows else "<p>No fault was injected.</p>",
        "<h2>Checkers</h2>",
        _checks_html(checks),
        "<h2>Faults per round</h2>",
        value_html(_fault_rows(history.faults, rows)),
        "<h2>Settings</h2>",
        value_html(_settings(result)),
    ]
    body = "\n".join(sections)
    return (
        "<!DOCTYPE html>\n<html lang=en>\n<head>\n<meta charset=utf-8>\n"
        f"<title>orbitmq chaos: {verdict}</title>\n<style>{_STYLE}</style>\n</head>\n"
        f"<body>\n{body}\n</body>\n</html>\n"
    )


def write_report(path: Path, result: dict[str, object], history: History) -> None:
    path.write_text(render(result, history), encoding="utf-8")


def default_report_path(result_file: Path) -> Path:
    """The result file's twin: ``chaos-result.json`` → ``chaos-result.html``."""
    twin = result_file.with_suffix(".html")
    return twin if twin != result_file else result_file.with_name(result_file.name + ".html")


def value_html(value: object) -> str:
    """Any JSON-shaped value as escaped HTML: dicts and lists of dicts as tables."""
    if isinstance(value, dict):
        if not value:
            return "<span class=none>(empty)</span>"
        cells = "".join(
            f"<tr><th>{html.escape(str(key))}</th><td>{value_html(item)}</td></tr>"
            for key, item in value.items()
        )
        return f"<table class=kv>{cells}</table>"
    if isinstance(value, list):
        if value and all(isinstance(item, dict) for item in value):
            return _rows_html(value)
        return (
            html.escape(", ".join(_scalar_text(item) for item in value)) or "<span class=none>(none)</span>"
        )
    if value is None:
        return "<span class=none>-</span>"
    return html.escape(_scalar_text(value))


def _rows_html(rows: list[dict[str, object]]) -> str:
    columns: dict[str, None] = {}
    for row in rows:
        columns.update(dict.fromkeys(row))
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{value_html(row.get(c))}</td>" for c in columns) + "</tr>" for row in rows
    )
    return f"<table class=rows><tr>{head}</tr>{body}</table>"


def _verdicts_html(checks: dict[str, object]) -> str:
    """One line of every checker's verdict above the plots (the tables come after them)."""
    items = []
    for name, check in checks.items():
        ok = isinstance(check, dict) and bool(check.get("ok"))
        items.append(
            f"<span class={_verdict_class(ok)}>{html.escape(str(name))}: {'ok' if ok else 'FAILED'}</span>"
        )
    return f"<p class=verdicts>{' '.join(items)}</p>"


def _checks_html(checks: dict[str, object]) -> str:
    rows = []
    for name, check in checks.items():
        check = check if isinstance(check, dict) else {"ok": False, "summary": check}
        ok = bool(check.get("ok"))
        violations = check.get("violations") or []
        rows.append(
            f"<tr><th>{html.escape(str(name))}</th>"
            f"<td class={_verdict_class(ok)}>{'ok' if ok else 'FAILED'}</td>"
            f"<td>{value_html(check.get('summary'))}</td>"
            f"<td>{value_html(violations) if violations else ''}</td></tr>"
        )
    head = "<tr><th>checker</th><th>verdict</th><th>summary</th><th>first violations</th></tr>"
    return f"<table class=checks>{head}{''.join(rows)}</table>"


def _settings(result: dict[str, object]) -> dict[str, object]:
    """The run's settings (seed, faults, ...) and its other top-level figures; the history's
    counts without its faults, which have their own table."""
    settings = dict(result.get("settings", {}))  # type: ignore[call-overload]
    for key, value in result.items():
        if key not in ("ok", "settings", "checks", "stopped_early"):
            settings[key] = value
    if isinstance(counts := settings.get("history"), dict):
        settings["history"] = {k: v for k, v in counts.items() if k != "faults"}
    return settings


def _fault_rows(faults: list[FaultRecord], rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Each fault's record (every field, so new ones show) with its recovery times."""
    return [
        {**asdict(fault), "writes_s": row["writes_s"], "caught_up_s": row["caught_up_s"]}
        for fault, row in zip(faults, rows, strict=True)
    ]


def _scalar_text(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


def _verdict_class(ok: bool) -> str:
    return "ok" if ok else "failed"


_STYLE = """
body { font-family: sans-serif; margin: 1.5em; color: #222; max-width: 1400px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.5em; }
table { border-collapse: collapse; margin: 0.3em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.5em; text-align: left; vertical-align: top; }
th { background: #f3f3f3; }
table table th { background: #fafafa; font-weight: normal; }
.ok { color: #17702a; font-weight: bold; }
.failed { color: #b00020; font-weight: bold; }
.none { color: #999; }
.verdicts span { margin-right: 1.2em; }
svg { max-width: 100%; height: auto; }
"""
