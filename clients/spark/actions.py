"""Stream an action table in time order, without Spark.

The workload job writes ``DIR/actions.parquet/part-*.parquet`` (and, when
asked, ``DIR/actions.jsonl/part-*.json``): each part file is sorted by ``(t,
client, seq)``. ``iter_actions`` merges the parts lazily, so a replay driver
can start at once and hold one line (JSON) or one row group's batch
(Parquet) per part file in memory. The JSON lines are read with the standard
library; Parquet with pyarrow (part of the ``spark`` extra).

    from clients.spark.actions import iter_actions
    for action in iter_actions("out/"):
        ...  # action.t, action.client, action.action, ...
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Action", "ACTIONS", "iter_actions", "read_summary", "part_files", "parquet_readable"]

# The kinds of action, in the order a client's actions can appear.
ACTIONS = ("connect", "subscribe", "send", "pace", "unsubscribe", "disconnect")


@dataclass(frozen=True, slots=True)
class Action:
    """One row of the action table (see docs/workloads.md for each column)."""

    t: float
    client: str
    seq: int
    action: str
    group: str
    dest: str | None = None
    sub: str | None = None
    size: int | None = None
    priority: int | None = None
    persistent: bool | None = None
    headers: dict[str, str] | None = None
    selector: str | None = None
    ack: str | None = None
    prefetch: int | None = None
    process: float | None = None
    client_id: str | None = None

    @property
    def key(self) -> tuple[float, str, int]:
        return (self.t, self.client, self.seq)


def _parts(directory: Path, suffix: str) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.startswith("part-") and p.name.endswith(suffix))


def part_files(path: str | Path) -> list[Path]:
    """The part files of an action table: ``path`` is the output directory, its
    ``actions.jsonl`` or ``actions.parquet`` directory, or a single file. An output
    directory's JSON lines are preferred when both are there (no pyarrow needed)."""
    path = Path(path)
    if path.is_file():
        return [path]
    for name, suffix in (("actions.jsonl", ".json"), ("actions.parquet", ".parquet")):
        if (path / name).is_dir() and _parts(path / name, suffix):
            return _parts(path / name, suffix)
    parts = _parts(path, ".json") or _parts(path, ".parquet")
    if not parts:
        raise FileNotFoundError(f"no actions.jsonl or actions.parquet part files under {path}")
    return parts


def _read(path: Path, batch_rows: int = 65_536) -> Iterator[tuple[tuple[float, str, int], Action]]:
    if path.name.endswith(".parquet"):
        yield from _read_parquet(path, batch_rows)
        return
    with open(path, encoding="utf-8") as f:
        for line in f:
            row: dict[str, Any] = json.loads(line)
            action = Action(**row)
            yield (action.t, action.client, action.seq), action


def _read_parquet(path: Path, batch_rows: int = 65_536) -> Iterator[tuple[tuple[float, str, int], Action]]:
    """One Parquet part file's rows, in file order, a batch at a time (pyarrow)."""
    import pyarrow.parquet as pq

    with pq.ParquetFile(path) as f:
        for batch in f.iter_batches(batch_size=batch_rows):
            for row in batch.to_pylist():
                headers = row["headers"]
                if headers is not None:  # a Parquet map reads back as (key, value) pairs
                    row["headers"] = dict(headers)
                action = Action(**row)
                yield (action.t, action.client, action.seq), action


def parquet_readable() -> bool:
    """Whether this Python can read Parquet without Spark (pyarrow is installed)."""
    try:
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        return False
    return True


def iter_actions(path: str | Path) -> Iterator[Action]:
    """Every action in ``(t, client, seq)`` order."""
    parts = part_files(path)
    # one batch per part file is held at once: keep their sum near 256k rows
    batch_rows = max(4_096, 262_144 // len(parts))
    streams = [_read(p, batch_rows) for p in parts]
    if len(streams) == 1:
        for _, action in streams[0]:
            yield action
        return
    for _, action in heapq.merge(*streams, key=lambda item: item[0]):
        yield action


def read_summary(path: str | Path) -> dict[str, Any]:
    """``summary.json`` of an output directory: counts, clients, duration."""
    return json.loads((Path(path) / "summary.json").read_text(encoding="utf-8"))


def parquet_to_jsonl(parquet: Path, out: Path) -> None:
    """Rewrite a Parquet action table as JSON-lines part files sorted by time (a
    small Spark job, for ``replay``). Raises ``ValueError`` with Spark's reason."""
    from pyspark.sql import SparkSession

    from clients.spark.session import get_session, spark_error, spark_errors

    ours = SparkSession.getActiveSession() is None
    spark = get_session("minibroker-replay-convert")
    try:
        spark.read.parquet(str(parquet)).orderBy("t", "client", "seq").write.json(str(out))
    except spark_errors() as exc:
        raise ValueError(spark_error(exc)) from None
    finally:
        if ours:  # free the JVM's memory before the replay starts
            spark.stop()
