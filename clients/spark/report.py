"""The Markdown report that ties the plots and the findings together."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from clients.spark.findings import DETECTORS, WHAT

__all__ = ["render_report"]

PLOT_TITLES = {
    "rates": "Per-destination enqueue and dispatch rates",
    "backlog": "Queue backlog",
    "consumers": "Per-consumer receive rates",
    "usage": "Memory, store and temp usage, with producer-blocked intervals",
    "swaps": "Swap events",
    "journal": "Journal files pinned by live messages",
}


def _fmt_evidence(evidence: str) -> str:
    data = json.loads(evidence) if evidence else {}
    return ", ".join(f"{k}={json.dumps(v)}" for k, v in data.items() if v is not None)


def render_report(
    info: dict[str, Any], findings: list[dict[str, Any]], plots: dict[str, str], tables: list[str]
) -> str:
    lines = ["# Trace analysis", ""]
    lines += [
        f"- inputs: {', '.join(info['inputs'])}",
        f"- lines read: {info['lines']} ({info['corrupt']} unreadable, skipped)",
        f"- time span: {info['span']:.3f} s from ts {info['t0']} (all times below are seconds since then)",
        f"- bucket: {info['bucket']} s; shortest window reported: {info['min_window']} s; "
        f"cursor high-water mark: {info['hwm']}%",
        "",
        "## Findings",
        "",
    ]
    if not findings:
        lines += ["No detector fired.", ""]
    else:
        counts = Counter(f["detector"] for f in findings)
        lines += [", ".join(f"{n} {d}" for d, n in counts.items()), ""]
        lines += ["| # | detector | window (s) | where | summary |", "|---|---|---|---|---|"]
        for i, f in enumerate(findings, 1):
            where = " ".join(x for x in (f["dest"], f["session"], f["sub"]) if x)
            lines.append(f"| {i} | {f['detector']} | {f['start']:.1f}-{f['end']:.1f} | {where} | {f['summary']} |")
        lines.append("")
        for name in DETECTORS:
            mine = [f for f in findings if f["detector"] == name]
            if not mine:
                continue
            lines += [f"### {name}", "", WHAT[name] + ".", ""]
            for f in mine:
                lines.append(
                    f"- {f['start']:.1f}-{f['end']:.1f} s: {f['summary']}. Evidence: {_fmt_evidence(f['evidence'])}"
                )
            lines.append("")
    quiet = [d for d in DETECTORS if d not in {f["detector"] for f in findings}]
    if quiet:
        lines += ["Detectors that found nothing: " + ", ".join(quiet) + ".", ""]
    lines += ["## Plots", ""]
    for key, title in PLOT_TITLES.items():
        if key in plots:
            lines += [f"### {title}", "", f"![{title}]({plots[key]})", ""]
    missing = [PLOT_TITLES[k] for k in PLOT_TITLES if k not in plots]
    if missing:
        lines += ["No data for: " + "; ".join(missing).lower() + ".", ""]
    where = "`parquet/NAME/` and `csv/NAME.csv`" if info.get("engine", "spark") == "spark" else "`csv/NAME.csv`"
    if tables:
        lines += ["## Tables", "", f"Each table is under {where}; times are seconds since the trace start.", ""]
        lines += [f"- `{t}`" for t in tables]
    else:
        lines += ["## Tables", "", "None written (--no-tables)."]
    lines.append("")
    return "\n".join(lines)
