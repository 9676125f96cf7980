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
from dataclasses import dataclass

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

#: The broker names compare.py gives the brokers it compares ours with, and how the tables name them.
OTHERS = {"activemq": "ActiveMQ", "rabbitmq": "RabbitMQ", "relay": "the relay"}


@dataclass(frozen=True)
class Goal:
    """One goal of the matrix.

    - ``against`` names the other broker: the goal is on ours / its median
      (at least ``bound`` for a rate, at most for a latency);
    - without it the goal is an absolute bound on ours: peak RSS in MB
      (``rss``) or start to port open in seconds (``start``), both "under";
    - a ``needs_store`` goal is not judged while our broker wrote nothing to
      its data directory (it then measured the in-memory path)."""

    scenario: str
    metric: str
    bound: float
    against: str | None = None
    needs_store: bool = False

    @property
    def lower_is_better(self) -> bool:
        return self.metric in ("p50", "p99", "rss", "start")

    def text(self) -> str:
        """``A msg/s >= 2.5 x ActiveMQ's``, ``RSS < 100 MB through the matrix``."""
        if self.metric == "rss":
            return f"broker RSS < {self.bound:g} MB through the matrix"
        if self.metric == "start":
            return f"start to port open < {self.bound:g} s"
        what = f"{self.metric} latency" if self.lower_is_better else "msg/s"
        sign = "<=" if self.lower_is_better else ">="
        return f"{self.scenario} {what} {sign} {self.bound:g} x {OTHERS.get(self.against or '', self.against)}'s"

    def short(self) -> str:
        """The goal in a table's cell: ``>= 2.5``, ``p99 <= 0.5``."""
        if self.lower_is_better:
            return f"{self.metric} <= {self.bound:g}"
        return f">= {self.bound:g}"

    def met(self, value: float) -> bool:
        return (
            value < self.bound
            if self.against is None
            else (value <= self.bound if self.lower_is_better else value >= self.bound)
        )


GOALS = (
    Goal("A", "rate", 2.5, "activemq"),
    Goal("C", "rate", 3.0, "activemq"),
    Goal("D", "rate", 1.5, "activemq"),
    Goal("E", "p99", 0.5, "activemq"),
    Goal("B", "rate", 2.0, "activemq", needs_store=True),
    Goal("A", "rate", 6.0, "rabbitmq"),
    Goal("C", "rate", 6.0, "rabbitmq"),
    Goal("D", "rate", 2.5, "rabbitmq"),
    Goal("B", "rate", 1.5, "rabbitmq", needs_store=True),
    Goal("*", "rss", 100.0),
    Goal("*", "start", 0.5),
)


@dataclass(frozen=True)
class Verdict:
    """A goal as one run judged it: ``value`` is the ratio of the medians (or the
    absolute figure); ``met`` is None when the run cannot judge it, and ``note`` says why
    or where the figure came from. ``floor``: the same ratio for the harness's relay
    (frames forwarded, no broker) when it ran: what a broker costing nothing reaches."""

    goal: Goal
    value: float | None
    met: bool | None
    note: str = ""
    floor: float | None = None

    def line(self) -> str:
        """One line of compare.py's goals list."""
        head = f"- {self.goal.text()}: "
        if self.met is None:
            return head + f"not judged: {self.note}"
        unit = {"rss": " MB (peak)", "start": " s"}.get(self.goal.metric, "")
        figure = f"{self.value:.2f}{unit}" if self.goal.metric != "rss" else f"{self.value:.1f}{unit}"
        floor = "" if self.floor is None else f"; the relay (the floor) {self.floor:.2f}"
        return head + f"{figure}{f' ({self.note})' if self.note else ''} -> {'met' if self.met else 'NOT met'}{floor}"

    def cell(self) -> str:
        """The goal and its verdict in the matrix's Markdown table: ``>= 2.5: **not met**``."""
        if self.met is None:
            return f"{self.goal.short()}: not judged"
        floor = "" if self.met or self.floor is None else f" (the relay: {self.floor:.2f})"
        return f"{self.goal.short()}: {'met' if self.met else '**not met**'}{floor}"


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


def _ours_start_s(meta: dict | None, ours: str) -> float | None:
    for info in (meta or {}).get("brokers") or []:
        if info.get("broker") == ours and _num(info.get("startup_ms")) is not None:
            return info["startup_ms"] / 1000
    return None


