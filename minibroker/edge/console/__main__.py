"""``python -m minibroker.edge.console NODE_MODULES``: vendor the page's libraries from
``npm ci``'s ``node_modules``, each copied only with its pinned hash (``vendor.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

from minibroker.edge.console.vendor import vendor


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m minibroker.edge.console NODE_MODULES", file=sys.stderr)
        return 2
    problems = vendor(Path(argv[0]))
    for problem in problems:
        print(f"console vendor: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
