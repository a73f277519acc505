"""The chaos HTML report: its per-second series on a hand-made history, and the file itself opened
in headless Chromium (the DOM has the plots with each fault's label and the tables, the console
is quiet, the screenshot shows the shaded faults), once from a hand-made history with text that
needs escaping and once from a real one-round run through ``orbitmq chaos``."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

from orbitmq.chaos import plots
from orbitmq.chaos.checkers import CHECKERS
from orbitmq.chaos.history import Delivery, FaultRecord, History, Outcome, Send
from orbitmq.chaos.report import (
    FaultSpan,
    Timeline,
    default_report_path,
    fault_spans,
    p99_per_second,
    per_second,
    percentile,
    timeline,
    write_report,
)
from orbitmq.chaos.run import RunSettings, result

pytestmark = pytest.mark.timeout(150)

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (scripts/test installs it)"
)
SHADE_RGB = (249, 220, 198)
"""plots.FAULT_COLOUR (#e8731a) at alpha 0.25 over white: a fault span on the screenshot."""
WINDOW = (1280, 3200)


def _history() -> History:
    """20 s: 10 sends a second of 10 ms, except that sends started in [5, 6) wait 2 s (a fault
    from 5.0 to 6.0 s); each is delivered 0.5 s after its acknowledgement."""
    history = History()
    for n in range(200):
        started = n / 10
        ended = started + (2.0 if 5 <= started < 6 else 0.01)
        history.sends.append(Send(f"m{n}", "sync", started, ended, Outcome.ACKNOWLEDGED, 0, n))
        history.add_delivery(Delivery(f"m{n}", "G", ended + 0.5, 0, n))
    history.sends.append(Send("lost-answer", "sync", 9.0, 12.5, Outcome.UNKNOWN, error="DEADLINE_EXCEEDED"))
    history.drained = [Delivery(f"m{n}", "drain", 30.0, 0, n) for n in range(200)]
    history.faults = [
        FaultRecord(1, "kill-master", "broker <b>&a</b>", 41, 5.0, 6.0, 8.0),
        FaultRecord(2, "pause-slave", "broker broker-a-s1", 42, 14.0, None, 14.1, note="<script>x</script>"),
    ]
    return history


def test_per_second_bins_and_p99() -> None:
    assert per_second([0.0, 0.99, 1.0, 2.5, 7.0, -0.1], 3) == [2, 1, 1]  # 7.0 and -0.1: outside
    assert percentile([], 0.99) is None
    assert percentile(range(1, 101), 0.99) == 100  # nearest rank, as the checkers' p99
    assert percentile([5.0, 1.0], 0.99) == 5.0
    sends = [Send(f"s{n}", "sync", 0.0, 0.001 * (n + 1), Outcome.ACKNOWLEDGED) for n in range(100)]
    sends.append(Send("slow", "sync", 0.5, 1.5, Outcome.UNKNOWN))  # ended in second 1
    assert p99_per_second(sends, 3) == [100.0, 1000.0, None]

    line = timeline(_history())
    assert len(line.acknowledged) == 21  # the last delivery at 20.41 s; the drain (30 s) is not live
    assert line.acknowledged[:8] == [10, 10, 10, 10, 10, 0, 10, 20]  # second 5's sends ended in 7
    assert list(line.delivered) == ["G"]
    assert line.delivered["G"][:8] == [5, 10, 10, 10, 10, 5, 5, 15]
    assert sum(line.delivered["G"]) == 200
    assert line.p99_ms[0] == pytest.approx(10.0) and line.p99_ms[7] == pytest.approx(2000.0)
    assert line.p99_ms[12] == pytest.approx(3500.0)  # the timed-out attempt counts: a producer waited
    assert fault_spans(_history().faults) == [
        FaultSpan(5.0, 6.0, 1, "kill-master"),
        FaultSpan(14.0, 14.3, 2, "pause-slave"),  # never healed: to the round's end, at least 0.3 s
    ]
    assert default_report_path(Path("out/chaos-result.json")) == Path("out/chaos-result.html")
    assert default_report_path(Path("r.html")) == Path("r.html.html")


def test_past_sixty_faults_spans_and_bars_are_labelled_by_round() -> None:
    """Sixty names fit on the axis; more would overlap, so the faults table names them."""
    line = Timeline([10] * 130, {"G": [10] * 130}, [5.0] * 130)
    spans = [FaultSpan(2.0 * n, 2.0 * n + 1, n + 1, "kill-slave") for n in range(61)]
    rows: list[dict[str, object]] = [
        {"round": s.round, "fault": s.fault, "writes_s": 1.0, "caught_up_s": None} for s in spans
    ]
    assert "60 kill-slave" in _svg_texts(plots.timeline_svg(line, spans[:60]))
    assert "60 kill-slave" in _svg_texts(plots.recovery_svg(rows[:60]))
    for svg in (plots.timeline_svg(line, spans), plots.recovery_svg(rows)):
        texts = _svg_texts(svg)
        assert "61" in texts and not any("kill-slave" in text for text in texts)
    assert "never" in _svg_texts(plots.recovery_svg(rows[:1]))  # no caught-up time: marked


def _svg_texts(svg: str) -> set[str]:
    return set(re.findall(r"<text[^>]*>([^<]*)</text>", svg))


@needs_chromium
def test_a_report_renders_in_chromium_with_every_fault_and_checker(tmp_path: Path) -> None:
    history = _history()
    checks = [check(history) for check in CHECKERS.values()]
    outcome = result(
        RunSettings(seed=7, faults=["kill-master", "pause-slave"]), history, checks, "", 20.0, {}
    )
    outcome["checks"]["made_up"] = {  # type: ignore[index]
        "name": "made_up",
        "ok": False,
        "summary": {"committed": {"seen": 3, "of": 4}, "rows": [{"a": 1}, {"b": "<i>2</i>"}]},
        "violations": [{"message_id": "<m1>"}],
    }
    report = tmp_path / "report.html"
    write_report(report, outcome, history)
    text = report.read_text()
    assert "<script" not in text and "<b>&a</b>" not in text and "<i>2</i>" not in text  # all escaped
    assert "&lt;script&gt;x&lt;/script&gt;" in text and "broker &lt;b&gt;&amp;a&lt;/b&gt;" in text

    page = _open(report, tmp_path)
    assert page.svg_texts >= {"1 kill-master", "2 pause-slave", "acknowledged sends/s", "G deliveries/s"}
    assert page.svgs == 2  # the timeline and the recovery bars
    assert {
        "acknowledged_consumed",
        "order",
        "duplicates",
        "unacknowledged",
        "recovery",
        "made_up",
    } <= page.ths
    assert {"seed", "faults", "<m1>", "committed", "b", "writes_s", "caught_up_s"} <= page.ths | page.tds
    assert "FAILED" in page.tds  # made_up's verdict


@needs_chromium
def test_a_real_run_writes_a_report_next_to_its_result(tmp_path: Path) -> None:
    """One kill of the master through the CLI; the report's default place is beside ``--out``."""
    out = tmp_path / "result.json"
    command = [sys.executable, "-m", "orbitmq.cli.main", "--log-level", "error", "chaos", "--rounds", "1"]
    command += ["--fault", "kill-master", "--data-dir", str(tmp_path / "data"), "--out", str(out)]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=140)
    # 1: a checker failed (test_chaos_run's to judge); the report is written either way
    assert finished.returncode in (0, 1), f"{finished.stdout[-3000:]}\n{finished.stderr[-3000:]}"
    assert f"report in {tmp_path / 'result.html'}" in finished.stdout
    outcome = json.loads(out.read_text())
    assert not outcome["stopped_early"], outcome["stopped_early"]

    page = _open(tmp_path / "result.html", tmp_path)
    assert "1 kill-master" in page.svg_texts
    assert page.svgs == 2
    assert set(outcome["checks"]) <= page.ths
    target = outcome["history"]["faults"][0]["target"]
    assert target in page.tds


