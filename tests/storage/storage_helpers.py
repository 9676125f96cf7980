"""Helpers for the storage tests: small configs, fault injection, record offsets.

The fault-injection helpers damage a file the way a crash or a bad disk would
(etcd's ``repair_test.go``): cut it short, flip a byte, or zero a range. Files
are preallocated, so "cut short" also has a preallocated form: zero from an
offset to the end.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from storage.journal import Journal
from storage.model import JournalConfig, RecoveredRecord
from storage.record import Status, check, scan

SMALL = 4096  # bytes per file: a few dozen records, so tests roll files often


def small_config(directory: Path, layout: str, **overrides: object) -> JournalConfig:
    """A journal config with tiny files (tests shrink the sizes, as etcd's do)."""
    settings: dict[str, object] = {
        "directory": directory,
        "layout": layout,
        "name": "orders",
        "file_count": 8,
        "file_size": SMALL,
        "max_file_length": SMALL,
    }
    settings.update(overrides)
    return JournalConfig(**settings)  # type: ignore[arg-type]


def truncate(path: Path, at: int) -> None:
    """Cut the file at ``at`` bytes (a crash that lost the rest)."""
    os.truncate(path, at)


def flip(path: Path, at: int) -> None:
    """Invert every bit of the byte at ``at`` (a bad disk or a stray write)."""
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))


def zero(path: Path, start: int, end: int | None = None) -> None:
    """Zero bytes ``start``..``end`` (default: to the end of the file)."""
    size = os.path.getsize(path)
    end = size if end is None else end
    with open(path, "r+b") as f:
        f.seek(start)
        f.write(bytes(end - start))


def record_offsets(path: Path) -> list[tuple[int, int, int]]:
    """``(offset, end, seq)`` of every valid record in a file, header included."""
    data = path.read_bytes()
    first = check(data, memoryview(data), 0)
    if first[0] is not Status.OK:
        return []
    records = [(0, first[3], first[2])]
    records.extend((off, end, seq) for _, seq, off, end in scan(data, first[3]))
    return records


def copy_journal(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def payloads(journal: Journal) -> list[bytes | None]:
    """The payloads a journal recovers, in log order."""
    return [rec.payload for rec in journal.recovered()]


def reopened(config: JournalConfig) -> list[RecoveredRecord]:
    """What a fresh open of the journal recovers (the journal is closed again)."""
    with Journal.open(config) as journal:
        return list(journal.recovered())


# -- Qpid's enqueue threshold: pinned messages in a ring ----------------------------------------

PIN = b"P" * 200  # the seed's 200-byte message that nobody consumes
ORDINARY = b"o" * 200


def fill_file_with_traffic(j: Journal, *, pin: bool) -> int:
    """Optionally enqueue one pinning message, then enqueue+dequeue until the writer
    moves to the next file (the seed's qpid-send / qpid-receive loop). Returns the
    number of ordinary messages that went through."""
    start = j.current_file_id
    if pin:
        j.enqueue(b"Durable", PIN)
    sent = 0
    while j.current_file_id == start:
        loc = j.enqueue(b"Durable", ORDINARY)
        j.dequeue(loc.seq)
        sent += 1
    return sent


def pin_six_files_then_fill_the_seventh(j: Journal) -> int:
    """The first reproducer of Qpid's enqueue threshold (Red Hat's "Enqueue threshold
    exceptions triggered for qpid queue with few messages only"): six files with one pinned message each, then a
    seventh with one pin and traffic until an enqueue is refused."""
    sent = sum(fill_file_with_traffic(j, pin=True) for _ in range(6))
    j.enqueue(b"Durable", PIN)
    while True:
        loc = j.enqueue(b"Durable", ORDINARY)  # raises when the threshold is hit
        j.dequeue(loc.seq)
        sent += 1
