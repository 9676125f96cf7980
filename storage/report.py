"""Inspection: which messages pin which journal files (Qpid's ``store_chk``).

``inspect`` takes an open ``Journal`` or a directory. For a directory it
replays the files read-only (nothing is cut or written), so it can look at
the journal of a broker that is down, and says what a torn tail open would
cut. ``format_report`` renders the report as text for ``minibroker journal
inspect DIR``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from storage.journal import Journal
from storage.model import FileInfo
from storage.recovery import detect_config, make_layout, scan_directory

__all__ = ["JournalReport", "format_report", "inspect"]

_PINS_SHOWN = 5


@dataclass(frozen=True, slots=True)
class JournalReport:
    """Per-file pins and totals of one journal."""

    directory: str
    layout: str
    name: str
    files: tuple[FileInfo, ...]
    records: int
    live: int
    disk_usage: int
    open_txids: tuple[bytes, ...]
    torn: str | None = None

    @property
    def pinned_files(self) -> int:
        return sum(1 for f in self.files if f.live)


def inspect(source: Journal | str | os.PathLike[str]) -> JournalReport:
    """Report on an open journal, or (read-only) on the journal in a directory."""
    if isinstance(source, Journal):
        config = source.config
        files = source.files()
        live = source.live_count
        txids = source.open_txids
        torn = None
    else:
        config = detect_config(source)
        layout = make_layout(config)
        result = scan_directory(config, layout)
        names = {fid: (seg.name, seg.capacity) for fid, seg in result.segments.items()}
        current = result.order[-1] if result.order else None
        files = result.index.file_infos(names, current, transitive=not layout.fixed_files)
        live = result.index.live_count
        txids = tuple(result.index.txs)
        torn = str(result.damage) if result.damage else None
    return JournalReport(
        directory=str(Path(config.directory)),
        layout=config.layout,
        name=config.queue_name,
        files=tuple(files),
        records=sum(f.records for f in files),
        live=live,
        disk_usage=sum(f.size for f in files),
        open_txids=txids,
        torn=torn,
    )


def _key(key: bytes) -> str:
    return key.decode("utf-8", "backslashreplace")


def _pins(file: FileInfo) -> str:
    if not file.pins:
        return "-"
    shown = ", ".join(
        f'{pin.seq} "{_key(pin.key)}"' + ("" if pin.file_id == file.file_id else f" (file {pin.file_id})")
        for pin in file.pins[:_PINS_SHOWN]
    )
    more = len(file.pins) - _PINS_SHOWN
    return shown + (f" ... and {more} more" if more > 0 else "")


def format_report(report: JournalReport) -> str:
    """The report as text, one line per file, then the totals."""
    sizes = sorted({f.size for f in report.files})
    lines = [
        f"Journal {report.name!r} in {report.directory} ({report.layout}, "
        f"{len(report.files)} files of {'/'.join(map(str, sizes)) or '-'} bytes; "
        "* = current write file):"
    ]
    for f in report.files:
        mark = "*" if f.current else " "
        if f.first_seq is None:
            lines.append(f"  {mark} {f.name}: <empty>")
            continue
        line = (
            f"  {mark} {f.name}: first_seq={f.first_seq} last_seq={f.last_seq} "
            f"records={f.records} used={f.used} live={f.live} pinned by: {_pins(f)}"
        )
        if f.open_txids:
            line += f" open tx: {', '.join(_key(t) for t in f.open_txids)}"
        lines.append(line)
    lines.append(
        f"Totals: {len(report.files)} files, {report.records} records, "
        f"{report.live} live enqueues, {report.disk_usage} bytes"
    )
    if report.live and report.pinned_files > 1:
        lines.append(
            f"WARNING: {report.live} live enqueue(s) pin {report.pinned_files} files; "
            "`compact` rewrites them next to each other."
        )
    if report.open_txids:
        lines.append(f"Open transactions: {', '.join(_key(t) for t in report.open_txids)}")
    if report.torn:
        lines.append(f"Torn tail (open will cut it): {report.torn}")
    return "\n".join(lines)
