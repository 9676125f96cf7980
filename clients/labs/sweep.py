"""``lab run NN --sweep KEY=V1,V2,...``: one run once per value, the outcome against the setting.

Each row comes from the run's own trace on the virtual clock, the same columns for
every lab:

- delivered: messages handed to a subscription the first time (``dispatch`` events
  without ``redelivered``);
- peak memory: the broker-wide memory usage's highest percent (``usage`` events);
- blocked: seconds producers were held by flow control (``flow_unblock``'s ``waited``,
  and a hold never released counts until the trace ends);
- grade: pathology, mitigated or healthy.

Under ``--plot DIR`` the table is also drawn, DIR/<lab>-sweep.png.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .model import Lab, RunSpec
from .runner import RunResult, run_one

__all__ = ["SweepRow", "outcome_row", "sweep"]


@dataclass(frozen=True)
class SweepRow:
    value: Any
    delivered: int
    peak_memory_pct: int
    blocked_s: float
    grade: str


def outcome_row(value: Any, result: RunResult) -> SweepRow:
    """The sweep's columns for one run, from its trace's events."""
    events = result.events or []
    delivered = sum(1 for e in events if e["event"] == "dispatch" and not e.get("redelivered"))
    peak = max((e["mem_pct"] for e in events if e["event"] == "usage" and "dest" not in e), default=0)
    end = max((e["ts"] for e in events), default=0.0)
    held: dict[tuple[str, str], float] = {}
    blocked = 0.0
    for e in events:
        if e["event"] == "flow_block":
            held.setdefault((e["session"], e["dest"]), e["ts"])
        elif e["event"] == "flow_unblock":
            held.pop((e["session"], e["dest"]), None)
            blocked += e["waited"]
    blocked += sum(end - since for since in held.values())
    return SweepRow(value, delivered, peak, round(blocked, 1), result.grade)


def sweep(
    lab: Lab,
    spec: RunSpec,
    key: str,
    values: list[Any],
    out: Callable[[str], None] = print,
    plot_dir: Path | None = None,
) -> list[SweepRow]:
    """Run ``spec`` once per value of ``key`` (each validated first), print the table."""
    specs = [spec.with_settings((key, value)) for value in values]  # every value refused before any run
    entry = lab.scenario().run
    out(f"Lab {lab.directory.name}: run {spec.name} swept over {key} (virtual clock)")
    rows = []
    width = max(len(key), *(len(str(v)) for v in values))
    out(f"  {key:>{width}}  {'delivered':>9}  {'peak memory':>11}  {'blocked':>9}  grade")
    for value, changed in zip(values, specs, strict=True):
        row = outcome_row(value, run_one(lab, changed, entry, keep_events=True, virtual=True))
        rows.append(row)
        out(
            f"  {str(value):>{width}}  {row.delivered:>9}  {row.peak_memory_pct:>10}%  "
            f"{row.blocked_s:>8.1f}s  {row.grade}"
        )
    if plot_dir is not None:
        path = plot_sweep(lab, spec, key, rows, plot_dir)
        out(f"The sweep drawn: {path}")
    return rows


def plot_sweep(lab: Lab, spec: RunSpec, key: str, rows: list[SweepRow], plot_dir: Path) -> Path:
    """Delivered, peak memory and time blocked against the setting, each point coloured by grade."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"pathology": "#c0392b", "mitigated": "#e67e22", "healthy": "#27ae60"}
    labels = [str(r.value) for r in rows]
    fig, axes = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    columns = (
        ("messages delivered", "delivered"),
        ("peak memory (%)", "peak_memory_pct"),
        ("blocked (s)", "blocked_s"),
    )
    for ax, (title, attr) in zip(axes, columns, strict=True):
        heights = [getattr(r, attr) for r in rows]
        ax.bar(labels, heights, color=[colours[r.grade] for r in rows])
        ax.set_ylabel(title)
    axes[-1].set_xlabel(key)
    from matplotlib.patches import Patch

    handles = [Patch(color=c) for c in colours.values()]
    axes[0].legend(handles, list(colours), loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize="small")
    fig.suptitle(f"Lab {lab.number}, run {spec.name}: the outcome against {key}")
    fig.tight_layout()
    plot_dir.mkdir(parents=True, exist_ok=True)
    path = plot_dir / f"{lab.directory.name}-sweep.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
