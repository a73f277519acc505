"""The documentation site as a reader sees it (issue 28): ``mkdocs build --strict`` once, the site
served over plain HTTP on 127.0.0.1 (the search runs in a worker that fetch()es its index, which
file:// forbids), and the home page, a how-to, the CLI reference and a concept page opened in
headless Chromium. Each page has the navigation tabs and the search box, its Mermaid diagrams
are drawn as SVG, its screenshot is not blank, and the search answers a query.

Offline is proven from both ends: the built HTML and CSS name nothing to fetch from another host,
and the pages and their workers requested nothing but 127.0.0.1 (DevTools' record of every
request), while a proxy refused anything else as an air-gapped network would
(tests/browserkit.py). A build without the shipped Mermaid makes the page ask unpkg.com and
draws no diagram: the last test proves these checks would catch that.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from browserkit import CHROMIUM, AirGap, Browser, attributes, walk

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(
        CHROMIUM is None, reason="Debian's chromium is not installed (scripts/test installs it)"
    ),
]

ROOT = Path(__file__).resolve().parents[3]
MERMAID_HOOK = ROOT / "docs" / "hooks" / "mermaid.py"
SECTIONS = [
    "Home",
    "Getting started",
    "Concepts",
    "How-to guides",
    "Operations",
    "Reference",
    "Benchmarks",
    "Test bed",
    "Contributing",
    "Architecture",
    "Status",
]
"""The navigation tabs, in mkdocs.yml's order."""
PAGES = {
    "home": "",
    "how-to": "how-to/install-with-helm/",
    "cli-reference": "reference/cli/",
    "concept": "concepts/topics-and-queues/",
}


def _build(config: Path, site: Path, strict: bool = True) -> None:
    command = [sys.executable, "-m", "mkdocs", "build", "--config-file", str(config), "-d", str(site)]
    command.append("--strict" if strict else "--no-strict")
    built = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=180, env=_env())
    assert built.returncode == 0, built.stderr[-4000:]


def _env() -> dict[str, str]:
    return {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


@dataclass
class Served:
    """A built site on an HTTP server of this process; ``hits`` lists the paths it was asked for."""

    site: Path
    base: str
    hits: list[str] = field(default_factory=list)


@contextlib.contextmanager
def _serve(site: Path) -> Iterator[Served]:
    served = Served(site, "")

    class Handler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            served.hits.append(self.path)

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(site))
    )
    served.base = f"http://127.0.0.1:{server.server_address[1]}/"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    built = tmp_path_factory.mktemp("site") / "site"
    _build(ROOT / "mkdocs.yml", built)
    with _serve(built) as served:
        yield served


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Browser, AirGap]]:
    air_gap = AirGap()
    chromium = Browser(tmp_path_factory.mktemp("chromium") / "profile", air_gap)
    try:
        yield chromium, air_gap
    finally:
        chromium.close()
        air_gap.shutdown()
        air_gap.server_close()


class _Fetches(HTMLParser):
    """Attributes of a page that name another host, except on ``<a>`` (a link fetches nothing)
    and XML namespaces (names, not addresses)."""

    def __init__(self) -> None:
        super().__init__()
        self.remote: list[str] = []
        self.scripts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if tag != "a" and not name.startswith("xmlns") and re.match(r"\s*(https?:)?//", value or ""):
                self.remote.append(f"<{tag} {name}={value}>")
            if tag == "script" and name == "src":
                self.scripts.append(value or "")


def test_the_built_site_ships_mermaid_and_names_no_other_host(site: Served) -> None:
    pages = sorted(site.site.rglob("*.html"))
    in_nav = _nav_urls("")
    assert len(in_nav) == 36  # the fixed layout of issue 28
    assert {str(p.relative_to(site.site)) for p in pages} == {"404.html"} | {f"{u}index.html" for u in in_nav}
    for page in pages:
        parser = _Fetches()
        parser.feed(page.read_text(encoding="utf-8"))
        assert not parser.remote, f"{page.relative_to(site.site)}: {parser.remote}"
        if page.name != "404.html":
            assert any(src.endswith("assets/javascripts/mermaid.min.js") for src in parser.scripts), page
    for css in site.site.rglob("*.css"):
        assert not re.search(r"url\(\s*['\"]?(https?:)?//|@import", css.read_text(encoding="utf-8")), css
    shipped = (site.site / "assets/javascripts/mermaid.min.js").read_bytes()
    pinned = re.search(r'SCRIPT_SHA256 = "([0-9a-f]{64})"', MERMAID_HOOK.read_text())
    assert pinned is not None and hashlib.sha256(shipped).hexdigest() == pinned.group(1)


