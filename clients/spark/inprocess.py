"""The trace analysis in this process: the Spark job's tables and detectors, in plain Python.

A lab run's trace holds some thousands of events; starting a JVM to analyse
it costs more than the analysis. This module reads such traces with the
standard library and computes the same tables (``Tables``, lists of dicts with
the Spark tables' columns) and the same findings as ``clients.spark.tables``
and ``clients.spark.detectors``; a test runs both engines over every lab run
and holds their findings equal. ``analyze`` in ``clients.spark.analyze``
picks this engine for inputs below ``INPROCESS_MAX_BYTES``.

Theory of operation: events are merged from the inputs in the order the
trace contract defines (``ts``, input file, ``seq``) and folded once into
per-bucket counters; the few event kinds the detectors read one by one
(subscriptions, flow control, slow marks, swaps, journal events, connection
samples, errors) are kept. Backlogs start again at every ``start`` event: a
restarted broker's queues hold what its ``recover`` events say, not what was
enqueued before (the messages recovered are the same messages).
"""

from __future__ import annotations

import heapq
import json
import math
import os
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minibroker.trace import FIELDS, SCHEMA_VERSION, _type_ok

from .findings import CURED_BY, REMOVALS, SUMMARY, Params, TraceFormatError, java_format
from .findings import DETECTORS as NAMES

__all__ = ["Tables", "TraceFormatError", "read_events", "build_tables", "find_all", "check_inputs",
           "INPROCESS_MAX_BYTES"]

#: Inputs up to this size are analysed in this process (about a million events).
INPROCESS_MAX_BYTES = 200 * 1024 * 1024
#: Events kept one by one (everything else is only counted).
_KEPT = {"connect", "subscribe", "unsubscribe", "disconnect", "flow_block", "flow_unblock", "slow_consumer",
         "swap_out", "swap_in", "journal_roll", "journal_full", "journal_state", "connection",
         "write_timeout", "error", "page_in_blocked", "start", "recover", "send", "discard"}

Row = dict[str, Any]


def input_files(inputs: list[str]) -> list[Path]:
    """The files named, and the files inside the directories named (as Spark reads them)."""
    files: list[Path] = []
    for name in inputs:
        p = Path(name)
        if p.is_dir():
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
        if kind is not None and v is not None and not _type_ok(kind, v):
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
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            e = _decode(line)
            if e is None:
                bad[0] += 1
                continue
            yield float(e["ts"]), index, int(e.get("seq") or n), e


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
    info = {"lines": len(events) + bad[0], "corrupt": bad[0],
            "t0": min(ts) if ts else None, "t1": max(ts) if ts else None}
    return events, info


@dataclass
class Tables:
    """The analysis's working set, as the Spark engine's tables (rows as dicts)."""

    t0: float
    t1: float
    bucket: float
    buckets: int
    events: list[Row]  # kept events (``_KEPT``) with t and b
    dest_rates: list[Row]
    consumer_rates: list[Row]
    usage: list[Row]
    subscriptions: list[Row]
    blocked: list[Row]
    swaps: list[Row]
    journal: list[Row]
    journal_files: list[Row]
    extra: dict[str, Any] = field(default_factory=dict)

    def outputs(self) -> dict[str, list[Row]]:
        return {"dest_rates": self.dest_rates, "consumer_rates": self.consumer_rates,
                "usage": self.usage, "subscriptions": self.subscriptions, "blocked": self.blocked,
                "swaps": self.swaps, "journal": self.journal, "journal_files": self.journal_files}


_DEST_EVENTS = {"enqueue", "send", "dispatch", "recover", "usage", "page_in_blocked", "swap_out",
                "sent", "received", "acked", *REMOVALS}
_COUNTS = ["enqueued", "sent", "dispatched", "acked", "removed", "recovered", "spooled",
           "page_in_blocked", "client_sent", "client_received", "client_acked"]
_COUNT_OF = {"enqueue": "enqueued", "send": "sent", "dispatch": "dispatched",
             "page_in_blocked": "page_in_blocked", "sent": "client_sent",
             "received": "client_received", "acked": "client_acked"}


