"""Sampling a broker over a window, and the report: ``doctor --live``.

``run_live(target, window, interval)`` opens the reader the URL calls for,
takes a sample about every ``interval`` seconds for ``window`` seconds,
evaluates the signatures (``signatures.evaluate``) and returns a ``LiveReport``;
the broker failing at any point is one ``DoctorError`` line (exit status 2).
"""

from __future__ import annotations

import asyncio
import json
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...sources import SOURCES
from ..model import DoctorError
from .read_http import HttpReader
from .read_stomp import StompReader
from .sample import Sample
from .signatures import LiveFinding, evaluate, unanswered
from .target import Target

__all__ = ["LiveReport", "run_live", "format_live_text", "format_live_json", "live_status"]

_NAMES = {"activemq": "ActiveMQ", "minibroker": "minibroker", "rabbitmq": "RabbitMQ"}
_WIDTH = 100


@dataclass(frozen=True)
class LiveReport:
    target: str
    broker: str
    version: str
    samples: int
    seconds: float
    findings: tuple[LiveFinding, ...]
    notes: tuple[str, ...]


def live_status(report: LiveReport) -> int:
    """0 nothing found, 1 something found."""
    return 1 if report.findings else 0


async def run_live(
    target: Target,
    window: float,
    interval: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    timeout: float = 5.0,
) -> LiveReport:
    """Sample ``target`` for ``window`` seconds, one sample every ``interval``, and evaluate."""
    reader: StompReader | HttpReader = (
        StompReader(target, timeout) if target.scheme == "stomp" else HttpReader(target, timeout)
    )
    await reader.open()
    samples: list[Sample] = []
    start = clock()
    try:
        while True:
            taken = clock()
            samples.append(await reader.sample(taken - start))
            if taken - start >= window:
                break
            await asyncio.sleep(max(0.0, interval - (clock() - taken)))
    finally:
        await reader.close()
    if not samples:
        raise DoctorError(f"no sample taken from {target.shown}")
    return LiveReport(
        target=target.shown,
        broker=reader.kind,
        version=reader.version,
        samples=len(samples),
        seconds=samples[-1].t,
        findings=tuple(evaluate(samples)),
        notes=tuple(unanswered(samples)),
    )


def _series_lines(f: LiveFinding) -> list[str]:
    rows = list(f.series)
    shown = rows if len(rows) <= 6 else [*rows[:3], None, *rows[-2:]]
    out = []
    for row in shown:
        if row is None:
            out.append(f"      ... {len(rows) - 5} more")
            continue
        t, values = row
        figures = ", ".join(f"{k} {v}" for k, v in values.items() if v is not None)
        out.append(f"      t={t:6.1f} s  {figures}")
    return out


def format_live_text(report: LiveReport) -> str:
    """The report, as the configuration doctor's: title, count, findings with evidence and fix, sources."""
    title = f"minibroker doctor: {report.samples} samples of {_NAMES.get(report.broker, report.broker)}"
    lines = [f"{title} {report.version} at {report.target} over {report.seconds:.0f} s"]
    if not report.findings:
        lines.append("No problems found.")
    else:
        lines.append(f"{len(report.findings)} problem(s) found")
    for f in report.findings:
        lines += ["", f"warning [{f.fix.source or 'live'}] {f.pathology}: {f.headline}"]
        lines.append(f"    evidence ({f.start:.1f}-{f.end:.1f} s, {len(f.series)} samples):")
        lines += _series_lines(f)
        if f.culprits:
            lines.append(f"    {f.culprit_role}: {', '.join(f.culprits)}")
        if f.fix.citation:
            lines += textwrap.wrap(f.fix.citation, _WIDTH, initial_indent="    write-up: ", subsequent_indent=" " * 14)
        if f.fix.lab:
            lines.append(f"    lab: examples/labs/{f.fix.lab} (minibroker lab run {f.fix.lab.split('-', 1)[0]})")
        text, *rest = f.fix.text.split("\n")
        lines += textwrap.wrap(text, _WIDTH, initial_indent="    fix: ", subsequent_indent=" " * 9)
        lines += [f"        {line}" for line in rest]
    for note in report.notes:
        lines += ["", *textwrap.wrap(note, _WIDTH, initial_indent="note: ", subsequent_indent="      ")]
    cited = sorted({f.fix.source for f in report.findings if f.fix.source in SOURCES})
    if cited:
        lines += ["", "Sources cited"]
        lines += [f"  {s}: {SOURCES[s].citation()}: {SOURCES[s].trap}" for s in cited if s is not None]
    return "\n".join(lines)


def format_live_json(report: LiveReport) -> str:
    data: dict[str, Any] = {
        "target": report.target,
        "broker": report.broker,
        "version": report.version,
        "samples": report.samples,
        "seconds": round(report.seconds, 3),
        "status": live_status(report),
        "findings": [f.to_json() for f in report.findings],
        "notes": list(report.notes),
    }
    for item in data["findings"]:
        source = item["source"]
        item["citation"] = SOURCES[source].citation() if source in SOURCES else None
    return json.dumps(data, indent=2)
