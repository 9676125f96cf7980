"""PNG plots from small, already aggregated series (lists of dicts), with matplotlib's Agg.

Each function draws one figure and returns the file name it wrote, or None when
there was nothing to draw. Findings' windows are shaded on the time plots so
a reader sees the pathology where it happened.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plot_all"]

Row = dict[str, Any]
COLORS = {"starved_consumer": "tab:red", "blocked_producer_idle_consumers": "tab:orange",
          "swap_storm": "tab:purple", "slow_consumer": "tab:brown", "stalled_socket": "tab:gray",
          "journal_full_few_live": "tab:olive"}


def _by(rows: Iterable[Row], key: str) -> dict[str, list[Row]]:
    out: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        out[str(r[key])].append(r)
    return out


def _shade(ax: Any, findings: Sequence[Row], detectors: Sequence[str]) -> None:
    seen = set()
    for f in findings:
        if f["detector"] in detectors:
            label = None if f["detector"] in seen else f["detector"]
            seen.add(f["detector"])
            ax.axvspan(f["start"], f["end"], color=COLORS.get(f["detector"], "tab:red"),
                       alpha=0.15, label=label)


def _save(fig: Any, out: Path, name: str) -> str:
    fig.tight_layout()
    fig.savefig(out / name, dpi=90)
    plt.close(fig)
    return name


def rates(out: Path, dest_rates: list[Row], step: float, findings: list[Row]) -> str | None:
    if not dest_rates:
        return None
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for dest, rows in sorted(_by(dest_rates, "dest").items()):
        rows.sort(key=lambda r: r["t"])
        ts = [r["t"] for r in rows]
        ax1.plot(ts, [r["enqueued"] / step for r in rows], label=f"{dest} enqueue")
        ax2.plot(ts, [r["dispatched"] / step for r in rows], label=f"{dest} dispatch")
        if any(r.get("client_sent") for r in rows):  # a client-side (replay) trace
            ax1.plot(ts, [r["client_sent"] / step for r in rows], linestyle="--", label=f"{dest} sent (client)")
        if any(r.get("client_received") for r in rows):
            ax2.plot(ts, [r["client_received"] / step for r in rows], linestyle="--", label=f"{dest} received (client)")
    ax1.set_ylabel("enqueued msg/s")
    ax2.set_ylabel("dispatched msg/s")
    ax2.set_xlabel("seconds since trace start")
    for ax in (ax1, ax2):
        _shade(ax, findings, ["starved_consumer", "blocked_producer_idle_consumers"])
        ax.legend(fontsize="x-small", loc="upper right")
    fig.suptitle("Per-destination rates")
    return _save(fig, out, "rates.png")


def backlog(out: Path, dest_rates: list[Row], findings: list[Row]) -> str | None:
    queues = {d: rows for d, rows in _by(dest_rates, "dest").items() if d.startswith("/queue/")}
    if not queues:
        return None
    fig, ax = plt.subplots(figsize=(10, 4))
    for dest, rows in sorted(queues.items()):
        rows.sort(key=lambda r: r["t"])
        ax.step([r["t"] for r in rows], [r["backlog"] for r in rows], where="post", label=dest)
    _shade(ax, findings, ["starved_consumer"])
    ax.set_ylabel("messages")
    ax.set_xlabel("seconds since trace start")
    ax.set_title("Queue backlog (recovered + enqueued - acked/expired/dead-lettered/discarded)")
    ax.legend(fontsize="x-small", loc="upper right")
    return _save(fig, out, "backlog.png")


def consumers(out: Path, consumer_rates: list[Row], step: float, findings: list[Row]) -> str | None:
    if not consumer_rates:
        return None
    fig, ax = plt.subplots(figsize=(10, 4))
    for key, rows in sorted(_by(consumer_rates, "label").items()):
        rows.sort(key=lambda r: r["t"])
        ax.plot([r["t"] for r in rows], [r["received"] / step for r in rows], label=key,
                marker=".", markersize=3, linewidth=1)
    _shade(ax, findings, ["starved_consumer", "slow_consumer", "stalled_socket"])
    ax.set_ylabel("received msg/s")
    ax.set_xlabel("seconds since trace start")
    ax.set_title("Per-consumer receive rates (busiest consumers)")
    ax.legend(fontsize="x-small", loc="upper right", ncol=2)
    return _save(fig, out, "consumers.png")


def usage(out: Path, usage_rows: list[Row], blocked: list[Row], hwm: int,
          findings: list[Row]) -> str | None:
    if not usage_rows:
        return None
    usage_rows = sorted(usage_rows, key=lambda r: r["t"])
    fig, ax = plt.subplots(figsize=(10, 4))
    ts = [r["t"] for r in usage_rows]
    for col, label in (("mem_pct", "memory"), ("store_pct", "store"), ("temp_pct", "temp")):
        ax.step(ts, [r[col] for r in usage_rows], where="post", label=f"{label} %")
    ax.axhline(hwm, color="k", linestyle=":", linewidth=1, label=f"cursor high-water mark {hwm}%")
    for i, b in enumerate(blocked):
        ax.axvspan(b["start"], b["end"], ymin=0, ymax=0.05, color="tab:red",
                   label="producer blocked" if i == 0 else None)
    _shade(ax, findings, ["starved_consumer", "blocked_producer_idle_consumers"])
    ax.set_ylabel("percent of limit")
    ax.set_xlabel("seconds since trace start")
    ax.set_title("Broker usage")
    ax.legend(fontsize="x-small", loc="upper right")
    return _save(fig, out, "usage.png")


def swaps(out: Path, swap_rows: list[Row], findings: list[Row]) -> str | None:
    if not swap_rows:
        return None
    fig, ax = plt.subplots(figsize=(10, 3.5))
    for event, marker in (("swap_out", "v"), ("swap_in", "^")):
        rows = [r for r in swap_rows if r["event"] == event]
        if rows:
            ax.scatter([r["t"] for r in rows], [r["count"] for r in rows], marker=marker,
                       label=event)
    _shade(ax, findings, ["swap_storm"])
    ax.set_ylabel("messages moved")
    ax.set_xlabel("seconds since trace start")
    ax.set_title("File-cursor swaps to and from the temp store")
    ax.legend(fontsize="x-small", loc="upper right")
    return _save(fig, out, "swaps.png")


def journal(out: Path, files: list[Row]) -> str | None:
    if not files:
        return None
    stores = _by(files, "store")
    fig, axes = plt.subplots(len(stores), 1, figsize=(10, 2.5 * len(stores)), squeeze=False)
    for ax, (store, rows) in zip(axes[:, 0], sorted(stores.items())):
        rows.sort(key=lambda r: r["file"])
        colors = ["tab:red" if r["live"] else "tab:green" for r in rows]
        ax.bar([r["file"] for r in rows], [r["live"] for r in rows], color=colors)
        pinned = sum(1 for r in rows if r["live"])
        ax.set_title(f"journal {store}: live enqueues per file ({pinned} of {len(rows)} pinned)")
        ax.set_ylabel("live")
        ax.tick_params(axis="x", labelrotation=45, labelsize="x-small")
    return _save(fig, out, "journal.png")


def plot_all(out: Path, series: dict[str, list[Row]], step: float, hwm: int,
             findings: list[Row]) -> dict[str, str]:
    """Draw every plot there is data for; returns {plot: file name}."""
    out.mkdir(parents=True, exist_ok=True)
    names = series.get("names", {})
    for r in series["consumer_rates"]:
        r.setdefault("label", f"{names.get(r['consumer'], r['consumer'])}/{r['sub']}")
    made = {
        "rates": rates(out, series["dest_rates"], step, findings),
        "backlog": backlog(out, series["dest_rates"], findings),
        "consumers": consumers(out, series["consumer_rates"], step, findings),
        "usage": usage(out, series["usage"], series["blocked"], hwm, findings),
        "swaps": swaps(out, series["swaps"], findings),
        "journal": journal(out, series["journal_files"]),
    }
    return {k: v for k, v in made.items() if v}
