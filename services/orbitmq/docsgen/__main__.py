"""``python -m orbitmq.docsgen OUTPUT_DIR``: write every reference page into OUTPUT_DIR.

Run from the repository root (the chart and proto files are read relative to it);
``scripts/gen-docs`` does so.
"""

from __future__ import annotations

import sys
from pathlib import Path

from orbitmq.docsgen import render_all


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m orbitmq.docsgen OUTPUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for name, text in render_all().items():
        (out / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
