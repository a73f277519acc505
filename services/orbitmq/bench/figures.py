"""A benchmark figure and how it is printed (one JSON object per line with ``--json``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass

import click


@dataclass(frozen=True, slots=True)
class Figure:
    figure: str
    value: float
    unit: str
    baseline: float | None
    baseline_name: str = ""
    target: str = ""

    @property
    def ratio(self) -> float | None:
        if not self.baseline:
            return None
        return self.value / self.baseline

    def as_json(self) -> str:
        data = asdict(self)
        data["value"] = round(self.value, 3)
        data["baseline"] = None if self.baseline is None else round(self.baseline, 3)
        data["ratio"] = None if self.ratio is None else round(self.ratio, 4)
        return json.dumps(data)


def emit(figure: Figure, as_json: bool, echo: Callable[[str], object] = click.echo) -> None:
    """Print ``figure`` with ``echo`` (a progress display passes its own, to print above it)."""
    if as_json:
        echo(figure.as_json())
        return
    ratio = "" if figure.ratio is None else f"  ratio {figure.ratio:.2f}"
    baseline = (
        "" if figure.baseline is None else f"  (baseline {figure.baseline:,.1f}: {figure.baseline_name})"
    )
    target = f"  target {figure.target}" if figure.target else ""
    echo(f"{figure.figure:<28} {figure.value:>14,.1f} {figure.unit}{ratio}{baseline}{target}")
