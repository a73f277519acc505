"""``python -m orbitmq_operator.monitoring DIR``: write the dashboards' JSON files into DIR."""

from __future__ import annotations

import sys
from pathlib import Path

from orbitmq_operator.monitoring.dashboards import dashboard_files


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m orbitmq_operator.monitoring OUTPUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    for name, text in dashboard_files().items():
        (out / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
