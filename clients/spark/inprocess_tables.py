"""The trace read in this process: events in order, and the analysis's tables as rows.

The stdlib twin of ``clients.spark.schema`` and ``clients.spark.tables``: the
same columns, the same buckets, lists of dicts instead of DataFrames. Events
are merged from the inputs in the order the trace contract defines (``ts``,
input file, ``seq``) and folded once into per-bucket counters; the few event
kinds the detectors read one by one (subscriptions, flow control, slow marks,
swaps, journal events, connection samples, errors, sends) are kept. Backlogs
start again at every ``start`` event: a restarted broker's queues hold what
its ``recover`` events say, not what was enqueued before (the messages
recovered are the same messages). ``clients.spark.inprocess`` runs the
detectors on these tables.
"""

from __future__ import annotations

import csv
import heapq
import json
import math
import os
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minibroker.trace import FIELDS, SCHEMA_VERSION, type_ok
from minibroker.trace.segments import is_segments_dir

from .columns import DEST_COUNTS, DEST_EVENTS, JOURNAL_COLUMNS, SWAP_COLUMNS, USAGE_PCTS, TableSet
from .findings import REMOVALS, TraceFormatError

__all__ = [
    "Tables",
    "Row",
    "read_events",
    "build_tables",
    "check_inputs",
    "input_files",
    "write_csv",
    "series",
    "total_bytes",
    "fits_in_process",
    "INPROCESS_MAX_BYTES",
    "INPROCESS_MAX_EVENTS",
]

#: Inputs up to this size are analysed in this process (about a million events)...
INPROCESS_MAX_BYTES = 200 * 1024 * 1024
#: ...or up to this many events of Parquet segments.
INPROCESS_MAX_EVENTS = 1_000_000
#: Events kept one by one (everything else is only counted).
_KEPT = {
    "connect",
    "subscribe",
    "unsubscribe",
    "disconnect",
    "flow_block",
    "flow_unblock",
    "slow_consumer",
    "swap_out",
    "swap_in",
    "journal_roll",
    "journal_full",
    "journal_state",
    "connection",
    "write_timeout",
    "error",
    "page_in_blocked",
    "start",
    "recover",
    "send",
    "discard",
    "redeliver",
}

Row = dict[str, Any]


def input_files(inputs: list[str]) -> list[Path]:
    """The files named, and the files inside the directories named (as Spark reads them);
    a Parquet segments directory stays one input (read by ``minibroker.trace.parquet``)."""
    files: list[Path] = []
    for name in inputs:
        p = Path(name)
        if is_segments_dir(p):
            files.append(p)
        elif p.is_dir():
            files += sorted(f for f in p.iterdir() if f.is_file() and not f.name.startswith((".", "_")))
        else:
            files.append(p)
    return files


def _decode(line: str) -> Row | None:
    """One trace line, or None when it is not one (not JSON, no event, a field of the wrong type)."""
    try:
        e = json.loads(line)
    except ValueError:
        return None
    if not isinstance(e, dict) or not isinstance(e.get("event"), str) or e.get("ts") is None:
        return None
    for k, v in e.items():
        kind = FIELDS.get(k)
        if kind is not None and v is not None and not type_ok(kind, v):
            return None
    return e


def check_inputs(inputs: list[str], probe_lines: int = 1000) -> None:
    """Refuse inputs with no trace line in their first ``probe_lines`` lines, or of another
    schema version: what can be told cheaply, before any engine starts."""
    files = input_files(inputs)
    if not files:
        raise TraceFormatError(f"no trace events in {', '.join(inputs)}")
    good = False
    for path in files:
        if is_segments_dir(path):
            from minibroker.trace.parquet import count_rows

            good = good or count_rows(path) > 0  # typed columns: no line to probe
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f):
                if n >= probe_lines:
                    break
                e = _decode(line) if line.strip() else None
                if e is None:
                    continue
                if e.get("v") not in (None, SCHEMA_VERSION):
                    raise TraceFormatError(f"{path}: lines have a schema version other than {SCHEMA_VERSION}")
                good = True
                break
    if not good:
        raise TraceFormatError(f"no trace events in {', '.join(inputs)}")