@pytest.mark.parametrize("name", list(PAGES))
def test_a_page_renders_with_navigation_search_and_diagrams(
    name: str, site: Served, browser: tuple[Browser, AirGap], tmp_path: Path
) -> None:
    chromium, _ = browser
    first_event = len(chromium.events)
    url = site.base + PAGES[name]
    chromium.open(url)

    tabs = chromium.wait(lambda: chromium.evaluate(_TAB_LABELS))
    assert tabs == SECTIONS
    linked = chromium.evaluate(
        "[...document.querySelectorAll('nav.md-nav--primary a.md-nav__link[href]')].map(a => a.href)"
    )
    assert set(_nav_urls(site.base)) <= {link.split("#")[0] for link in linked}  # every page, every section
    assert chromium.evaluate("!!document.querySelector('form.md-search__form input.md-search__input')")
    assert chromium.evaluate("document.querySelector('article h1') !== null")

    expected = len(re.findall(r'<pre class="mermaid">', _html_of(site, PAGES[name])))
    if name in ("home", "concept"):
        assert expected >= 1, f"{url} has no Mermaid diagram"
    diagrams: list[dict[str, Any]] = []
    if expected:
        try:
            diagrams = chromium.wait(
                lambda: len(_drawn(chromium)) >= expected and _drawn(chromium), timeout=30
            )
        except AssertionError:
            off_site = _off_host(chromium.requested_urls(first_event), site.base)
            raise AssertionError(
                f"{url}: {expected} Mermaid diagram(s) not drawn in 30 s; requests off the site:"
                f" {off_site}, errors: {chromium.errors(first_event)}"
            ) from None
    for svg in diagrams:
        assert svg["shapes"] >= 3 and not svg["error"], svg

    viewport = tuple(chromium.evaluate("[innerWidth, innerHeight]"))
    _looks_drawn(chromium.screenshot(tmp_path / f"{name}.png"), viewport)
    if diagrams:
        chromium.evaluate("document.querySelector('div.mermaid').scrollIntoView()")
        _looks_drawn(chromium.screenshot(tmp_path / f"{name}-diagram.png"), viewport)
    assert not chromium.errors(since=first_event)
    off_host = _off_host(chromium.requested_urls(first_event), site.base)
    assert not off_host, off_host


def test_search_answers_a_query_from_the_shipped_index(site: Served, browser: tuple[Browser, AirGap]) -> None:
    chromium, _ = browser
    first_event = len(chromium.events)
    chromium.open(site.base)
    chromium.evaluate(
        "(() => { const input = document.querySelector('input.md-search__input');"
        " input.focus(); input.value = 'failover';"
        " input.dispatchEvent(new Event('input', {bubbles: true})); })()"
    )
    count = "document.querySelectorAll('.md-search-result__item').length"
    assert chromium.wait(lambda: chromium.evaluate(count), timeout=30) > 0
    assert "/search/search_index.json" in site.hits
    # The search worker fetched the index: a worker's requests are judged with the page's.
    assert f"{site.base}search/search_index.json" in chromium.requested_urls(first_event)
    off_host = _off_host(chromium.requested_urls(first_event), site.base)
    assert not off_host, off_host


