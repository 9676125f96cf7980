"""A lab's figure: the pathology and its cure side by side, on shared axes.

The picture a teacher projects. Two columns (the pathology run, the cure run:
``figure = [PATHOLOGY, CURE]`` in ``lab.toml``, else the first run of each
verdict), two rows on shared axes, so the two runs compare at a glance:

1. what each consumer received (running totals, named as the lab names its
   clients; every subscription the run had, the starved one included) and
   what was sent to their destinations;
2. the broker's memory and temp usage against the cursor high-water mark,
   with the time a producer was blocked, and each queue's share of the
   broker's memory (which queue holds it); or, for a lab whose story is a
   journal, the journal's files and the files pinned by live messages; or,
   for a stalled socket, the bytes queued for each client's socket and the
   reconnects the broker refused.

A finding's window is shaded, and named, where it holds. ``lab_figure``
returns what it drew (``Drawn``), which the test checks.
"""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clients.spark.plots import (
    DPI,
    blocked_spans,
    classroom,
    consumer_label,
    consumer_lines,
    count_axis,
    journal_lines,
    line_style,
    sent_lines,
    shade,
    title_pad,
    usage_lines,
    write_end,
)

from .model import Lab
from .runner import RunResult

__all__ = ["Drawn", "lab_figure", "figure_runs"]


@dataclass
class Drawn:
    """What a lab's figure shows: for tests, and for whoever wants to check it."""

    path: Path
    runs: list[str]
    lines: dict[str, list[str]] = field(default_factory=dict)  # run -> the labels of its top row
    limits: list[tuple[tuple[float, float], tuple[float, float]]] = field(default_factory=list)  # xlim, ylim
    starved: dict[str, list[str]] = field(default_factory=dict)  # run -> consumers a finding names
    bottom: dict[str, list[str]] = field(default_factory=dict)  # run -> the labels of its bottom row


def figure_runs(lab: Lab, results: list[RunResult]) -> list[RunResult]:
    """The pathology run and the cure run the figure compares."""
    by_name = {r.spec.name: r for r in results}
    if lab.figure:
        return [by_name[n] for n in lab.figure if n in by_name]
    first = [next((r for r in results if r.spec.expect == v), None) for v in ("pathology", "healthy")]
    return [r for r in first if r is not None]


def _span(result: RunResult) -> float:
    series = result.series or {}
    step = _step(series)
    return max([r["t"] + step for r in series.get("usage", [])] + [step])


def _step(series: dict[str, Any]) -> float:
    ts = sorted({r["t"] for r in series.get("usage", [])})
    return ts[1] - ts[0] if len(ts) > 1 else 1.0


def _top_lines(result: RunResult, span: float) -> list[tuple[str, list[float], list[float]]]:
    series = result.series or {}
    step = _step(series)
    lines = consumer_lines(series, step, span)
    dests = {s["dest"] for s in series.get("subscriptions", [])}
    return lines + sent_lines(series, step, span, dests)


def _named(result: RunResult) -> list[str]:
    """The consumers the run's findings name, as the figure labels them."""
    series = result.series or {}
    names = series.get("names", {})
    count: dict[str, int] = {}
    for s in series.get("subscriptions", []):
        count[s["session"]] = count.get(s["session"], 0) + 1
    return [
        consumer_label(names, f["session"], f["sub"], count.get(f["session"], 1))
        for f in result.findings or []
        if f["session"] and f["sub"]
    ]


def _events(result: RunResult) -> list[dict[str, Any]]:
    """The run's trace events: kept on the result, else read back from its trace file."""
    if result.events is not None:
        return result.events
    if result.trace_file is None or not result.trace_file.exists():
        return []
    lines = result.trace_file.read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def queue_shares(result: RunResult, span: float) -> list[tuple[str, list[float], list[float]]]:
    """Each queue's memory as a share of the broker's, in percent, over the run: a queue's
    ``usage`` events give its percent of its own limit (the broker's when it has none)."""
    config = result.config
    if config is None:
        return []
    broker = config.system_usage.memory_limit
    lines = []
    by_dest: dict[str, list[dict[str, Any]]] = {}
    for e in _events(result):
        if e["event"] == "usage" and str(e.get("dest", "")).startswith("/queue/"):
            by_dest.setdefault(e["dest"], []).append(e)
    for dest, rows in sorted(by_dest.items()):
        own = config.policy_for("queue", dest.removeprefix("/queue/")).memory_limit or broker
        xs = [r["ts"] for r in rows] + [span]
        ys = [r["dest_mem_pct"] * own / broker for r in rows]
        ys.append(ys[-1])
        if max(ys) >= 1:
            lines.append((f"{dest}: share of broker memory %", xs, ys))
    return lines


def socket_lines(result: RunResult, span: float) -> tuple[list[tuple[str, list[float], list[float]]], list[float]]:
    """KB queued for each client's socket (the broker's ``connection`` samples, one line per
    client-id or name), and when the broker refused a reconnect (client-id in use)."""
    events = _events(result)
    by_client: dict[str, dict[float, float]] = {}
    for e in events:
        if e["event"] == "connection" and e.get("pending_bytes") is not None:
            who = e.get("client_id") or e.get("addr") or e["session"]
            at = by_client.setdefault(who, {})
            at[e["ts"]] = at.get(e["ts"], 0.0) + e["pending_bytes"] / 1024
    lines = []
    for who, samples in sorted(by_client.items()):
        xs = [0.0, *sorted(samples)]
        ys = [0.0, *(samples[t] for t in sorted(samples))]
        if max(ys) > 0:
            lines.append((f"KB queued for {who}'s socket", xs + [span], ys + ys[-1:]))
    refused = [e["ts"] for e in events if e["event"] == "error" and e.get("code") == "client_id_in_use"]
    return lines, refused


