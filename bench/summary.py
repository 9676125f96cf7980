"""Turn compare.py's JSON lines into the side-by-side table.

Records with ``"type": "rep"`` are single stomp_bench runs, extended by
compare.py with ``broker``, ``scenario``, ``rep`` (1..N), ``attempt``,
``phase`` (``warmup`` or ``measure``), ``noisy`` and ``rss_peak_mb``.

For each (scenario, broker, rep) one attempt is used: the clean one when
there is one, otherwise the least noisy (flagged ``~`` in the table). Rep i of
our broker and rep i of ActiveMQ ran next to each other, so the per-rep
ratio ours/ActiveMQ is computed pairwise, and the table shows its median and
range; the figure to quote is the ratio of the medians.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

# Reference numbers: bench/harness/RESULTS.md ("Results, median of 3"),
# ActiveMQ 5.17.2 (Debian, JDK 17), measured earlier on this kind of machine.
REFERENCE_SOURCE = "bench/harness/RESULTS.md: ActiveMQ 5.17.2 (Debian, JDK 17), median of 3"
REFERENCE = {
    "A": {"rate": (42914, 42500, 53200)},
    "B": {"rate": (12889, 11000, 14800)},
    "C": {"rate": (78987, 78800, 92200)},
    "D": {"rate": (5438, 5300, 5900)},
    "S": {"rate": (4564, 4564, 4564)},
    "E": {"p50": 0.30, "p99": 0.71},
}
REFERENCE_RSS = "about 111 MB at start, 675 MB after the matrix; about 150% CPU flat out"

# (scenario, metric, threshold, needs_store, text): ours / ActiveMQ must be >= threshold,
# except for "rss", an absolute bound on our peak RSS in MB. A needs_store target is not judged
# while our broker writes nothing to its data directory (it then measured the in-memory path).
TARGETS = [
    ("A", "rate", 1.0, False, "queue A e2e msg/s >= ActiveMQ's"),
    ("C", "rate", 0.8, False, "topic C deliveries/s >= 0.8 x ActiveMQ's"),
    ("D", "rate", 1.0, False, "client-individual prefetch 1 (D) msg/s >= ActiveMQ's"),
    ("*", "rss", 100.0, False, "broker RSS < 100 MB through the runs"),
    ("B", "rate", 1.0, True, "persistent queue B msg/s >= ActiveMQ KahaDB's"),
]


def _num(v):
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def spread(vals: Iterable) -> tuple[float, float, float] | None:
    vals = [v for v in (_num(v) for v in vals) if v is not None]
    if not vals:
        return None
    return statistics.median(vals), min(vals), max(vals)


def fmt_num(x: float | None, nd: int = 0) -> str:
    if x is None:
        return "-"
    return f"{x:,.{nd}f}"


def fmt_spread(s: tuple[float, float, float] | None, nd: int = 0) -> str:
    if s is None:
        return "-"
    med, lo, hi = s
    if lo == hi:
        return fmt_num(med, nd)
    return f"{fmt_num(med, nd)} [{fmt_num(lo, nd)}–{fmt_num(hi, nd)}]"


def rate(r: dict) -> float | None:
    """e2e msg/s; for a topic this is deliveries/s (received counts every consumer)."""
    return _num(r.get("e2e_rate"))


def lat(r: dict, key: str) -> float | None:
    return _num((r.get("latency_ms") or {}).get(key))


def select(records: list[dict]) -> dict[tuple[str, str], dict[int, dict]]:
    """{(scenario, broker): {rep: the attempt used}} over measured reps."""
    groups: dict[tuple[str, str, int], list[dict]] = {}
    for r in records:
        if r.get("type") != "rep" or r.get("phase") != "measure":
            continue
        groups.setdefault((r["scenario"], r["broker"], r["rep"]), []).append(r)
    out: dict[tuple[str, str], dict[int, dict]] = {}
    for (scen, broker, rep), attempts in groups.items():
        clean = [a for a in attempts if not a.get("noisy")]
        use = clean[-1] if clean else min(attempts, key=lambda a: a.get("other_cpu_pct") or 0)
        out.setdefault((scen, broker), {})[rep] = use
    return out


def cell_stats(reps: dict[int, dict]) -> dict:
    rs = list(reps.values())
    good = [r for r in rs if r.get("ok")]
    use = good or rs
    return {
        "n": len(rs),
        "ok": len(good),
        "noisy": sum(1 for r in rs if r.get("noisy")),
        "lost": sum(_num(r.get("lost")) or 0 for r in rs),
        "dups": sum(_num(r.get("duplicates")) or 0 for r in rs),
        "rate": spread(rate(r) for r in use),
        "p50": spread(lat(r, "p50") for r in use),
        "p99": spread(lat(r, "p99") for r in use),
        "cpu": spread(r.get("broker_cpu_pct") for r in use),
        "rss": max((r.get("rss_peak_mb") or 0 for r in rs), default=None),
        "other": spread(r.get("other_cpu_pct") for r in use),
    }


def ratio(a, b):
    a, b = _num(a), _num(b)
    if a is None or not b:
        return None
    return a / b


def paired_ratios(ours: dict[int, dict], theirs: dict[int, dict], get) -> tuple | None:
    vals = []
    for rep, r in ours.items():
        t = theirs.get(rep)
        if t is not None and r.get("ok") and t.get("ok"):
            vals.append(ratio(get(r), get(t)))
    return spread(vals)


def fmt_ratio(med_ratio, paired) -> str:
    if med_ratio is None:
        return "-"
    text = f"**{med_ratio:.2f}**"
    if paired is not None and paired[1] != paired[2]:
        text += f" [{paired[1]:.2f}–{paired[2]:.2f}]"
    return text


HEADER = (
    "| scen | broker | reps ok/run (noisy) | msg/s, median [min–max] | p50 ms | p99 ms "
    "| broker CPU % | RSS peak MB | lost / dup |"
)
RULE = "|---|---|---|---|---|---|---|---|---|"


def broker_row(scen: str, broker: str, st: dict) -> str:
    return (
        f"| {scen} | {broker} | {st['ok']}/{st['n']} ({st['noisy']}) | {fmt_spread(st['rate'])} | "
        f"{fmt_spread(st['p50'], 2)} | {fmt_spread(st['p99'], 2)} | {fmt_spread(st['cpu'])} | "
        f"{fmt_num(st['rss'], 1)} | {st['lost']} / {st['dups']} |"
    )


def ratio_row(scen: str, label: str, a: dict, b: dict, sa: dict, sb: dict) -> str:
    def med(s):
        return s[0] if s else None

    cells = []
    for key, get in (("rate", rate), ("p50", lambda r: lat(r, "p50")), ("p99", lambda r: lat(r, "p99"))):
        cells.append(fmt_ratio(ratio(med(sa[key]), med(sb[key])), paired_ratios(a, b, get)))
    cpu = ratio(med(sa["cpu"]), med(sb["cpu"]))
    rss = ratio(sa["rss"], sb["rss"])
    return (
        f"| {scen} | *{label}* | | {cells[0]} | {cells[1]} | {cells[2]} | "
        f"{'-' if cpu is None else f'{cpu:.2f}'} | {'-' if rss is None else f'{rss:.2f}'} | |"
    )


def table(records: list[dict], scenarios: list[str], brokers: list[str], pairs: list[tuple[str, str]]) -> str:
    """The markdown table: a row per (scenario, broker), then a row per ratio pair."""
    sel = select(records)
    lines = [HEADER, RULE]
    for scen in scenarios:
        stats = {}
        for b in brokers:
            reps = sel.get((scen, b))
            if reps:
                stats[b] = cell_stats(reps)
                lines.append(broker_row(scen, b, stats[b]))
        for num, den in pairs:
            if num in stats and den in stats:
                lines.append(
                    ratio_row(scen, f"{num} / {den}", sel[(scen, num)], sel[(scen, den)], stats[num], stats[den])
                )
    return "\n".join(lines)


def reference_table(records: list[dict], scenarios: list[str], ours: str) -> str:
    """Our medians next to RESULTS.md's ActiveMQ numbers: not measured in this run."""
    sel = select(records)
    lines = [
        "| scen | ours msg/s | reference ActiveMQ msg/s [min–max] | ratio (indicative) "
        "| ours p50 / p99 ms | reference p50 / p99 ms |",
        "|---|---|---|---|---|---|",
    ]
    for scen in scenarios:
        ref = REFERENCE.get(scen)
        reps = sel.get((scen, ours))
        if not ref or not reps:
            continue
        st = cell_stats(reps)
        r_rate = ref.get("rate")
        r = ratio(st["rate"][0] if st["rate"] else None, r_rate[0] if r_rate else None)
        ours_lat = f"{fmt_spread(st['p50'], 2)} / {fmt_spread(st['p99'], 2)}"
        ref_lat = f"{ref['p50']:.2f} / {ref['p99']:.2f}" if "p50" in ref else "-"
        lines.append(
            f"| {scen} | {fmt_spread(st['rate'])} | {fmt_spread(r_rate) if r_rate else '-'} | "
            f"{'-' if r is None else f'{r:.2f}'} | {ours_lat} | {ref_lat} |"
        )
    return "\n".join(lines)


