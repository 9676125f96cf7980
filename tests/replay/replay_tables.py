"""Hand-written action tables for the replay tests (rows as the workload job writes them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Row = dict[str, Any]


def row(t: float, client: str, seq: int, action: str, **columns: Any) -> Row:
    """One action; ``group`` defaults to the client's name without its number."""
    columns.setdefault("group", client.rsplit("-", 1)[0])
    return {"t": t, "client": client, "seq": seq, "action": action, **columns}


def producer(
    name: str, dest: str, times: list[float], *, start: float = 0.0, stop: float | None = None, **send: Any
) -> list[Row]:
    """connect, one send per time, disconnect."""
    rows = [row(start, name, 0, "connect", dest=dest)]
    send.setdefault("size", 100)
    rows += [row(t, name, i, "send", dest=dest, **send) for i, t in enumerate(times, 1)]
    rows.append(row(stop if stop is not None else times[-1], name, len(times) + 1, "disconnect", dest=dest))
    return rows


def consumer(
    name: str,
    dest: str,
    *,
    start: float = 0.0,
    stop: float,
    ack: str = "client-individual",
    prefetch: int | None = 10,
    process: float = 0.0,
    paces: tuple[tuple[float, float], ...] = (),
    **sub: Any,
) -> list[Row]:
    """connect, subscribe, paces, unsubscribe and disconnect at ``stop``."""
    rows = [
        row(start, name, 0, "connect", dest=dest, client_id=sub.pop("client_id", None)),
        row(start, name, 1, "subscribe", dest=dest, sub=name, ack=ack, prefetch=prefetch, process=process, **sub),
    ]
    seq = 2
    for t, p in paces:
        rows.append(row(t, name, seq, "pace", dest=dest, sub=name, process=p))
        seq += 1
    rows += [
        row(stop, name, seq, "unsubscribe", dest=dest, sub=name),
        row(stop, name, seq + 1, "disconnect", dest=dest),
    ]
    return rows


def write_table(path: Path, rows: list[Row]) -> Path:
    """Rows sorted by (t, client, seq), nulls dropped, as one JSON-lines file."""
    rows = sorted(rows, key=lambda r: (r["t"], r["client"], r["seq"]))
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n")
    return path
