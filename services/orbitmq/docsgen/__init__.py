"""The generated reference pages of the docs site (``docs/reference/``), one module per page.

Each page is rendered from the code it documents — the click commands, the settings models, the
operator's CRDs, the chart's values schema, the metric inventory, the error reasons — so the
reference cannot drift from what the code does: ``scripts/gen-docs`` writes the pages and
``scripts/gen-docs --check`` (run by the test command) fails while a committed page differs from
what the code gives. Rendering is pure and deterministic (sorted where the source has no order,
no time stamps, no host names or home directories), which the check relies on.
"""

from __future__ import annotations

from collections.abc import Callable

from orbitmq.docsgen import cli_page, crds_page, errors_page, helm_page, metrics_page, settings_page

PAGES: dict[str, Callable[[], str]] = {
    "cli.md": cli_page.render,
    "crds.md": crds_page.render,
    "helm-values.md": helm_page.render,
    "settings.md": settings_page.render,
    "metrics.md": metrics_page.render,
    "errors.md": errors_page.render,
}
"""File name under ``docs/reference/`` -> the function that renders it (run from the repository root)."""


def render_all() -> dict[str, str]:
    """Every page's file name -> its Markdown."""
    return {name: render() for name, render in PAGES.items()}
