"""PNG plots from small, already aggregated series (lists of dicts), with matplotlib's Agg.

Drawn to be projected in a classroom: 16:9 figures with large lettering, every
axis from 0 and counts on integer ticks, clients named as the run names them
(client-id, else the name a lab gives its client), lines that stay apart where
they overlap (each its own style, the wider drawn first), legends beside the
plot rather than over it, and a finding's window shaded, and named, only where
it holds. Each function draws one figure and returns the file name it wrote,
or None when there was nothing to draw. ``clients.labs.figure`` draws a lab's
runs side by side with the same helpers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

__all__ = [
    "plot_all",
    "classroom",
    "consumer_lines",
    "sent_lines",
    "usage_lines",
    "journal_lines",
    "blocked_spans",
    "draw_lines",
    "line_style",
    "write_end",
    "shade",
    "title_pad",
    "count_axis",
    "COLORS",
    "SIZE",
    "DPI",
]

Row = dict[str, Any]
Line = tuple[str, list[float], list[float]]  # label, x, y
COLORS = {
    "starved_consumer": "tab:red",
    "blocked_producer_idle_consumers": "tab:orange",
    "swap_storm": "tab:purple",
    "slow_consumer": "tab:brown",
    "stalled_socket": "tab:gray",
    "journal_full_few_live": "tab:olive",
}
SIZE = (16, 9)  # inches: 1600 x 900 px at DPI
DPI = 100
ROW = 18  # points: one row of finding names above a plot (14-point lettering and a gap)
#: Line styles in turn: lines that lie on one another stay visible (the first is widest).
STYLES = [
    dict(linestyle="-", linewidth=5.0),
    dict(linestyle="--", linewidth=3.5),
    dict(linestyle=":", linewidth=3.5),
    dict(linestyle="-.", linewidth=3.0),
    dict(linestyle=(0, (1, 1)), linewidth=2.5),
    dict(linestyle=(0, (5, 1)), linewidth=2.0),
]
PALETTE = [
    "tab:blue",
    "tab:orange",
    "tab:green",
    "tab:red",
    "tab:purple",
    "tab:brown",
    "tab:pink",
    "tab:olive",
    "tab:cyan",
    "tab:gray",
]
_RC: dict[RcKeyType, Any] = {
    "font.size": 17,
    "axes.titlesize": 21,
    "axes.labelsize": 18,
    "xtick.labelsize": 15,
    "ytick.labelsize": 15,
    "legend.fontsize": 15,
    "figure.titlesize": 24,
    "axes.titlepad": 26,
}


@contextmanager
def classroom() -> Iterator[None]:
    """Lettering big enough for the back of a classroom."""
    with plt.rc_context(_RC):
        yield


def _by(rows: Iterable[Row], key: str) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        out[str(r[key])].append(r)
    return out


def shade(
    ax: Any,
    findings: Sequence[Row],
    detectors: Sequence[str],
    *,
    label: bool = True,
    names: dict[str, str] | None = None,
) -> int:
    """Each finding's window, shaded, and named above the plot (with whom it is about), only
    where it holds. Returns the rows of names drawn: pass them to ``title_pad`` for the title.

    - every name has a row of its own above the plot, the first nearest the plot: two
      findings over (nearly) the same window would else print one name over the other;
    - a window shared by several findings is shaded once.
    """
    shaded: set[tuple[float, float]] = set()
    rows = 0
    for f in findings:
        if f["detector"] not in detectors:
            continue
        color = COLORS.get(f["detector"], "tab:red")
        window = (f["start"], f["end"])
        if window not in shaded:
            shaded.add(window)
            ax.axvspan(f["start"], f["end"], color=color, alpha=0.15, linewidth=0)
        if label:  # above the plot, over its window: never over a line
            who = (names or {}).get(f["session"] or "", "")
            text = f["detector"].replace("_", " ") + (f": {who}" if who else "")
            ax.annotate(
                text,
                ((f["start"] + f["end"]) / 2, 1.0),
                xycoords=ax.get_xaxis_transform(),
                xytext=(0, 3 + ROW * rows),
                textcoords="offset points",
                color=color,
                ha="center",
                va="bottom",
                fontsize=14,
                fontweight="bold",
                annotation_clip=False,
            )
            rows += 1
    return rows


def title_pad(rows: int) -> float:
    """Points between a plot and its title that clear ``rows`` rows of finding names."""
    return max(float(plt.rcParams["axes.titlepad"]), 8.0 + ROW * rows)


def count_axis(ax: Any, *, integer: bool = True, top: float | None = None) -> None:
    """Both axes from 0; whole numbers on the y ticks of a count."""
    ax.set_ylim(bottom=0, top=top)
    ax.set_xlim(left=0)
    if integer:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)


def draw_lines(
    ax: Any, lines: Sequence[Line], *, colors: dict[str, str] | None = None, step: bool = False, ends: bool = False
) -> None:
    """Each line in its own style; the widest first, so none hides another. ``ends`` writes
    each line's last value by its end (a line along 0 is read as well as any)."""
    written: set[float] = set()
    for i, (label, xs, ys) in enumerate(lines):
        look = line_style(i) | ({"color": colors[label]} if colors and label in colors else {})
        if step:
            ax.step(xs, ys, where="post", label=label, zorder=2 + i, clip_on=False, **look)
        else:
            ax.plot(xs, ys, label=label, zorder=2 + i, clip_on=False, **look)
        if ends and ys:
            write_end(ax, xs, ys, look["color"], written)


