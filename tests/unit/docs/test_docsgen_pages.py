"""The generated reference pages as a whole: the same bytes whoever generates them, tables that
Markdown reads as written, and ``scripts/gen-docs --check`` failing on a stale page."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import markdown
import pytest

from orbitmq.docsgen import PAGES

ROOT = Path(__file__).resolve().parents[3]


def _generate(out: Path, **env: str) -> dict[str, str]:
    subprocess.run(
        [sys.executable, "-m", "orbitmq.docsgen", str(out)],
        cwd=ROOT,
        env={**os.environ, **env},
        check=True,
        timeout=120,
    )
    return {path.name: path.read_text() for path in sorted(out.iterdir())}


def test_pages_do_not_depend_on_who_generates_them_or_their_environment(tmp_path: Path) -> None:
    """Two runs with other home directories and ``ORBITMQ_*`` variables set give the same bytes
    (the broker's data directory default is expanded from $HOME when its module loads; settings
    read from the environment must not leak in as defaults)."""
    first = _generate(tmp_path / "a", HOME=str(tmp_path / "home-a"))
    second = _generate(
        tmp_path / "b",
        HOME=str(tmp_path / "elsewhere" / "home-b"),
        ORBITMQ_NAMESRV="10.0.0.1:9876",
        ORBITMQ_BROKER_LISTEN="0.0.0.0:1",
        ORBITMQ_ACCESS_KEY="someone",
    )
    assert sorted(first) == sorted(PAGES)
    assert first == second
    assert str(tmp_path) not in "".join(first.values())


class _Cells(HTMLParser):
    """Cells per row of each table, and every element id."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[int]] = []
        self.ids: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.ids.extend(value for name, value in attrs if name == "id" and value)
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append(0)
        elif tag in ("td", "th"):
            self.tables[-1][-1] += 1


@pytest.mark.parametrize("name", sorted(PAGES))
def test_every_row_has_as_many_cells_as_its_header_and_anchors_are_unique(name: str) -> None:
    """An unescaped ``|`` in a help text or a regex would split a cell and shift the row; the
    check renders the page as MkDocs does (Python-Markdown's tables) and counts cells."""
    text = PAGES[name]()
    html = markdown.markdown(text, extensions=["tables", "attr_list", "admonition", "toc"])
    cells = _Cells()
    cells.feed(html)
    assert cells.tables, f"{name} has no table"
    for rows in cells.tables:
        assert len(set(rows)) == 1, f"{name}: a table with rows of {sorted(set(rows))} cells"
    assert len(cells.ids) == len(set(cells.ids)), f"{name}: an id used twice"


def _sandbox(tmp_path: Path) -> Path:
    """A checkout with the generator's inputs linked in and a copy of ``scripts/gen-docs``."""
    root = tmp_path / "repo"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "gen-docs", root / "scripts" / "gen-docs")
    for name in ("charts", "protos", "services", ".venv"):
        if (ROOT / name).exists():
            (root / name).symlink_to(ROOT / name)
    return root


def _gen_docs(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(root / "scripts" / "gen-docs"), *args],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_check_mode_fails_on_a_stale_missing_or_extra_page_and_passes_when_fresh(tmp_path: Path) -> None:
    root = _sandbox(tmp_path)
    written = _gen_docs(root)
    assert written.returncode == 0, written.stderr
    assert written.stdout == "generated: " + " ".join(sorted(PAGES)) + " \n"
    fresh = _gen_docs(root, "--check")
    assert fresh.returncode == 0, fresh.stderr

    reference = root / "docs" / "reference"
    (reference / "cli.md").unlink()
    settings = reference / "settings.md"
    settings.write_text(settings.read_text().replace("ORBITMQ_BROKER_FLUSH_MODE", "ORBITMQ_BROKER_FLUSH"))
    (reference / "old.md").write_text("# gone\n")
    stale = _gen_docs(root, "--check")
    assert stale.returncode == 1
    assert stale.stderr.splitlines() == [
        "gen-docs: docs/reference/cli.md is stale or missing; run scripts/gen-docs",
        "gen-docs: docs/reference/settings.md is stale or missing; run scripts/gen-docs",
        "gen-docs: docs/reference/old.md is no longer generated",
    ]