def test_without_matplotlib_the_cli_says_what_to_install(tmp_path: Path) -> None:
    """A matplotlib that fails to import (as an absent one does) stops the run before it starts
    a cluster, naming the extra; --no-report is the way around."""
    shadow = tmp_path / "shadow" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    command = [sys.executable, "-m", "orbitmq.cli.main", "chaos", "--out", str(tmp_path / "r.json")]
    path = [str(tmp_path / "shadow"), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    finished = subprocess.run(command, capture_output=True, text=True, timeout=60, env=env)
    assert finished.returncode == 1
    assert "pip install 'orbitmq[report]'" in finished.stderr and "--no-report" in finished.stderr
    assert not (tmp_path / "r.json").exists()


class _Page(HTMLParser):
    """What a test needs of the rendered DOM: svg count, the svgs' texts, table cells, and every
    attribute that could fetch something."""

    def __init__(self) -> None:
        super().__init__()
        self.svgs = 0
        self.svg_texts: set[str] = set()
        self.ths: set[str] = set()
        self.tds: set[str] = set()
        self.fetches: list[str] = []
        self._open: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.svgs += tag == "svg"
        self._open.append(tag)
        for name, value in attrs:
            if name in ("src", "href", "xlink:href") and not (value or "").startswith("#"):
                self.fetches.append(f"{tag} {name}={value}")
        if tag in ("script", "link", "iframe", "object", "embed", "img"):
            self.fetches.append(tag)

    def handle_endtag(self, tag: str) -> None:
        while self._open and self._open.pop() != tag:
            pass

    def handle_data(self, data: str) -> None:
        text = data.strip()
        if not text or not self._open:
            return
        innermost = self._open[-1]
        if innermost == "text" or (innermost == "tspan" and "text" in self._open):
            self.svg_texts.add(text)
        elif innermost in ("th", "td", "span"):
            (self.ths if self._innermost_cell() == "th" else self.tds).add(text)

    def _innermost_cell(self) -> str:
        return next((tag for tag in reversed(self._open) if tag in ("th", "td")), "")


def _open(report: Path, tmp_path: Path) -> _Page:
    """Chromium headless on the file: its DOM parsed, no console message, a screenshot that shows
    the plots (many colours, the fault shading, not mostly blank)."""
    assert CHROMIUM is not None
    screenshot = tmp_path / "report.png"
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    command += ["--enable-logging=stderr", "--v=0", f"--window-size={WINDOW[0]},{WINDOW[1]}"]
    command += [f"--screenshot={screenshot}", "--dump-dom", report.resolve().as_uri()]
    browser = subprocess.run(command, capture_output=True, text=True, timeout=90)
    assert browser.returncode == 0, browser.stderr[-3000:]
    console = [line for line in browser.stderr.splitlines() if re.search(r":CONSOLE[:(]", line)]
    assert not console, console
    page = _Page()
    page.feed(browser.stdout)
    assert not page.fetches, page.fetches  # self-contained: nothing to fetch

    with Image.open(screenshot) as image:
        rgb = image.convert("RGB")
    assert rgb.size == WINDOW
    colours = rgb.getcolors(maxcolors=WINDOW[0] * WINDOW[1]) or []
    assert len(colours) > 100  # text, lines, bars, shading: not a blank or one-colour page
    white = sum(count for count, colour in colours if colour == (255, 255, 255))
    assert white < 0.95 * WINDOW[0] * WINDOW[1]
    shaded = sum(count for count, colour in colours if _near(colour, SHADE_RGB))
    assert shaded > 1000, "no fault span drawn on the screenshot"
    return page


def _near(colour: tuple[int, ...], target: tuple[int, int, int]) -> bool:
    return all(abs(a - b) <= 4 for a, b in zip(colour, target, strict=False))