def build_tables(events: list[Row], t0: float, t1: float, bucket: float) -> Tables:
    nb = int((t1 - t0) // bucket) + 1
    per: dict[str, dict[int, Row]] = defaultdict(dict)  # dest -> b -> counts
    # backlog per dest: the change within the epoch a bucket ends in (epochs start at `start`)
    delta: dict[tuple[str, int], int] = defaultdict(int)  # (dest, b) -> change in the bucket's last epoch
    starts: list[int] = []  # buckets with a `start`
    cons: dict[tuple[str, str | None, str | None, str, int], list[int]] = {}
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
            key = (consumer, e.get("sub"), dest, source, b)
            c = cons.setdefault(key, [0, 0])
            c[0 if name in ("dispatch", "received") else 1] += 1
        if name == "usage":
            u = use_b.setdefault(b, {})
            for c in ("mem_pct", "store_pct", "temp_pct"):
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
                backlog = 0
            change = delta.get((dest, b), 0)
            backlog += change
            if counts["mem"] is not None:
                mem = counts["mem"]
            dest_rates.append({"dest": dest, "b": b, "t": b * bucket,
                               **{c: counts[c] for c in _COUNTS},
                               "backlog": backlog if queue else None,
                               "backlog_start": (backlog - change) if queue else None,
                               "dest_mem_pct": mem if mem is not None else 0})
    consumer_rates = [{"consumer": k[0], "sub": k[1], "dest": k[2], "source": k[3], "b": k[4],
                       "t": k[4] * bucket, "received": v[0], "acked": v[1]} for k, v in cons.items()]
    usage, last = [], {"mem_pct": None, "store_pct": None, "temp_pct": None}
    for b in range(nb):
        last.update(use_b.get(b, {}))
        usage.append({"b": b, "t": b * bucket, **{c: (v if v is not None else 0) for c, v in last.items()}})
    end = t1 - t0
    swaps = [{k: e.get(k) for k in ("t", "event", "dest", "sub", "session", "count", "bytes", "temp_pct",
                                    "mem_pct")} for e in kept if e["event"] in ("swap_out", "swap_in")]
    jev = [e for e in kept if e["event"] in ("journal_roll", "journal_full", "journal_state")]
    journal = [{**{k: e.get(k) for k in ("t", "event", "store", "layout", "file", "files", "live",
                                         "live_bytes", "capacity", "dest")},
                "pinned": sum(1 for v in (e.get("file_live") or {}).values() if v > 0)} for e in jev]
    latest: dict[str, Row] = {}
    for e in jev:
        if e.get("file_live") is not None:
            latest[e["store"]] = e
    journal_files = [{"store": s, "t": e["t"], "file": f, "live": n}
                     for s, e in latest.items() for f, n in e["file_live"].items()]
    return Tables(t0, t1, bucket, nb, kept, dest_rates, consumer_rates, usage,
                  _subscriptions(kept, end), _blocked(kept, end), swaps, journal, journal_files)


def _subscriptions(ev: list[Row], end: float) -> list[Row]:
    subs: dict[tuple[str, str], Row] = {}
    gone: dict[str, float] = {}
    for e in ev:
        name = e["event"]
        if name in ("subscribe", "unsubscribe") and e.get("session") is not None:
            s = subs.setdefault((e["session"], e.get("sub")), {"start": None, "unsub": None, "dest": None,
                                                              "prefetch": None})
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
    return [{"session": k[0], "sub": k[1], "dest": s["dest"], "start": s["start"],
             "end": min(s["unsub"] if s["unsub"] is not None else end, gone.get(k[0], end)),
             "prefetch": s["prefetch"]}
            for k, s in subs.items() if s["start"] is not None]


def _blocked(ev: list[Row], end: float) -> list[Row]:
    flows: dict[tuple[str, str], list[Row]] = defaultdict(list)
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
            out.append({"session": session, "dest": dest, "usage": r.get("usage"), "pct": r.get("pct"),
                        "start": r["t"], "end": stop, "open": nxt is None, "duration": stop - r["t"],
                        "msg": r.get("msg")})
    return out


# --- detectors -------------------------------------------------------------------------


def _finding(detector: str, start: float, end: float, summary: str, evidence: dict[str, Any], *,
             dest: str | None = None, session: str | None = None, sub: str | None = None) -> Row:
    return {"detector": detector, "start": float(start), "end": float(end), "duration": float(end - start),
            "dest": dest, "session": session, "sub": sub, "summary": summary,
            "evidence": json.dumps(evidence, separators=(",", ":"))}


def _within(start: float, end: float, bucket: float) -> range:
    """The whole buckets inside [start, end)."""
    return range(math.ceil(start / bucket), math.floor(end / bucket))


def _islands(bs: list[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for b in sorted(bs):
        if out and out[-1][-1] == b - 1:
            out[-1].append(b)
        else:
            out.append([b])
    return out


def starved_consumer(tb: Tables, p: Params) -> list[Row]:
    rates = {(r["dest"], r["b"]): r for r in tb.dest_rates}
    mem = {r["b"]: r["mem_pct"] for r in tb.usage}
    got: dict[tuple[Any, Any, int], int] = defaultdict(int)
    total: dict[tuple[Any, Any], int] = defaultdict(int)
    for r in tb.consumer_rates:
        if r["source"] == "broker":
            got[(r["consumer"], r["sub"], r["b"])] += r["received"]
            total[(r["consumer"], r["sub"])] += r["received"]
    out = []
    for s in tb.subscriptions:
        if not (s["dest"] or "").startswith("/queue/"):
            continue
        flagged = []
        for b in _within(s["start"], s["end"], p.bucket):
            r = rates.get((s["dest"], b))
            if r is None or b not in mem:
                continue
            if (got.get((s["session"], s["sub"], b), 0) == 0 and r["backlog"] > 0 and r["backlog_start"] > 0
                    and mem[b] >= p.hwm and r["dest_mem_pct"] < p.hwm):
                flagged.append(b)
        for island in _islands(flagged):
            start, end = island[0] * p.bucket, (island[-1] + 1) * p.bucket
            if end - start < p.min_window:
                continue
            rows = [rates[(s["dest"], b)] for b in island]
            held: dict[str, int] = {}
            for r in tb.dest_rates:
                if r["b"] in island and r["dest"] != s["dest"] and r["dest_mem_pct"] > 0:
                    held[r["dest"]] = max(held.get(r["dest"], 0), r["dest_mem_pct"])
            holders = sorted(held.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
            ev = {"backlog_min": min(r["backlog"] for r in rows), "backlog_max": max(r["backlog"] for r in rows),
                  "mem_pct_min": min(mem[b] for b in island), "mem_pct_max": max(mem[b] for b in island),
                  "hwm": p.hwm, "dest_mem_pct": max(r["dest_mem_pct"] for r in rows),
                  "page_in_blocked": sum(r["page_in_blocked"] for r in rows),
                  "received": total.get((s["session"], s["sub"]), 0),
                  "memory_holders": [{"dest": d, "dest_mem_pct": pct} for d, pct in holders] or None}
            summary = java_format(SUMMARY["starved_consumer"], s["session"], s["sub"], s["dest"], end - start,
                                  ev["backlog_min"], ev["backlog_max"], ev["mem_pct_min"], ev["mem_pct_max"],
                                  p.hwm, str(ev["dest_mem_pct"]))
            out.append(_finding("starved_consumer", start, end, summary, ev, dest=s["dest"],
                                session=s["session"], sub=s["sub"]))
    return out


def blocked_producer_idle_consumers(tb: Tables, p: Params) -> list[Row]:
    rates = {(r["dest"], r["b"]): r for r in tb.dest_rates}
    use = {r["b"]: r for r in tb.usage}
    out = []
    for blk in tb.blocked:
        flagged = []
        for b in _within(blk["start"], blk["end"], p.bucket):
            r = rates.get((blk["dest"], b))
            if b in use and (r is None or (r["dispatched"] == 0 and (r["backlog"] or 0) <= 0)):
                flagged.append(b)
        for island in _islands(flagged):
            start, end = island[0] * p.bucket, (island[-1] + 1) * p.bucket
            if end - start < p.min_window:
                continue
            consumers = sum(1 for s in tb.subscriptions
                            if s["dest"] == blk["dest"] and s["start"] < end and s["end"] > start)
            if not consumers:
                continue
            us = [use[b] for b in island]
            ev = {"usage": blk["usage"], "pct": blk["pct"], "consumers": consumers,
                  "never_unblocked": blk["open"], "blocked_start": blk["start"], "blocked_end": blk["end"],
                  "temp_pct_min": min(u["temp_pct"] for u in us), "temp_pct_max": max(u["temp_pct"] for u in us),
                  "mem_pct_max": max(u["mem_pct"] for u in us), "store_pct_max": max(u["store_pct"] for u in us)}
            summary = java_format(SUMMARY["blocked_producer_idle_consumers"], blk["session"], blk["usage"],
                                  blk["pct"], blk["dest"], consumers, end - start, ev["temp_pct_min"],
                                  ev["temp_pct_max"], "; never unblocked" if blk["open"] else "")
            out.append(_finding("blocked_producer_idle_consumers", start, end, summary, ev,
                                dest=blk["dest"], session=blk["session"]))
    return out


def _episodes(times: list[float], gap: float) -> list[list[int]]:
    """Indexes of ``times`` (sorted) in runs whose neighbours are at most ``gap`` apart."""
    runs: list[list[int]] = []
    for i, t in enumerate(times):
        if runs and t - times[runs[-1][-1]] <= gap:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


def swap_storm(tb: Tables, p: Params) -> list[Row]:
    outs = sorted((s for s in tb.swaps if s["event"] == "swap_out"), key=lambda s: s["t"])
    found = []
    for run in _episodes([s["t"] for s in outs], p.swap_gap):
        rows = [outs[i] for i in run]
        if len(rows) < p.swap_min:
            continue
        start, end = rows[0]["t"], max(r["t"] for r in rows) + p.bucket
        temps = [r["temp_pct"] for r in rows if r["temp_pct"] is not None]
        mems = [r["mem_pct"] for r in rows if r["mem_pct"] is not None]
        dests = sorted({r["dest"] for r in rows if r["dest"] is not None})
        ev = {"swaps": len(rows), "messages": sum(r["count"] or 0 for r in rows),
              "bytes": sum(r["bytes"] for r in rows if r["bytes"] is not None) if any(
                  r["bytes"] is not None for r in rows) else None,
              "subscriptions": len({(r["session"], r["sub"]) for r in rows}), "dests": dests,
              "temp_pct_max": max(temps) if temps else None, "mem_pct_max": max(mems) if mems else None}
        summary = java_format(SUMMARY["swap_storm"], len(rows), end - start, ev["messages"], ev["subscriptions"],
                              ", ".join(dests), str(ev["temp_pct_max"]) if temps else "?")
        found.append(_finding("swap_storm", start, end, summary, ev, dest=dests[0] if dests else None))
    return found


def slow_episodes(tb: Tables) -> list[Row]:
    """Each time a subscription was marked slow: until it was no longer slow, it ended, or the trace did."""
    ends = {(s["session"], s["sub"]): s["end"] for s in tb.subscriptions}
    marks: dict[tuple[str, str], list[Row]] = defaultdict(list)
    for e in tb.events:
        if e["event"] == "slow_consumer":
            marks[(e["session"], e["sub"])].append(e)
    out = []
    for key, rows in marks.items():
        runs: list[list[Row]] = []
        for r in rows:
            if runs and runs[-1][0]["slow"] == r["slow"]:
                runs[-1].append(r)
            else:
                runs.append([r])
        for i, run in enumerate(runs):
            if not run[0]["slow"]:
                continue
            nxt = runs[i + 1][0]["t"] if i + 1 < len(runs) else None
            gone = ends.get(key, tb.t1 - tb.t0)
            end = min(x for x in (nxt, gone, tb.t1 - tb.t0) if x is not None)
            pend = [r["pending"] for r in run if r.get("pending") is not None]
            pre = [r["prefetch"] for r in run if r.get("prefetch") is not None]
            out.append({"session": key[0], "sub": key[1], "dest": run[0]["dest"], "start": run[0]["t"],
                        "end": end, "recovered": nxt is not None and nxt <= end,
                        "pending_max": max(pend) if pend else None, "prefetch": max(pre) if pre else None})
    return out


def slow_consumer(tb: Tables, p: Params) -> list[Row]:
    subs = {(s["session"], s["sub"]): s for s in tb.subscriptions}
    out = []
    for ep in slow_episodes(tb):
        start, end, dest = ep["start"], ep["end"], ep["dest"]
        blocked = sum(max(0.0, min(b["end"], end) - max(b["start"], start))
                      for b in tb.blocked if b["dest"] == dest)
        if blocked <= 0:
            continue  # the slow consumer held nobody back: its policy (spool, discard, abort) worked
        sub_start = subs.get((ep["session"], ep["sub"]), {}).get("start", start)
        held = {b["msg"] for b in tb.blocked if b["dest"] == dest and b["open"] and b["msg"]}
        sent_all = sent = received = acked = discarded = spooled = 0
        for e in tb.events:
            if e["event"] == "send" and e.get("dest") == dest and sub_start <= e["t"] <= end \
                    and e.get("msg") not in held:
                sent_all += 1
                sent += start <= e["t"] <= end
            elif e["event"] == "discard" and (e.get("session"), e.get("sub")) == (ep["session"], ep["sub"]) \
                    and e["t"] <= end:
                discarded += 1
            elif e["event"] == "swap_out" and e.get("sub") == ep["sub"] and e.get("dest") == dest \
                    and start <= e["t"] <= end:
                spooled += e.get("count") or 0
        delivered = 0
        for r in tb.consumer_rates:
            if (r["consumer"], r["sub"], r["source"]) == (ep["session"], ep["sub"], "broker"):
                if r["b"] * p.bucket < end:
                    delivered += r["received"]
                if r["b"] >= math.floor(start / p.bucket) and r["b"] * p.bucket < end:
                    received += r["received"]
                    acked += r["acked"]
        backlog = sent_all - delivered - discarded if not dest.startswith("/queue/") else None
        ev = {"pending_max": ep["pending_max"], "prefetch": ep["prefetch"], "received": received,
              "acked": acked, "sent": sent, "backlog": backlog, "spooled": spooled, "discarded": discarded,
              "blocked_seconds": round(blocked, 3), "recovered": ep["recovered"]}
        summary = java_format(SUMMARY["slow_consumer"], ep["session"], ep["sub"], dest, end - start,
                              "" if ep["recovered"] or end < tb.t1 - tb.t0 else " (to the end)", blocked,
                              received, acked, sent, backlog if backlog is not None else 0, spooled)
        out.append(_finding("slow_consumer", start, end, summary, ev, dest=dest, session=ep["session"],
                            sub=ep["sub"]))
    return out


def _beats(heart_beat: str | None) -> bool:
    """A negotiated heart-beat that is not "0,0": the broker watches the connection."""
    return bool(heart_beat) and any(part.strip() not in ("", "0") for part in heart_beat.split(","))


def stalled_socket(tb: Tables, p: Params) -> list[Row]:
    ev = tb.events
    # a stall the broker ends itself (a write timeout, heart-beats it watches) is the cure at work
    timed_out = {e["session"] for e in ev if e["event"] == "write_timeout"
                 or (e["event"] == "disconnect" and e.get("reason") in CURED_BY)
                 or (e["event"] == "connect" and _beats(e.get("heart_beat")))}
    stuck: dict[str, Row] = {}
    for e in ev:
        if (e["event"] == "connection" and e["session"] not in timed_out
                and (e.get("idle_write") or 0) >= p.min_window and (e.get("pending_bytes") or 0) > 0):
            s = stuck.setdefault(e["session"], {"client_id": None, "waited": 0.0, "pending_bytes": 0,
                                                "end": e["t"], "start": e["t"] - e["idle_write"]})
            s["client_id"] = max(filter(None, (s["client_id"], e.get("client_id"))), default=None)
            s["waited"] = max(s["waited"], e["idle_write"])
            s["pending_bytes"] = max(s["pending_bytes"], e["pending_bytes"])
            s["end"] = max(s["end"], e["t"])
            s["start"] = min(s["start"], e["t"] - e["idle_write"])
    out = []
    for session, s in stuck.items():
        refused = sum(1 for e in ev if e["event"] == "error" and e.get("code") == "client_id_in_use"
                      and e.get("client_id") == s["client_id"] and s["client_id"] is not None
                      and s["start"] <= e["t"] <= s["end"] + p.reconnect_window)
        dispatched = acked = 0
        for r in tb.consumer_rates:
            if r["consumer"] == session and math.floor(s["start"] / p.bucket) <= r["b"] and r["b"] * p.bucket <= s["end"]:
                dispatched += r["received"]
                acked += r["acked"]
        evidence = {"client_id": s["client_id"], "waited": s["waited"], "pending_bytes": s["pending_bytes"],
                    "dispatched": dispatched, "acked": acked, "refused_reconnects": refused}
        summary = java_format(SUMMARY["stalled_socket"], session, s["client_id"] or "-", s["waited"],
                              s["pending_bytes"], dispatched, acked, refused)
        out.append(_finding("stalled_socket", s["start"], s["end"], summary, evidence, session=session))
    return out


def journal_full_few_live(tb: Tables, p: Params) -> list[Row]:
    by_store: dict[str, list[Row]] = defaultdict(list)
    end_live: dict[str, int] = {}  # each journal's live enqueues in its last traced state
    for e in tb.events:
        if e["event"] == "journal_full":
            by_store[e["store"]].append(e)
        if e["event"] in ("journal_roll", "journal_full", "journal_state") and e.get("live") is not None:
            end_live[e["store"]] = e["live"]
    out = []
    for store, rows in by_store.items():
        rows.sort(key=lambda r: r["t"])
        for run in _episodes([r["t"] for r in rows], p.episode_gap):
            ep = [rows[i] for i in run]
            last = max(ep, key=lambda r: (r["t"], r.get("seq") or 0))  # the last refusal
            pinned = sum(1 for v in (last.get("file_live") or {}).values() if v > 0)
            live, files = last.get("live"), last.get("files")
            if last.get("live_bytes") is not None and (last.get("capacity") or 0) > 0:
                few = last["live_bytes"] <= last["capacity"] * p.few_live_fraction
            else:
                few = live is not None and files is not None and live <= files * p.few_live_per_file
            if not few:
                continue
            dest = next((r["dest"] for r in ep if r.get("dest") is not None), None)
            ev = {"refused": len(ep), "live": live, "live_bytes": last.get("live_bytes"),
                  "capacity": last.get("capacity"), "files": files, "pinned": pinned,
                  "file_live": last.get("file_live"), "live_at_end": end_live.get(store)}
            summary = java_format(SUMMARY["journal_full_few_live"], store, ep[0].get("layout"), len(ep), live,
                                  pinned, files, str(end_live.get(store, "?")))
            out.append(_finding("journal_full_few_live", ep[0]["t"], last["t"] + p.bucket, summary, ev,
                                dest=dest if dest is not None else store))
    return out


#: Each detector by its name (the functions are named after them).
DETECTORS = {name: globals()[name] for name in NAMES}


def find_all(tb: Tables, p: Params) -> list[Row]:
    """Every detector's findings, ordered as the Spark engine orders them."""
    found = [f for detect in DETECTORS.values() for f in detect(tb, p)]
    return sorted(found, key=lambda f: (f["start"], f["detector"], f["session"] or "", f["sub"] or ""))


def write_csv(tb: Tables, findings: list[Row], directory: Path) -> None:
    """Every table as ``directory/NAME.csv`` (nested values as JSON), as the Spark engine writes them."""
    import csv

    directory.mkdir(parents=True, exist_ok=True)
    for name, rows in {**tb.outputs(), "findings": findings}.items():
        columns = list(rows[0]) if rows else []
        with open(directory / f"{name}.csv", "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(columns)
            for r in rows:
                w.writerow([json.dumps(v) if isinstance(v, (list, dict)) else
                            ("true" if v is True else "false" if v is False else v) for v in r.values()])


def series(tb: Tables, findings: list[Row], top: int) -> dict[str, Any]:
    """The plots' series (the Spark engine's ``_series``, uncoarsened: a trace this small has
    few buckets): every consumer when there are few, else the busiest and those a finding names."""
    totals: dict[tuple[Any, Any], int] = defaultdict(int)
    for r in tb.consumer_rates:
        if r["source"] == "broker":
            totals[(r["consumer"], r["sub"])] += r["received"]
    keep = {k for k, _ in sorted(totals.items(), key=lambda kv: (-kv[1], str(kv[0])))[:top]}
    keep |= {(f["session"], f["sub"]) for f in findings if f["session"] and f["sub"]}
    if len(tb.subscriptions) <= top:
        keep |= {(s["session"], s["sub"]) for s in tb.subscriptions}
    return {
        "dest_rates": tb.dest_rates,
        "consumer_rates": [r for r in tb.consumer_rates
                           if r["source"] == "broker" and (r["consumer"], r["sub"]) in keep],
        "subscriptions": [s for s in tb.subscriptions if (s["session"], s["sub"]) in keep],
        "usage": tb.usage, "blocked": tb.blocked, "swaps": tb.swaps, "journal": tb.journal,
        "journal_files": tb.journal_files,
    }


def traced_hwm(tb: Tables) -> int | None:
    marks = [e["hwm"] for e in tb.events if e["event"] == "page_in_blocked" and e.get("hwm") is not None]
    return max(marks) if marks else None


def total_bytes(inputs: list[str]) -> int:
    return sum(os.path.getsize(p) for p in input_files(inputs) if p.exists())