def _step_lines(ax: Any, lines: list[tuple[str, list[float], list[float]]]) -> float:
    """``lines`` as steps, each in its own colour and style; their highest value (0 for none)."""
    for i, (label, xs, ys) in enumerate(lines):
        ax.step(xs, ys, where="post", label=label, **line_style(i))
    return max((max(ys) for _, _, ys in lines), default=0.0)


def lab_figure(lab: Lab, results: list[RunResult], out: Path) -> Drawn | None:
    """Draw ``out/<lab directory>.png``; None when the runs were not analysed."""
    runs = [r for r in figure_runs(lab, results) if r.series is not None]
    if len(runs) < 2:
        return None
    import matplotlib.pyplot as plt

    # a journal's story (it refused enqueues): its files; any other: the broker's usage
    journal = any(j["event"] == "journal_full" for r in runs for j in (r.series or {}).get("journal", []))
    # a stalled socket's story: the bytes queued for the socket, the reconnects refused
    stalled = not journal and any(f["detector"] == "stalled_socket" for r in runs for f in r.findings or [])
    span = max(_span(r) for r in runs)
    tops = {r.spec.name: _top_lines(r, span) for r in runs}
    order: dict[str, int] = {}
    for lines in tops.values():  # one label, one colour and style, in both columns
        for label, _, _ in lines:
            order.setdefault(label, len(order))
    path = out / f"{lab.directory.name}.png"
    drawn = Drawn(path, [r.spec.name for r in runs])
    with classroom():
        fig, axes = plt.subplots(
            2, len(runs), figsize=(9 * len(runs), 11), sharex=True, sharey="row", squeeze=False, layout="constrained"
        )
        tallest = [1.0, 1.0 if journal else 110.0]  # each row's highest value: one scale for both columns
        for col, result in enumerate(runs):
            name = result.spec.name
            top, bottom = axes[0, col], axes[1, col]
            written: set[float] = set()
            for label, xs, ys in sorted(tops[name], key=lambda line: order[line[0]]):
                i = order[label]
                tallest[0] = max(tallest[0], max(ys))
                dashed = label.startswith("sent to ")
                look: dict[str, Any] = (
                    {"color": "black", "linestyle": "--", "linewidth": 2.0} if dashed else line_style(i)
                )
                top.step(xs, ys, where="post", label=label, zorder=2 + i, clip_on=False, **look)
                if not dashed:  # its total, beside its end: a line at 0 is read too
                    write_end(top, xs, ys, look["color"], written, annotation_clip=False)
            drawn.lines[name] = [label for label, _, _ in tops[name]]
            drawn.starved[name] = _named(result)
            series = result.series or {}
            if journal:
                tallest[1] = max(tallest[1], _step_lines(bottom, journal_lines(series, span)) * 1.1)
                bottom.set_ylabel("journal files")
            elif stalled:
                lines, refused = socket_lines(result, span)
                tallest[1] = max(tallest[1], _step_lines(bottom, lines) * 1.1)
                if refused:
                    bottom.plot(
                        refused,
                        [0] * len(refused),
                        linestyle="none",
                        marker="x",
                        markersize=12,
                        markeredgewidth=3,
                        color="tab:red",
                        clip_on=False,
                        label=f"reconnect refused ({len(refused)})",
                    )
                drawn.bottom[name] = [label for label, _, _ in lines] + (["reconnect refused"] if refused else [])
                bottom.set_ylabel("KB queued for the socket")
            else:
                usage = [(label, xs + [span], ys + ys[-1:]) for label, xs, ys in usage_lines(series)]
                lines = usage + queue_shares(result, span)
                tallest[1] = max(tallest[1], _step_lines(bottom, lines) * 1.05)
                if lines:
                    drawn.bottom[name] = [label for label, _, _ in lines]
                hwm = next((int(f_hwm) for f_hwm in [series.get("hwm")] if f_hwm), 70)
                bottom.axhline(hwm, color="k", linestyle=":", linewidth=2)
                bottom.text(
                    0.99,
                    hwm,
                    f"high-water mark {hwm}% ",
                    transform=bottom.get_yaxis_transform(),
                    ha="right",
                    va="bottom",
                    fontsize=14,
                )
                blocked_spans(bottom, series.get("blocked", []), height=0.05, label="a producer blocked")
                bottom.set_ylabel("broker usage, % of limit")
            detectors = list({f["detector"] for f in result.findings or []})
            label_rows = shade(top, result.findings or [], detectors, names=series.get("names"))
            shade(bottom, result.findings or [], detectors, label=False)
            top.set_ylabel("messages (running total)")
            bottom.set_xlabel("seconds since the run's start")
            verdict = result.grade.upper()
            head = f"{verdict}: {name}"
            top.set_title(
                head + "\n" + textwrap.fill(result.outcome.summary, 60),
                fontsize=16,
                loc="left",
                pad=max(28, title_pad(label_rows)),
            )
        for row in range(2):
            for ax in axes[row]:
                count_axis(ax, top=tallest[row] * (1.05 if row == 0 else 1.0))
                ax.set_xlim(0, span)
        for row in range(2):  # one legend per row, beside the plots: never over a line
            handles: dict[str, Any] = {}
            for ax in axes[row]:
                for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
                    handles.setdefault(label, h)
            if handles:
                axes[row, -1].legend(
                    handles.values(),
                    handles.keys(),
                    loc="upper left",
                    bbox_to_anchor=(1.02, 1.0),
                    borderaxespad=0,
                    frameon=False,
                )
        fig.suptitle(textwrap.fill(lab.title, 90), fontweight="bold")
        drawn.limits = [(ax.get_xlim(), ax.get_ylim()) for ax in axes.flat]
        out.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
    return drawn