def _one_file(path: Path, index: int, bad: list[int]) -> Iterator[tuple[float, int, int, Row]]:
    if is_segments_dir(path):
        from minibroker.trace.parquet import read_events as read_segments

        for n, e in enumerate(read_segments(path), 1):
            if e.get("event") is None or e.get("ts") is None:
                bad[0] += 1
                continue
            yield float(e["ts"]), index, int(e.get("seq") or n), e
        return
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            decoded = _decode(line)
            if decoded is None:
                bad[0] += 1
                continue
            yield float(decoded["ts"]), index, int(decoded.get("seq") or n), decoded


def read_events(inputs: list[str]) -> tuple[list[Row], dict[str, Any]]:
    """Every event of ``inputs`` in trace order, and {lines, corrupt, t0, t1}."""
    files = input_files(inputs)
    bad = [0]
    merged = heapq.merge(*(_one_file(p, i, bad) for i, p in enumerate(sorted(files, key=str))))
    events = [e for *_, e in merged]
    others = sum(1 for e in events if e.get("v") not in (None, SCHEMA_VERSION))
    if others:
        raise TraceFormatError(f"{others} lines have a schema version other than {SCHEMA_VERSION}")
    ts = [e["ts"] for e in events]
    info = {
        "lines": len(events) + bad[0],
        "corrupt": bad[0],
        "t0": min(ts) if ts else None,
        "t1": max(ts) if ts else None,
    }
    return events, info


@dataclass(kw_only=True)
class Tables(TableSet[list[Row]]):
    """The analysis's working set, as the Spark engine's tables (rows as dicts).
    ``events`` are the kept events (``_KEPT``)."""

    extra: dict[str, Any] = field(default_factory=dict)


_DEST_EVENTS = frozenset(DEST_EVENTS)
_COUNTS = DEST_COUNTS
_COUNT_OF = {
    "enqueue": "enqueued",
    "send": "sent",
    "dispatch": "dispatched",
    "page_in_blocked": "page_in_blocked",
    "sent": "client_sent",
    "received": "client_received",
    "acked": "client_acked",
}