def targets(records: list[dict], ours: str, theirs: str | None) -> list[str]:
    """One line per target (``TARGETS``) that this run can judge."""
    sel = select(records)
    out = []
    for scen, metric, threshold, needs_store, text in TARGETS:
        if metric == "rss":
            peaks = [r.get("rss_peak_mb") for (s, b), reps in sel.items() if b == ours for r in reps.values()]
            peaks = [p for p in peaks if p]
            if peaks:
                peak = max(peaks)
                out.append(f"- {text}: peak {peak:.1f} MB -> {'met' if peak < threshold else 'NOT met'}")
            continue
        a, b = sel.get((scen, ours)), sel.get((scen, theirs)) if theirs else None
        if not a:
            continue
        sa = cell_stats(a)
        if needs_store and all(r.get("data_dir_bytes") == 0 for r in a.values()):
            out.append(
                f"- {text}: not judged: our broker wrote nothing to its data directory "
                f"during {scen}, so {scen} measured the in-memory path"
            )
            continue
        if b:
            sb = cell_stats(b)
            r = ratio(sa[metric][0] if sa[metric] else None, sb[metric][0] if sb[metric] else None)
            src = "this run"
        else:
            ref = REFERENCE.get(scen, {}).get(metric)
            r = ratio(sa[metric][0] if sa[metric] else None, ref[0] if ref else None)
            src = "reference numbers, indicative only"
        if r is None:
            continue
        verdict = "met" if r >= threshold and sa["ok"] == sa["n"] else "NOT met"
        if sa["ok"] < sa["n"]:
            verdict += f" (only {sa['ok']}/{sa['n']} reps ok)"
        out.append(f"- {text}: ratio {r:.2f} ({src}) -> {verdict}")
    return out


def failures(records: list[dict]) -> list[str]:
    """Every attempt that was not ok, with its status, counts and the errors the harness printed."""
    out = []
    for r in records:
        if r.get("type") != "rep" or r.get("ok"):
            continue
        head = (
            f"- {r.get('broker')} {r.get('scenario')} {r.get('phase')} rep {r.get('rep')} "
            f"attempt {r.get('attempt')}: status={r.get('status')} sent={r.get('sent')} "
            f"received={r.get('received')} expected={r.get('expected')} lost={r.get('lost')} "
            f"duplicates={r.get('duplicates')} out_of_order={r.get('out_of_order')}"
        )
        out.append(head)
        for e in r.get("errors") or []:
            out.append(f"    error: {e}")
        if r.get("broker_exited") is not None:
            out.append(f"    the broker process had exited, status {r['broker_exited']}")
        for key, label in (("stderr_tail", "harness stderr"), ("broker_log_tail", "broker log")):
            tail = (r.get(key) or "").strip()
            if tail:
                out.append(f"    {label}:\n" + "\n".join("      " + line for line in tail.splitlines()))
    return out