def judge(records: list[dict], ours: str, brokers: list[str], meta: dict | None = None) -> list[Verdict]:
    """Every goal of ``GOALS`` this run can speak to: against a broker it ran (or, for
    ActiveMQ's goals in a run without it, the reference numbers, indicative only)."""
    sel = select(records)
    out: list[Verdict] = []
    for goal in GOALS:
        if goal.metric == "rss":
            peaks = [r.get("rss_peak_mb") for (s, b), reps in sel.items() if b == ours for r in reps.values()]
            peaks = [p for p in peaks if p]
            if peaks:
                out.append(Verdict(goal, max(peaks), goal.met(max(peaks))))
            continue
        if goal.metric == "start":
            start = _ours_start_s(meta, ours)
            if start is not None:
                out.append(Verdict(goal, start, goal.met(start), "one start, under this run's load"))
            continue
        a = sel.get((goal.scenario, ours))
        if not a:
            continue
        sa = cell_stats(a)
        if goal.needs_store and all(r.get("data_dir_bytes") == 0 for r in a.values()):
            why = f"our broker wrote nothing to its data directory during {goal.scenario} (the in-memory path)"
            out.append(Verdict(goal, None, None, why))
            continue
        b = sel.get((goal.scenario, goal.against)) if goal.against in brokers else None
        if b:
            sb = cell_stats(b)
            r = ratio(sa[goal.metric][0] if sa[goal.metric] else None, sb[goal.metric][0] if sb[goal.metric] else None)
            src = "this run"
        elif goal.against == "activemq":
            ref = REFERENCE.get(goal.scenario, {}).get(goal.metric)
            ref_value = ref[0] if isinstance(ref, tuple) else ref
            r = ratio(sa[goal.metric][0] if sa[goal.metric] else None, ref_value)
            src = "reference numbers, indicative only"
        else:
            continue
        if r is None:
            continue
        met = goal.met(r) and sa["ok"] == sa["n"]
        if sa["ok"] < sa["n"]:
            src += f"; only {sa['ok']}/{sa['n']} reps ok"
        floor = None
        relay = sel.get((goal.scenario, "relay"))
        if b and relay:
            sr = cell_stats(relay)
            floor = ratio(
                sr[goal.metric][0] if sr[goal.metric] else None, sb[goal.metric][0] if sb[goal.metric] else None
            )
        out.append(Verdict(goal, r, met, src, floor))
    return out


def targets(records: list[dict], ours: str, brokers: list[str], meta: dict | None = None) -> list[str]:
    """One line per goal (``GOALS``) that this run can judge."""
    return [v.line() for v in judge(records, ours, brokers, meta)]


def matrix_rows(
    records: list[dict], scenarios: list[str], ours: str, brokers: list[str], meta: dict | None = None
) -> tuple[list[str], list[list[str]]]:
    """The shared matrix as ``docs/benchmarks.md`` shows it: per scenario, each broker's
    median (msg/s, or E's p99 in ms), ours / each other broker's (ratio of the medians,
    paired reps in brackets), the goals on that scenario with their verdicts, and the
    reps flagged noisy per broker. Header and rows for ``report.print_table``."""
    sel = select(records)
    others = [b for b in OTHERS if b in brokers]
    names = [ours, *others]
    verdicts = judge(records, ours, brokers, meta)
    header = [
        "scenario",
        *(("ours" if b == ours else OTHERS[b]) for b in names),
        *(f"ours / {OTHERS[b]}" for b in others),
        "goals",
        "noisy reps (" + " / ".join("ours" if b == ours else OTHERS[b] for b in names) + ")",
    ]
    rows = []
    for scen in scenarios:
        if (scen, ours) not in sel:
            continue
        metric, get, nd, unit = ("p99", lambda r: lat(r, "p99"), 2, " ms p99") if scen == "E" else ("rate", rate, 0, "")
        stats = {b: cell_stats(sel[(scen, b)]) for b in names if (scen, b) in sel}
        cells = [scen]
        for b in names:
            st = stats.get(b)
            cells.append(f"{fmt_num(st[metric][0], nd)}{unit}" if st and st[metric] else "-")
        for b in others:
            if b not in stats or not stats[ours][metric] or not stats[b][metric]:
                cells.append("-")
                continue
            med = ratio(stats[ours][metric][0], stats[b][metric][0])
            cells.append(fmt_ratio(med, paired_ratios(sel[(scen, ours)], sel[(scen, b)], get)))
        if (meta or {}).get("quick"):
            cells.append("not judged (--quick)")
        else:
            cells.append("; ".join(v.cell() for v in verdicts if v.goal.scenario == scen))
        cells.append(" / ".join(f"{stats[b]['noisy']} of {stats[b]['n']}" if b in stats else "-" for b in names))
        rows.append(cells)
    return header, rows


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