def line_style(i: int) -> dict[str, Any]:
    """The ``i``-th line's colour and style (a new dict: the caller may change it)."""
    return {"color": PALETTE[i % len(PALETTE)], **STYLES[i % len(STYLES)]}


def write_end(ax: Any, xs: Sequence[float], ys: Sequence[float], color: str, written: set[float], **extra: Any) -> None:
    """A line's last value written beside its end, unless a line of ``ax`` already shows
    that value (``written``: those shown so far); ``extra`` goes to ``annotate``."""
    if ys[-1] in written:
        return
    written.add(ys[-1])
    ax.annotate(
        f"{ys[-1]:.0f}",
        (xs[-1], ys[-1]),
        xytext=(-6, 5),
        textcoords="offset points",
        color=color,
        fontsize=15,
        fontweight="bold",
        ha="right",
        va="bottom",
        **extra,
    )


def _beside(ax: Any) -> None:
    """The legend beside the plot, never over its lines."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, frameon=False)


def _save(fig: Any, out: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out / name, dpi=DPI)
    plt.close(fig)
    return name


def _cumulative(rows: list[Row], key: str, step: float, span: float) -> tuple[list[float], list[float]]:
    """A running total of ``key`` per bucket, from 0 at t=0 to the end of the run."""
    per: dict[float, float] = defaultdict(float)
    for r in rows:
        per[r["t"]] += r[key] or 0
    xs, ys, total = [0.0], [0.0], 0.0
    for t in sorted(per):
        total += per[t]
        xs.append(t + step)
        ys.append(total)
    if xs[-1] < span:
        xs.append(span)
        ys.append(total)
    return xs, ys


def consumer_label(names: dict[str, str], session: str, sub: str | None, subs_per_session: int) -> str:
    name = names.get(session, session)
    return f"{name} ({sub})" if subs_per_session > 1 and sub else name


def consumer_lines(series: dict[str, Any], step: float, span: float) -> list[Line]:
    """Messages each consumer received, as running totals, one line per name (a client that
    reconnects is one line); every subscription the series keeps, idle or not."""
    names = series.get("names", {})
    count: dict[str, int] = defaultdict(int)
    for s in series.get("subscriptions", []):
        count[s["session"]] += 1
    rows: dict[str, list[Row]] = defaultdict(list)
    for s in series.get("subscriptions", []):
        rows.setdefault(consumer_label(names, s["session"], s["sub"], count[s["session"]]), [])
    for r in series["consumer_rates"]:
        rows[consumer_label(names, r["consumer"], r["sub"], count[r["consumer"]])].append(r)
    lines = [(label, *_cumulative(rs, "received", step, span)) for label, rs in rows.items()]
    return sorted(lines, key=lambda line: (-line[2][-1], line[0]))


def sent_lines(series: dict[str, Any], step: float, span: float, dests: set[str] | None = None) -> list[Line]:
    """Messages sent to each destination (a queue's enqueues, a topic's publishes), as running totals."""
    out = []
    for dest, rows in sorted(_by(series["dest_rates"], "dest").items()):
        if dests is not None and dest not in dests:
            continue
        key = "enqueued" if dest.startswith("/queue/") else "sent"
        xs, ys = _cumulative(rows, key, step, span)
        if ys[-1]:
            out.append((f"sent to {dest}", xs, ys))
    return out


def usage_lines(series: dict[str, Any]) -> list[Line]:
    rows = sorted(series.get("usage", []), key=lambda r: r["t"])
    out = []
    for col, label in (("mem_pct", "memory %"), ("temp_pct", "temp %"), ("store_pct", "store %")):
        ys = [r[col] for r in rows]
        if any(ys):
            out.append((label, [r["t"] for r in rows], ys))
    return out


def blocked_spans(ax: Any, blocked: Iterable[dict[str, float]], *, height: float, label: str) -> None:
    """A red band along the foot of ``ax`` (``height`` of the axes) for each time a producer
    was blocked, from its ``start`` to its ``end``; ``label`` names the first in the legend."""
    for i, span in enumerate(blocked):
        ax.axvspan(
            span["start"],
            span["end"],
            ymin=0,
            ymax=height,
            color="tab:red",
            linewidth=0,
            label=label if i == 0 else None,
        )


def journal_lines(series: dict[str, Any], span: float) -> list[Line]:
    """Files each journal kept and those pinned by live messages, at each journal event."""
    out: list[Line] = []
    for store, rows in sorted(_by(series.get("journal", []), "store").items()):
        rows.sort(key=lambda r: r["t"])
        ts = [0.0] + [r["t"] for r in rows] + [span]
        for col, what in (("files", "files"), ("pinned", "pinned files")):
            ys: list[float] = [r[col] or 0 for r in rows]
            out.append((f"{store}: {what}", ts, [0, *ys, *ys[-1:]]))
    return out


def rates(out: Path, series: dict[str, Any], step: float, span: float, findings: list[Row]) -> str | None:
    dest_rates = series["dest_rates"]
    if not dest_rates:
        return None
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=SIZE, sharex=True)
    ins, outs = [], []
    for dest, rows in sorted(_by(dest_rates, "dest").items()):
        rows.sort(key=lambda r: r["t"])
        ts = [r["t"] for r in rows]
        key = "enqueued" if dest.startswith("/queue/") else "sent"  # a topic's are its publishes
        ins.append((dest, ts, [r[key] / step for r in rows]))
        outs.append((dest, ts, [r["dispatched"] / step for r in rows]))
        if any(r.get("client_sent") for r in rows):  # a client-side (replay) trace
            ins.append((f"{dest} (client)", ts, [r["client_sent"] / step for r in rows]))
        if any(r.get("client_received") for r in rows):
            outs.append((f"{dest} (client)", ts, [r["client_received"] / step for r in rows]))
    draw_lines(ax1, ins, step=True)
    draw_lines(ax2, outs, step=True)
    ax1.set_ylabel("sent in, msg/s")
    ax2.set_ylabel("dispatched, msg/s")
    ax2.set_xlabel("seconds since the trace's start")
    for ax in (ax1, ax2):
        count_axis(ax, integer=False)
        ax.set_xlim(0, span)
        shade(
            ax,
            findings,
            ["starved_consumer", "blocked_producer_idle_consumers", "slow_consumer"],
            label=ax is ax1,
            names=series.get("names"),
        )
        _beside(ax)
    fig.suptitle("Per-destination rates")
    return _save(fig, out, "rates.png")


def backlog(out: Path, series: dict[str, Any], span: float, findings: list[Row]) -> str | None:
    queues = {d: rows for d, rows in _by(series["dest_rates"], "dest").items() if d.startswith("/queue/")}
    if not queues:
        return None
    fig, ax = plt.subplots(figsize=SIZE)
    lines = []
    for dest, rows in sorted(queues.items()):
        rows.sort(key=lambda r: r["t"])
        lines.append((dest, [r["t"] for r in rows] + [span], [r["backlog"] for r in rows] + [rows[-1]["backlog"]]))
    draw_lines(ax, lines, step=True, ends=True)
    count_axis(ax, top=max(1, max(max(ys) for _, _, ys in lines)) * 1.08)
    ax.set_xlim(0, span)
    label_rows = shade(ax, findings, ["starved_consumer"], names=series.get("names"))
    ax.set_ylabel("messages waiting")
    ax.set_xlabel("seconds since the trace's start")
    ax.set_title(
        "Queue backlog (from the last broker start: recovered + enqueued - removed)", pad=title_pad(label_rows)
    )
    _beside(ax)
    return _save(fig, out, "backlog.png")


def consumers(out: Path, series: dict[str, Any], step: float, span: float, findings: list[Row]) -> str | None:
    lines = consumer_lines(series, step, span)
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=SIZE)
    draw_lines(ax, lines, step=True, ends=True)
    count_axis(ax, top=max(max(ys) for _, _, ys in lines) * 1.08 + 1)
    ax.set_xlim(0, span)
    label_rows = shade(ax, findings, ["starved_consumer", "slow_consumer", "stalled_socket"], names=series.get("names"))
    ax.set_ylabel("messages received (running total)")
    ax.set_xlabel("seconds since the trace's start")
    ax.set_title("What each consumer received", pad=title_pad(label_rows))
    _beside(ax)
    return _save(fig, out, "consumers.png")


def usage(out: Path, series: dict[str, Any], span: float, hwm: int, findings: list[Row]) -> str | None:
    lines = usage_lines(series)
    if not series.get("usage"):
        return None
    fig, ax = plt.subplots(figsize=SIZE)
    draw_lines(ax, lines, step=True)
    ax.axhline(hwm, color="k", linestyle=":", linewidth=2)
    ax.text(span, hwm, f" high-water mark {hwm}%", va="center", ha="left", fontsize=14)
    top = max([100.0] + [max(ys) for _, _, ys in lines]) * 1.08
    blocked_spans(ax, series.get("blocked", []), height=0.04, label="a producer blocked (flow control)")
    count_axis(ax, top=top)
    ax.set_xlim(0, span)
    label_rows = shade(ax, findings, ["starved_consumer", "blocked_producer_idle_consumers"], names=series.get("names"))
    ax.set_ylabel("percent of the limit")
    ax.set_xlabel("seconds since the trace's start")
    ax.set_title("Broker usage", pad=title_pad(label_rows))
    _beside(ax)
    return _save(fig, out, "usage.png")


def swaps(out: Path, series: dict[str, Any], span: float, findings: list[Row]) -> str | None:
    rows = series.get("swaps", [])
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=SIZE)
    for event, marker, color in (("swap_out", "v", "tab:purple"), ("swap_in", "^", "tab:green")):
        mine = [r for r in rows if r["event"] == event]
        if mine:
            ax.vlines([r["t"] for r in mine], 0, [r["count"] for r in mine], color=color, linewidth=3)
            ax.scatter(
                [r["t"] for r in mine],
                [r["count"] for r in mine],
                marker=marker,
                s=160,
                color=color,
                label=event.replace("_", " "),
                zorder=3,
            )
    count_axis(ax, top=max(r["count"] or 0 for r in rows) * 1.15 + 1)
    ax.set_xlim(0, span)
    label_rows = shade(ax, findings, ["swap_storm"])
    ax.set_ylabel("messages moved")
    ax.set_xlabel("seconds since the trace's start")
    ax.set_title("File-cursor swaps to and from the temp store", pad=title_pad(label_rows))
    _beside(ax)
    return _save(fig, out, "swaps.png")


def journal(out: Path, series: dict[str, Any], span: float) -> str | None:
    files = series.get("journal_files", [])
    if not files:
        return None
    stores = _by(files, "store")
    fig, axes = plt.subplots(len(stores) + 1, 1, figsize=SIZE, squeeze=False)
    ax0 = axes[0, 0]
    draw_lines(ax0, journal_lines(series, span), step=True)
    count_axis(ax0)
    ax0.set_xlim(0, span)
    ax0.set_xlabel("seconds since the trace's start")
    ax0.set_ylabel("files")
    ax0.set_title("Journal files over time, and those pinned by live messages")
    _beside(ax0)
    for ax, (store, rows) in zip(axes[1:, 0], sorted(stores.items()), strict=True):
        rows.sort(key=lambda r: r["file"])
        ax.bar(
            range(len(rows)), [r["live"] for r in rows], color=["tab:red" if r["live"] else "tab:green" for r in rows]
        )
        ax.set_xticks(range(len(rows)), [r["file"] for r in rows], rotation=30, ha="right", fontsize=12)
        pinned = sum(1 for r in rows if r["live"])
        ax.set_title(f"journal {store} at t={rows[0]['t']:.0f} s, its last state: {pinned} of {len(rows)} files pinned")
        ax.set_ylabel("live messages")
        ax.set_ylim(bottom=0, top=max(1, max(r["live"] for r in rows)) * 1.15)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    return _save(fig, out, "journal.png")


def plot_all(out: Path, series: dict[str, Any], step: float, hwm: int, findings: list[Row]) -> dict[str, str]:
    """Draw every plot there is data for; returns {plot: file name}."""
    out.mkdir(parents=True, exist_ok=True)
    span = max([r["t"] + step for r in series.get("usage", [])] + [step])
    with classroom():
        made = {
            "rates": rates(out, series, step, span, findings),
            "backlog": backlog(out, series, span, findings),
            "consumers": consumers(out, series, step, span, findings),
            "usage": usage(out, series, span, hwm, findings),
            "swaps": swaps(out, series, span, findings),
            "journal": journal(out, series, span),
        }
    return {k: v for k, v in made.items() if v}
