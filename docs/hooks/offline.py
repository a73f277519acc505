"""MkDocs hook: fail the build when a page would load anything from another host.

orbitmq's users often run air-gapped clusters and read these docs from a copy of the built
site, so every script, stylesheet, font, image and frame a page needs must come with the site.
The theme's Google Fonts are off in mkdocs.yml (``theme.font: false``) and Mermaid is shipped
(hooks/mermaid.py); this check keeps it so: a badge image from a CDN, a ``<script src="https:">``
added by an override, or a stylesheet importing a web font fails ``mkdocs build --strict``
(and a plain build too) instead of silently breaking the offline copy. Links a reader follows
(``<a href>``) are fine: they fetch nothing by themselves.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.pages import Page

REMOTE = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)
"""``https://``, ``http://`` and protocol-relative ``//host`` URLs (not ``data:`` or relative)."""
CSS_REMOTE = re.compile(r"""(?:url\(\s*['"]?|@import\s+['"])\s*((?:https?:)?//[^'")\s]+)""", re.IGNORECASE)
FETCHING = {
    "script": ("src",),
    "img": ("src", "srcset"),
    "iframe": ("src",),
    "frame": ("src",),
    "embed": ("src",),
    "object": ("data",),
    "source": ("src", "srcset"),
    "video": ("src", "poster"),
    "audio": ("src",),
    "track": ("src",),
    "input": ("src",),
    "image": ("href", "xlink:href"),  # SVG
    "use": ("href", "xlink:href"),  # SVG
}
LINK_FETCHES = {
    "stylesheet",
    "icon",
    "preload",
    "prefetch",
    "preconnect",
    "dns-prefetch",
    "modulepreload",
    "manifest",
}


class _Fetches(HTMLParser):
    """Collects every remote URL a browser would fetch on its own while showing the page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.remote: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        names: tuple[str, ...] = FETCHING.get(tag, ())
        if tag == "link" and LINK_FETCHES & set(values.get("rel", "").lower().split()):
            names = ("href",)
        for name in names:
            for url in re.split(r",\s*", values.get(name, "")):
                if REMOTE.match(url):
                    self.remote.append(f"<{tag} {name}={url.split()[0]}>")
        if "style" in values:
            self.remote += [f"<{tag} style> {url}" for url in CSS_REMOTE.findall(values["style"])]

    def handle_data(self, data: str) -> None:
        if self.lasttag == "style":
            self.remote += [f"<style> {url}" for url in CSS_REMOTE.findall(data)]


def remote_fetches(html: str) -> list[str]:
    """What in ``html`` would be loaded from another host (empty for a self-contained page)."""
    parser = _Fetches()
    parser.feed(html)
    parser.close()
    return parser.remote


def on_post_page(output: str, page: Page, config: MkDocsConfig, **_: Any) -> str:
    remote = remote_fetches(output)
    if remote:
        raise PluginError(
            f"{page.file.src_uri} loads from another host (the site must work offline): {remote}"
        )
    return output


def on_post_build(config: MkDocsConfig, **_: Any) -> None:
    """Stylesheets too: a theme or extra CSS that imports a web font would fetch it."""
    site = Path(config.site_dir)
    for css in sorted(site.rglob("*.css")):
        remote = CSS_REMOTE.findall(css.read_text(encoding="utf-8", errors="replace"))
        if remote:
            raise PluginError(f"{css.relative_to(site)} loads from another host: {remote}")