def build_tables(events: list[Row], t0: float, t1: float, bucket: float) -> Tables:
    nb = int((t1 - t0) // bucket) + 1
    per: dict[str, dict[int, Row]] = defaultdict(dict)  # dest -> b -> counts
    # backlog per dest: the change within the epoch a bucket ends in (epochs start at `start`)
    delta: dict[tuple[str, int], int] = defaultdict(int)  # (dest, b) -> change in the bucket's last epoch
    starts: list[int] = []  # buckets with a `start`
    cons: dict[tuple[str | None, str | None, str | None, str, int], list[int]] = {}  # (consumer, sub, dest, source, b)
    use_b: dict[int, Row] = {}
    kept: list[Row] = []
    for e in events:
        t = e["ts"] - t0
        b = math.floor(t / bucket)
        name = e["event"]
        if name == "start":
            starts.append(b)
            for key in [k for k in delta if k[1] == b]:
                delta[key] = 0  # what came before the restart in this bucket is gone
            for rows in per.values():  # and so is the memory the destinations held
                if b in rows:
                    rows[b]["mem"] = None
        dest = e.get("dest")
        if dest is not None and name in _DEST_EVENTS:
            row = per[dest].get(b)
            if row is None:
                row = per[dest][b] = dict.fromkeys(_COUNTS, 0) | {"mem": None}
            col = _COUNT_OF.get(name)
            if col:
                row[col] += 1
            if name in REMOVALS:
                row["removed"] += 1
                if name == "ack":
                    row["acked"] += 1
                delta[(dest, b)] -= 1
            elif name == "enqueue":
                delta[(dest, b)] += 1
            elif name == "recover":
                row["recovered"] += e.get("count") or 0
                delta[(dest, b)] += e.get("count") or 0
            elif name == "swap_out":
                row["spooled"] += e.get("count") or 0
            elif name == "usage" and e.get("dest_mem_pct") is not None:
                row["mem"] = e["dest_mem_pct"] if row["mem"] is None else max(row["mem"], e["dest_mem_pct"])
        if name in ("dispatch", "ack", "received", "acked"):
            consumer = e.get("session") if e.get("session") is not None else e.get("client")
            source = "broker" if name in ("dispatch", "ack") else "client"
            got_acked = cons.setdefault((consumer, e.get("sub"), dest, source, b), [0, 0])
            got_acked[0 if name in ("dispatch", "received") else 1] += 1
        if name == "usage":
            u = use_b.setdefault(b, {})
            for c in USAGE_PCTS:
                if e.get(c) is not None:
                    u[c] = max(u.get(c, e[c]), e[c])
        if name in _KEPT:
            kept.append(e | {"t": t, "b": b})
    reset_b = set(starts)

    dest_rates = []
    for dest in sorted(per):
        rows = per[dest]
        backlog, mem = 0, None
        queue = dest.startswith("/queue/")
        for b in range(nb):
            counts = rows.get(b) or dict.fromkeys(_COUNTS, 0) | {"mem": None}
            if b in reset_b:
                backlog, mem = 0, None  # a restarted broker holds nothing in memory until it says so
            change = delta.get((dest, b), 0)
            backlog += change
            if counts["mem"] is not None:
                mem = counts["mem"]
            dest_rates.append(
                {
                    "dest": dest,
                    "b": b,
                    "t": b * bucket,
                    **{c: counts[c] for c in _COUNTS},
                    "backlog": backlog if queue else None,
                    "backlog_start": (backlog - change) if queue else None,
                    "dest_mem_pct": mem if mem is not None else 0,
                }
            )
    consumer_rates = [
        {
            "consumer": k[0],
            "sub": k[1],
            "dest": k[2],
            "source": k[3],
            "b": k[4],
            "t": k[4] * bucket,
            "received": v[0],
            "acked": v[1],
        }
        for k, v in cons.items()
    ]
    usage, last = [], dict.fromkeys(USAGE_PCTS)
    for b in range(nb):
        last.update(use_b.get(b, {}))
        usage.append({"b": b, "t": b * bucket, **{c: (v if v is not None else 0) for c, v in last.items()}})
    end = t1 - t0
    swaps = [{k: e.get(k) for k in SWAP_COLUMNS} for e in kept if e["event"] in ("swap_out", "swap_in")]
    jev = [e for e in kept if e["event"] in ("journal_roll", "journal_full", "journal_state")]
    journal = [
        {
            **{k: e.get(k) for k in JOURNAL_COLUMNS},
            "pinned": sum(1 for v in (e.get("file_live") or {}).values() if v > 0),
        }
        for e in jev
    ]
    latest: dict[str, Row] = {}
    for e in jev:
        if e.get("file_live") is not None:
            latest[e["store"]] = e
    journal_files = [
        {"store": s, "t": e["t"], "file": f, "live": n} for s, e in latest.items() for f, n in e["file_live"].items()
    ]
    return Tables(
        t0=t0,
        t1=t1,
        bucket=bucket,
        buckets=nb,
        events=kept,
        dest_rates=dest_rates,
        consumer_rates=consumer_rates,
        usage=usage,
        subscriptions=_subscriptions(kept, end),
        blocked=_blocked(kept, end),
        swaps=swaps,
        journal=journal,
        journal_files=journal_files,
    )


def _subscriptions(ev: list[Row], end: float) -> list[Row]:
    subs: dict[tuple[str, str | None], Row] = {}
    gone: dict[str, float] = {}
    for e in ev:
        name = e["event"]
        if name in ("subscribe", "unsubscribe") and e.get("session") is not None:
            s = subs.setdefault(
                (e["session"], e.get("sub")), {"start": None, "unsub": None, "dest": None, "prefetch": None}
            )
            if name == "subscribe":
                s["start"] = e["t"] if s["start"] is None else min(s["start"], e["t"])
                if s["dest"] is None:
                    s["dest"] = e.get("dest")
                if e.get("prefetch") is not None:
                    s["prefetch"] = max(s["prefetch"] or e["prefetch"], e["prefetch"])
            else:
                s["unsub"] = e["t"] if s["unsub"] is None else max(s["unsub"], e["t"])
        elif name == "disconnect" and e.get("session") is not None:
            gone[e["session"]] = min(gone.get(e["session"], e["t"]), e["t"])
    return [
        {
            "session": k[0],
            "sub": k[1],
            "dest": s["dest"],
            "start": s["start"],
            "end": min(s["unsub"] if s["unsub"] is not None else end, gone.get(k[0], end)),
            "prefetch": s["prefetch"],
        }
        for k, s in subs.items()
        if s["start"] is not None
    ]


def _blocked(ev: list[Row], end: float) -> list[Row]:
    flows: dict[tuple[str | None, str | None], list[Row]] = defaultdict(list)
    for e in ev:
        if e["event"] in ("flow_block", "flow_unblock"):
            flows[(e.get("session"), e.get("dest"))].append(e)
    out = []
    for (session, dest), rows in flows.items():
        rows.sort(key=lambda r: (r["t"], r.get("seq") or 0))
        for i, r in enumerate(rows):
            if r["event"] != "flow_block":
                continue
            nxt = rows[i + 1] if i + 1 < len(rows) else None
            stop = nxt["t"] if nxt is not None else end
            out.append(
                {
                    "session": session,
                    "dest": dest,
                    "usage": r.get("usage"),
                    "pct": r.get("pct"),
                    "start": r["t"],
                    "end": stop,
                    "open": nxt is None,
                    "duration": stop - r["t"],
                    "msg": r.get("msg"),
                }
            )
    return out


def write_csv(tb: Tables, findings: list[Row], directory: Path) -> None:
    """Every table as ``directory/NAME.csv`` (nested values as JSON), as the Spark engine writes them."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, rows in {**tb.outputs(), "findings": findings}.items():
        columns = list(rows[0]) if rows else []
        with open(directory / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(columns)
            for r in rows:
                w.writerow(
                    [
                        json.dumps(v)
                        if isinstance(v, (list, dict))
                        else ("true" if v is True else "false" if v is False else v)
                        for v in r.values()
                    ]
                )


def series(tb: Tables, findings: list[Row], top: int, names: dict[str, str] | None = None) -> dict[str, Any]:
    """The plots' series (the Spark engine's ``_series``, uncoarsened: a trace this small has
    few buckets): every consumer when there are few, else the busiest and those a finding names.
    Consumers are counted as the plots draw them, one per name (``names``: session -> the
    client's name; a client that reconnected 19 times is one consumer), before the busiest are kept."""
    # the broker's own counts; a client trace (replay --trace) has only the clients'
    source = "broker" if any(r["source"] == "broker" for r in tb.consumer_rates) else "client"
    totals: dict[tuple[Any, Any], int] = defaultdict(int)
    for r in tb.consumer_rates:
        if r["source"] == source:
            totals[(r["consumer"], r["sub"])] += r["received"]
    keep = busiest_by_name(totals, tb.subscriptions, names or {}, top)
    keep |= {(f["session"], f["sub"]) for f in findings if f["session"] and f["sub"]}
    if len(tb.subscriptions) <= top:
        keep |= {(s["session"], s["sub"]) for s in tb.subscriptions}
    return {
        "dest_rates": tb.dest_rates,
        "consumer_rates": [r for r in tb.consumer_rates if r["source"] == source and (r["consumer"], r["sub"]) in keep],
        "subscriptions": [s for s in tb.subscriptions if (s["session"], s["sub"]) in keep],
        "usage": tb.usage,
        "blocked": tb.blocked,
        "swaps": tb.swaps,
        "journal": tb.journal,
        "journal_files": tb.journal_files,
    }


def busiest_by_name(
    totals: dict[tuple[Any, Any], int], subscriptions: list[Row], names: dict[str, str], top: int
) -> set[tuple[Any, Any]]:
    """The (session, sub) pairs of the ``top`` busiest consumers, each consumer one label of
    the plots (``consumer_label``): every session of a name counts towards it, and is kept with it."""
    from .plots import consumer_label

    per_session: dict[Any, int] = defaultdict(int)
    for s in subscriptions:
        per_session[s["session"]] += 1
    by_label: dict[str, list[tuple[Any, Any]]] = defaultdict(list)
    for session, sub in totals:
        by_label[consumer_label(names, session, sub, per_session[session] or 1)].append((session, sub))
    ranked = sorted(by_label.items(), key=lambda kv: (-sum(totals[k] for k in kv[1]), kv[0]))
    return {pair for _, pairs in ranked[:top] for pair in pairs}


def total_bytes(inputs: list[str]) -> int:
    """Bytes of the JSON-lines inputs (Parquet segments count by ``fits_in_process``)."""
    return sum(os.path.getsize(p) for p in input_files(inputs) if p.is_file())


def fits_in_process(inputs: list[str]) -> bool:
    """Whether ``inputs`` are small enough for this engine: up to ``INPROCESS_MAX_BYTES``
    of JSON lines, or ``INPROCESS_MAX_EVENTS`` rows of Parquet, or a mix in proportion."""
    dirs = [p for p in input_files(inputs) if is_segments_dir(p)]
    rows = 0
    if dirs:
        from minibroker.trace.parquet import count_rows

        rows = sum(count_rows(d) for d in dirs)
    return total_bytes(inputs) / INPROCESS_MAX_BYTES + rows / INPROCESS_MAX_EVENTS <= 1