def test_without_the_shipped_mermaid_the_checks_fail(
    site: Served, tmp_path: Path, browser: tuple[Browser, AirGap]
) -> None:
    """The same site built without the Mermaid hook and script: Material asks unpkg.com for
    Mermaid, the page's requests show it, and no diagram is drawn (what the tests above would report)."""
    chromium, air_gap = browser
    variant = _variant(tmp_path, hooks=[str(ROOT / "docs" / "hooks" / "offline.py")], extra_javascript=[])
    _build(variant, tmp_path / "site")
    first_event = len(chromium.events)
    unpkg = "https://unpkg.com/mermaid@11/dist/mermaid.min.js"
    with _serve(tmp_path / "site") as served:
        chromium.open(served.base)
        chromium.wait(lambda: unpkg in chromium.requested_urls(first_event), timeout=30)
        assert "unpkg.com:443" in air_gap.hosts  # refused by the air gap
        time.sleep(2)
        assert not _drawn(chromium)


def test_a_page_loading_from_another_host_fails_the_build(tmp_path: Path) -> None:
    """docs/hooks/offline.py: a badge from a CDN is refused at build time, before any browser."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Badge\n\n![build](https://img.shields.io/badge/build-passing-green)\n")
    variant = _variant(tmp_path, docs_dir=str(docs), nav=["index.md"])
    with pytest.raises(AssertionError, match=r"index\.md loads from another host.*img\.shields\.io"):
        _build(variant, tmp_path / "site", strict=False)


def _variant(tmp_path: Path, **replaced: Any) -> Path:
    """mkdocs.yml with some keys replaced (mkdocs' INHERIT), written as YAML (JSON is YAML)."""
    variant = tmp_path / "mkdocs.yml"
    hooks = [str(ROOT / "docs" / "hooks" / name) for name in ("mermaid.py", "offline.py")]
    variant.write_text(
        json.dumps(
            {"INHERIT": str(ROOT / "mkdocs.yml"), "docs_dir": str(ROOT / "docs"), "hooks": hooks, **replaced}
        )
    )
    return variant


_TAB_LABELS = "[...document.querySelectorAll('nav.md-tabs a.md-tabs__link')].map(a => a.textContent.trim())"


def _off_host(urls: list[str], base: str) -> list[str]:
    """Requests that left the served site (``data:`` and ``blob:`` URLs are made in the page)."""
    return [url for url in urls if not url.startswith((base, "data:", "blob:"))]


def _nav_urls(base: str) -> list[str]:
    """The URL of each page in mkdocs.yml's nav (directory URLs: ``how-to/x.md`` is ``how-to/x/``)."""
    pages = re.findall(r"^\s*- [^:]+: (\S+)\.md$", (ROOT / "mkdocs.yml").read_text(), re.MULTILINE)
    return [base if page == "index" else f"{base}{page}/" for page in pages]


def _html_of(site: Served, path: str) -> str:
    return (site.site / path / "index.html").read_text(encoding="utf-8")


def _drawn(chromium: Browser) -> list[dict[str, Any]]:
    """The Mermaid diagrams drawn so far: Material puts each SVG in a closed shadow root of a
    ``div.mermaid`` (which page scripts cannot read, DevTools can)."""
    drawn = []
    for node in walk(chromium.dom()):
        if node.get("localName") != "div" or "mermaid" not in attributes(node).get("class", "").split():
            continue
        for svg in (
            n for root in node.get("shadowRoots", []) for n in walk(root) if n.get("localName") == "svg"
        ):
            inside = list(walk(svg))
            shapes = sum(
                n.get("localName") in ("rect", "path", "polygon", "circle", "ellipse") for n in inside
            )
            text = " ".join(n.get("nodeValue", "") for n in inside if n.get("nodeType") == 3)
            drawn.append({"shapes": shapes, "error": "Syntax error" in text, "text": text[:200]})
    return drawn


def _looks_drawn(screenshot: Path, window: tuple[int, ...]) -> None:
    with Image.open(screenshot) as image:
        rgb = image.convert("RGB")
    assert rgb.size == window
    colours = rgb.getcolors(maxcolors=window[0] * window[1]) or []
    assert len(colours) > 50, "a blank or one-colour page"
    white = sum(count for count, colour in colours if colour == (255, 255, 255))
    assert white < 0.97 * window[0] * window[1]
