"""What every reliability bench does with its figures: a table on stdout, a JSON file kept.

The JSON goes to ``bench/results/`` (ignored by git) unless ``--json`` names
another file: the run's name, its command line, when it ran (UTC), the
commit it ran at, and the bench's own record.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["RESULTS", "print_table", "save"]

RESULTS = Path(__file__).resolve().parent / "results"


def print_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A Markdown table (it pastes into docs/benchmarks.md as it is)."""
    cells = [[str(c) for c in header], *[[f"{c:,}" if isinstance(c, int) else str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    print("\n".join(lines), flush=True)


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip()
    except OSError:
        return ""


#: The commit the run started at (read once: the tree may move while a long run goes on).
COMMIT = _commit()


def save(name: str, record: dict[str, Any], path: str | None = None) -> Path:
    """Write ``record`` with the run's context as JSON; returns where."""
    now = datetime.datetime.now(datetime.UTC)
    target = Path(path) if path else RESULTS / f"{name}-{now:%Y%m%dT%H%M%SZ}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "bench": name,
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "date": now.isoformat(timespec="seconds"),
        "commit": COMMIT,
        **record,
    }
    target.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")
    print(f"JSON: {target}", flush=True)
    return target
