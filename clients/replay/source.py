"""Finding and reading the action table a replay plays.

The workload job writes ``OUT/actions.parquet/``, ``OUT/actions.jsonl/`` and
``OUT/summary.json``. The replay reads the JSON lines with
``clients.spark.actions.iter_actions`` (pure Python, lazy, time-ordered), so
it starts at once and holds a line per part file in memory. Accepted paths:

- ``OUT`` (the job's output directory), ``OUT/actions.jsonl`` or one JSON-lines
  file (a hand-written table, sorted by ``t``);
- ``OUT/actions.parquet``, or a directory holding only Parquet (what the job
  writes unless asked for JSON lines too): the JSON-lines twin beside it is
  used when there is one; otherwise the Parquet part files are streamed
  directly with pyarrow (the ``spark`` extra), or, without pyarrow, Spark
  converts them to sorted JSON lines in a temporary directory first, which
  costs a JVM start.

``checked`` wraps the stream: it refuses a row whose ``t`` goes backwards (a
hand-made table out of order would silently run late) and rows the replay
cannot play. ``shard`` keeps the clients of one shard of N (by a hash of the
client's name), so N replay processes, on one machine's cores or on several
machines, can share one table; their traces are analysed together.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clients.spark.actions import ACTIONS, Action, iter_actions, parquet_readable, parquet_to_jsonl

__all__ = ["ReplayError", "ActionTable", "open_table", "checked", "shard", "parse_shard"]


class ReplayError(Exception):
    """The replay cannot run (bad input, bad option); the message says why."""


@dataclass
class ActionTable:
    """A located action table: the JSON lines to stream and what is known ahead."""

    path: Path  # what iter_actions reads
    rows: int | None = None  # from summary.json, when there is one
    duration: float | None = None
    clients: int | None = None
    cleanup: Callable[[], None] | None = None  # removes a temporary conversion

    def actions(self) -> Iterator[Action]:
        return checked(iter_actions(self.path))

    def close(self) -> None:
        if self.cleanup is not None:
            self.cleanup()
            self.cleanup = None


def _has(directory: Path, suffix: str) -> bool:
    return any(p.name.startswith("part-") and p.name.endswith(suffix) for p in directory.iterdir())


def _summary(directory: Path) -> dict[str, Any]:
    path = directory / "summary.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def open_table(path: str | Path, *, log: Callable[[str], None] = print) -> ActionTable:
    """Locate the table at ``path`` (see the module doc); ``ReplayError`` if there is none."""
    path = Path(path)
    if not path.exists():
        raise ReplayError(f"no such action table: {path}")
    if path.is_file():
        return ActionTable(path)
    home = path.parent if path.name in ("actions.jsonl", "actions.parquet") else path
    summary = _summary(home)
    table = ActionTable(
        path,
        rows=summary.get("rows"),
        duration=summary.get("duration"),
        clients=len(summary.get("clients", ())) or None,
    )
    jsonl = home / "actions.jsonl"
    if _has(path, ".json"):
        return table
    if jsonl.is_dir() and _has(jsonl, ".json"):  # OUT, or OUT/actions.parquet with its twin
        table.path = jsonl
        return table
    parquet = path if _has(path, ".parquet") else home / "actions.parquet"
    if parquet.is_dir() and _has(parquet, ".parquet"):
        if parquet_readable():
            table.path = parquet
        else:
            table.path, table.cleanup = _convert(parquet, log)
        return table
    raise ReplayError(
        f"no action table under {path}: expected actions.jsonl/ or actions.parquet/ "
        "part files (the output of `minibroker workload generate`)"
    )


def _convert(parquet: Path, log: Callable[[str], None]) -> tuple[Path, Callable[[], None]]:
    """Parquet -> sorted JSON lines in a temporary directory, with Spark."""
    log(
        f"converting {parquet} to JSON lines with Spark (a JVM start; pyarrow would "
        "read it directly, and the workload job writes JSON lines too with --format parquet,jsonl)"
    )
    tmp = Path(tempfile.mkdtemp(prefix="minibroker-replay-"))
    out = tmp / "actions.jsonl"
    try:
        parquet_to_jsonl(parquet, out)
    except ImportError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ReplayError(
            f"{parquet} holds only Parquet, which needs pyarrow or Spark to read (pip install "
            "-e '.[spark]'), or regenerate with --format parquet,jsonl"
        ) from None
    except ValueError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ReplayError(f"cannot read {parquet} with Spark: {exc}") from None
    return out, lambda: shutil.rmtree(tmp, ignore_errors=True)


_NEEDS = {
    "send": ("dest",),
    "subscribe": ("dest", "sub"),
    "pace": ("sub",),
    "unsubscribe": ("sub",),
}


def checked(actions: Iterator[Action]) -> Iterator[Action]:
    """``actions``, refusing unknown kinds, missing columns and time going backwards."""
    last = float("-inf")
    try:
        for row, action in enumerate(actions, 1):
            if action.action not in ACTIONS:
                raise ReplayError(f"row {row} ({action.client}): unknown action {action.action!r}")
            for column in _NEEDS.get(action.action, ()):
                if getattr(action, column) is None:
                    raise ReplayError(f"row {row} ({action.client} {action.action}): no {column}")
            if action.t < last:
                raise ReplayError(
                    f"row {row} ({action.client}): t={action.t} comes after t={last}; the table must be sorted by t"
                )
            last = action.t
            yield action
    except (ValueError, TypeError) as exc:  # a line that is not JSON, or not an action
        raise ReplayError(f"bad action table: {exc}") from None


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` (0 <= I < N) as ``(I, N)``; ``ValueError`` otherwise."""
    index, slash, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i = n = -1
    if not slash or not 0 <= i < n:
        raise ValueError(f"expected I/N with 0 <= I < N, e.g. 0/4, not {text!r}")
    return i, n


def shard(actions: Iterator[Action], index: int, count: int) -> Iterator[Action]:
    """The rows of the clients in shard ``index`` of ``count`` (stable across runs)."""
    mine: dict[str, bool] = {}
    for action in actions:
        keep = mine.get(action.client)
        if keep is None:
            keep = mine[action.client] = zlib.crc32(action.client.encode()) % count == index
        if keep:
            yield action
