"""The trace analysis in this process: the Spark job's tables and detectors, in plain Python.

A lab run's trace holds some thousands of events; starting a JVM to analyse
it costs more than the analysis. This module reads such traces with the
standard library (``clients.spark.inprocess_tables``: the same tables, lists of
dicts with the Spark tables' columns) and computes the same findings as ``clients.spark.tables``
and ``clients.spark.detectors``; a test runs both engines over every lab run
and holds their findings equal. ``analyze`` in ``clients.spark.analyze``
picks this engine for inputs below ``INPROCESS_MAX_BYTES``.

Each detector here mirrors its Spark twin in ``clients.spark.detectors``: the
same windows, thresholds (``Params``), summary format strings and evidence.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from typing import Any

from ..signatures import REFUSED, idle_while_blocked, starving
from .findings import CURED_BY, SUMMARY, Params, java_format
from .findings import DETECTORS as NAMES
from .inprocess_tables import (
    INPROCESS_MAX_BYTES,
    INPROCESS_MAX_EVENTS,
    Row,
    Tables,
    build_tables,
    busiest_by_name,
    check_inputs,
    fits_in_process,
    read_events,
    series,
    total_bytes,
    write_csv,
)

__all__ = [
    "find_all",
    "slow_episodes",
    "traced_hwm",
    "DETECTORS",
    "Tables",
    "build_tables",
    "read_events",
    "check_inputs",
    "busiest_by_name",
    "series",
    "write_csv",
    "total_bytes",
    "fits_in_process",
    "INPROCESS_MAX_BYTES",
    "INPROCESS_MAX_EVENTS",
]


# --- detectors -------------------------------------------------------------------------


def _finding(
    detector: str,
    start: float,
    end: float,
    summary: str,
    evidence: dict[str, Any],
    *,
    dest: str | None = None,
    session: str | None = None,
    sub: str | None = None,
) -> Row:
    return {
        "detector": detector,
        "start": float(start),
        "end": float(end),
        "duration": float(end - start),
        "dest": dest,
        "session": session,
        "sub": sub,
        "summary": summary,
        "evidence": json.dumps(evidence, separators=(",", ":")),
    }


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
            rate = rates.get((s["dest"], b))
            if rate is None or b not in mem:
                continue
            received = got.get((s["session"], s["sub"], b), 0)
            if rate["backlog_start"] > 0 and starving(received, rate["backlog"], mem[b], rate["dest_mem_pct"], p.hwm):
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
            ev = {
                "backlog_min": min(r["backlog"] for r in rows),
                "backlog_max": max(r["backlog"] for r in rows),
                "mem_pct_min": min(mem[b] for b in island),
                "mem_pct_max": max(mem[b] for b in island),
                "hwm": p.hwm,
                "dest_mem_pct": max(r["dest_mem_pct"] for r in rows),
                "page_in_blocked": sum(r["page_in_blocked"] for r in rows),
                "received": total.get((s["session"], s["sub"]), 0),
                "memory_holders": [{"dest": d, "dest_mem_pct": pct} for d, pct in holders] or None,
            }
            summary = java_format(
                SUMMARY["starved_consumer"],
                s["session"],
                s["sub"],
                s["dest"],
                end - start,
                ev["backlog_min"],
                ev["backlog_max"],
                ev["mem_pct_min"],
                ev["mem_pct_max"],
                p.hwm,
                str(ev["dest_mem_pct"]),
            )
            out.append(
                _finding(
                    "starved_consumer", start, end, summary, ev, dest=s["dest"], session=s["session"], sub=s["sub"]
                )
            )
    return out


def _held(tb: Tables) -> dict[str, list[tuple[float, int]]]:
    """session -> its connection samples: (t, unacknowledged messages it held)."""
    held: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for e in tb.events:
        if e["event"] == "connection" and e.get("pending") is not None:
            held[e["session"]].append((e["t"], e["pending"]))
    return held


def _holding(samples: list[tuple[float, int]], start: float, end: float) -> list[int]:
    """What the samples inside [start, end] held, when each held something (else [])."""
    inside = [n for t, n in samples if start <= t <= end]
    return inside if inside and min(inside) > 0 else []


def blocked_producer_idle_consumers(tb: Tables, p: Params) -> list[Row]:
    rates = {(r["dest"], r["b"]): r for r in tb.dest_rates}
    use = {r["b"]: r for r in tb.usage}
    held = _held(tb)
    out = []
    for blk in tb.blocked:
        if blk["usage"] == "store" or _holding(held[blk["session"]], blk["start"], blk["end"]):
            continue  # a full store: store_held_by_few_live; a connection holding its own ACKs: blocked_holding_unacked
        flagged = []
        for b in _within(blk["start"], blk["end"], p.bucket):
            r = rates.get((blk["dest"], b))
            if b in use and (r is None or idle_while_blocked(r["dispatched"], r["backlog"] or 0)):
                flagged.append(b)
        for island in _islands(flagged):
            start, end = island[0] * p.bucket, (island[-1] + 1) * p.bucket
            if end - start < p.min_window:
                continue
            consumers = sum(
                1 for s in tb.subscriptions if s["dest"] == blk["dest"] and s["start"] < end and s["end"] > start
            )
            if not consumers:
                continue
            us = [use[b] for b in island]
            ev = {
                "usage": blk["usage"],
                "pct": blk["pct"],
                "consumers": consumers,
                "never_unblocked": blk["open"],
                "blocked_start": blk["start"],
                "blocked_end": blk["end"],
                "temp_pct_min": min(u["temp_pct"] for u in us),
                "temp_pct_max": max(u["temp_pct"] for u in us),
                "mem_pct_max": max(u["mem_pct"] for u in us),
                "store_pct_max": max(u["store_pct"] for u in us),
            }
            summary = java_format(
                SUMMARY["blocked_producer_idle_consumers"],
                blk["session"],
                blk["usage"],
                blk["pct"],
                blk["dest"],
                consumers,
                end - start,
                ev["temp_pct_min"],
                ev["temp_pct_max"],
                "; never unblocked" if blk["open"] else "",
            )
            out.append(
                _finding(
                    "blocked_producer_idle_consumers", start, end, summary, ev, dest=blk["dest"], session=blk["session"]
                )
            )
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
        ev = {
            "swaps": len(rows),
            "messages": sum(r["count"] or 0 for r in rows),
            "bytes": sum(r["bytes"] for r in rows if r["bytes"] is not None)
            if any(r["bytes"] is not None for r in rows)
            else None,
            "subscriptions": len({(r["session"], r["sub"]) for r in rows}),
            "dests": dests,
            "temp_pct_max": max(temps) if temps else None,
            "mem_pct_max": max(mems) if mems else None,
        }
        summary = java_format(
            SUMMARY["swap_storm"],
            len(rows),
            end - start,
            ev["messages"],
            ev["subscriptions"],
            ", ".join(dests),
            str(ev["temp_pct_max"]) if temps else "?",
        )
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
            out.append(
                {
                    "session": key[0],
                    "sub": key[1],
                    "dest": run[0]["dest"],
                    "start": run[0]["t"],
                    "end": end,
                    "recovered": nxt is not None and nxt <= end,
                    "pending_max": max(pend) if pend else None,
                    "prefetch": max(pre) if pre else None,
                }
            )
    return out


def slow_consumer(tb: Tables, p: Params) -> list[Row]:
    subs = {(s["session"], s["sub"]): s for s in tb.subscriptions}
    out = []
    for ep in slow_episodes(tb):
        start, end, dest = ep["start"], ep["end"], ep["dest"]
        blocked = sum(max(0.0, min(b["end"], end) - max(b["start"], start)) for b in tb.blocked if b["dest"] == dest)
        if blocked <= 0:
            continue  # the slow consumer held nobody back: its policy (spool, discard, abort) worked
        sub_start = subs.get((ep["session"], ep["sub"]), {}).get("start", start)
        held = {b["msg"] for b in tb.blocked if b["dest"] == dest and b["open"] and b["msg"]}
        sent_all = sent = received = acked = discarded = spooled = 0
        for e in tb.events:
            if (
                e["event"] == "send"
                and e.get("dest") == dest
                and sub_start <= e["t"] <= end
                and e.get("msg") not in held
            ):
                sent_all += 1
                sent += start <= e["t"] <= end
            elif (
                e["event"] == "discard"
                and (e.get("session"), e.get("sub")) == (ep["session"], ep["sub"])
                and e["t"] <= end
            ):
                discarded += 1
            elif (
                e["event"] == "swap_out"
                and e.get("sub") == ep["sub"]
                and e.get("dest") == dest
                and start <= e["t"] <= end
            ):
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
        ev = {
            "pending_max": ep["pending_max"],
            "prefetch": ep["prefetch"],
            "received": received,
            "acked": acked,
            "sent": sent,
            "backlog": backlog,
            "spooled": spooled,
            "discarded": discarded,
            "blocked_seconds": round(blocked, 3),
            "recovered": ep["recovered"],
        }
        summary = java_format(
            SUMMARY["slow_consumer"],
            ep["session"],
            ep["sub"],
            dest,
            end - start,
            "" if ep["recovered"] or end < tb.t1 - tb.t0 else " (to the end)",
            blocked,
            received,
            acked,
            sent,
            backlog if backlog is not None else 0,
            spooled,
        )
        out.append(_finding("slow_consumer", start, end, summary, ev, dest=dest, session=ep["session"], sub=ep["sub"]))
    return out


def _beats(heart_beat: str | None) -> bool:
    """A negotiated heart-beat that is not "0,0": the broker watches the connection."""
    return bool(heart_beat and any(part.strip() not in ("", "0") for part in heart_beat.split(",")))


def stalled_socket(tb: Tables, p: Params) -> list[Row]:
    ev = tb.events
    # a stall the broker ends itself (a write timeout, heart-beats it watches) is the cure at work
    timed_out = {
        e["session"]
        for e in ev
        if e["event"] == "write_timeout"
        or (e["event"] == "disconnect" and e.get("reason") in CURED_BY)
        or (e["event"] == "connect" and _beats(e.get("heart_beat")))
    }
    stuck: dict[str, Row] = {}
    for e in ev:
        if (
            e["event"] == "connection"
            and e["session"] not in timed_out
            and (e.get("idle_write") or 0) >= p.min_window
            and (e.get("pending_bytes") or 0) > 0
        ):
            s = stuck.setdefault(
                e["session"],
                {
                    "client_id": None,
                    "waited": 0.0,
                    "pending_bytes": 0,
                    "end": e["t"],
                    "start": e["t"] - e["idle_write"],
                },
            )
            s["client_id"] = max(filter(None, (s["client_id"], e.get("client_id"))), default=None)
            s["waited"] = max(s["waited"], e["idle_write"])
            s["pending_bytes"] = max(s["pending_bytes"], e["pending_bytes"])
            s["end"] = max(s["end"], e["t"])
            s["start"] = min(s["start"], e["t"] - e["idle_write"])
    out = []
    for session, s in stuck.items():
        refused = sum(
            1
            for e in ev
            if e["event"] == "error"
            and e.get("code") == "client_id_in_use"
            and e.get("client_id") == s["client_id"]
            and s["client_id"] is not None
            and s["start"] <= e["t"] <= s["end"] + p.reconnect_window
        )
        dispatched = acked = 0
        for r in tb.consumer_rates:
            if (
                r["consumer"] == session
                and math.floor(s["start"] / p.bucket) <= r["b"]
                and r["b"] * p.bucket <= s["end"]
            ):
                dispatched += r["received"]
                acked += r["acked"]
        evidence = {
            "client_id": s["client_id"],
            "waited": s["waited"],
            "pending_bytes": s["pending_bytes"],
            "dispatched": dispatched,
            "acked": acked,
            "refused_reconnects": refused,
        }
        summary = java_format(
            SUMMARY["stalled_socket"],
            session,
            s["client_id"] or "-",
            s["waited"],
            s["pending_bytes"],
            dispatched,
            acked,
            refused,
        )
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
            ev = {
                "refused": len(ep),
                "live": live,
                "live_bytes": last.get("live_bytes"),
                "capacity": last.get("capacity"),
                "files": files,
                "pinned": pinned,
                "file_live": last.get("file_live"),
                "live_at_end": end_live.get(store),
            }
            summary = java_format(
                SUMMARY["journal_full_few_live"],
                store,
                ep[0].get("layout"),
                len(ep),
                live,
                pinned,
                files,
                str(end_live.get(store, "?")),
            )
            out.append(
                _finding(
                    "journal_full_few_live",
                    ep[0]["t"],
                    last["t"] + p.bucket,
                    summary,
                    ev,
                    dest=dest if dest is not None else store,
                )
            )
    return out


def blocked_holding_unacked(tb: Tables, p: Params) -> list[Row]:
    held = _held(tb)
    out = []
    for blk in tb.blocked:
        if blk["end"] - blk["start"] < p.min_window:
            continue
        inside = _holding(held[blk["session"]], blk["start"], blk["end"])
        if not inside:
            continue
        ev = {
            "usage": blk["usage"],
            "held_min": min(inside),
            "held_max": max(inside),
            "samples": len(inside),
            "never_unblocked": blk["open"],
            "blocked_start": blk["start"],
            "blocked_end": blk["end"],
        }
        summary = java_format(
            SUMMARY["blocked_holding_unacked"],
            blk["session"],
            blk["usage"],
            blk["dest"],
            blk["end"] - blk["start"],
            ev["held_min"],
            ev["held_max"],
            "; never unblocked" if blk["open"] else "",
        )
        out.append(
            _finding(
                "blocked_holding_unacked",
                blk["start"],
                blk["end"],
                summary,
                ev,
                dest=blk["dest"],
                session=blk["session"],
            )
        )
    return out


def redelivery_loop(tb: Tables, p: Params) -> list[Row]:
    times: dict[tuple[str, str], list[float]] = defaultdict(list)
    for e in tb.events:
        if e["event"] == "redeliver" and e.get("reason") in REFUSED:
            times[(e["dest"], e["msg"])].append(e["t"])
    out = []
    for (dest, msg), ts in sorted(times.items()):
        ts.sort()
        # the most redeliveries inside any window of poison_window seconds (two pointers)
        best, first, j = 0, 0, 0
        for i, t in enumerate(ts):
            while t - ts[j] > p.poison_window:
                j += 1
            if i - j + 1 > best:
                best, first = i - j + 1, j
        if best <= p.poison_deliveries:
            continue
        start, last = ts[first], ts[first + best - 1]
        ev = {"redeliveries": best, "total": len(ts), "first": start, "last": last}
        summary = java_format(SUMMARY["redelivery_loop"], msg, dest, best, last - start, len(ts))
        out.append(_finding("redelivery_loop", start, last + p.bucket, summary, ev, dest=dest))
    return out


def store_held_by_few_live(tb: Tables, p: Params) -> list[Row]:
    states = sorted(
        (
            e
            for e in tb.events
            if e["event"] in _JOURNAL_STATES and e.get("live") is not None and e.get("layout") == "growing"
        ),
        key=lambda e: (e["t"], e.get("seq") or 0),
    )
    out = []
    for blk in tb.blocked:
        if blk["usage"] != "store" or blk["end"] - blk["start"] < p.min_window:
            continue
        last: dict[str, Row] = {}  # each journal's state at the block's end
        for e in states:
            if e["t"] <= blk["end"]:
                last[e["store"]] = e
        for store, e in sorted(last.items()):
            files, live = e["files"], e["live"]
            pinned = sum(1 for v in (e.get("file_live") or {}).values() if v > 0)
            if not files or live > files * p.few_live_per_file or files - pinned <= 0:
                continue
            ev = {
                "store": store,
                "layout": e.get("layout"),
                "files": files,
                "live": live,
                "pinned": pinned,
                "never_unblocked": blk["open"],
                "blocked_start": blk["start"],
                "blocked_end": blk["end"],
            }
            summary = java_format(
                SUMMARY["store_held_by_few_live"],
                blk["session"],
                blk["dest"],
                blk["end"] - blk["start"],
                store,
                files,
                live,
                files - pinned,
                "; never unblocked" if blk["open"] else "",
            )
            out.append(
                _finding(
                    "store_held_by_few_live",
                    blk["start"],
                    blk["end"],
                    summary,
                    ev,
                    dest=blk["dest"],
                    session=blk["session"],
                )
            )
    return out


_JOURNAL_STATES = ("journal_roll", "journal_full", "journal_state")


#: Each detector by its name (the functions are named after them).
DETECTORS = {name: globals()[name] for name in NAMES}


def find_all(tb: Tables, p: Params) -> list[Row]:
    """Every detector's findings, ordered as the Spark engine orders them."""
    found = [f for detect in DETECTORS.values() for f in detect(tb, p)]
    return sorted(found, key=lambda f: (f["start"], f["detector"], f["session"] or "", f["sub"] or ""))


def traced_hwm(tb: Tables) -> int | None:
    marks = [e["hwm"] for e in tb.events if e["event"] == "page_in_blocked" and e.get("hwm") is not None]
    return max(marks) if marks else None
