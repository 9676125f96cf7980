"""The values the journal takes and returns: its config, locations, file info."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple

from storage.entries import DEFAULT_CACHE_ROWS

__all__ = [
    "FileInfo",
    "JournalConfig",
    "Location",
    "Pin",
    "RecoveredRecord",
    "MIN_FILE_SIZE",
    "RING_FILE_COUNT_RANGE",
]

RING_FILE_COUNT_RANGE = (4, 64)  # Qpid legacystore num-jfiles
#: The smallest journal file: its header and one record's framing.
MIN_FILE_SIZE = 256


@dataclass(frozen=True, slots=True, kw_only=True)
class JournalConfig:
    """How a journal is laid out on disk; validated on construction.

    ``directory`` holds one journal. ``name`` (default: the directory's name)
    is the queue name in error messages. ``ring`` uses ``file_count`` and
    ``file_size`` (Qpid legacystore defaults: 8 x 1.5 MiB); ``growing`` uses
    ``max_file_length`` (KahaDB default: 32 MiB). Tests shrink the sizes.
    """

    directory: str | os.PathLike[str]
    layout: Literal["ring", "growing"] = "growing"
    name: str | None = None
    file_count: int = 8
    file_size: int = 1536 * 1024
    max_file_length: int = 32 * 1024 * 1024
    #: Rows of the index of live enqueues kept in memory (KahaDB's ``indexCacheSize``,
    #: in rows): the rest is spilled to a scratch file (``entries.py``). None: keep all.
    index_cache_rows: int | None = DEFAULT_CACHE_ROWS
    #: Growing layout: after this many collections in a row that deleted nothing, write again
    #: the acks that keep a chain of files alive (KahaDB's ``compactAcksAfterNoGC``); 0: never.
    compact_acks_after_no_gc: int = 0
    #: ...even when the journal grew since the last time (``compactAcksIgnoresStoreGrowth``).
    compact_acks_ignores_store_growth: bool = False

    def __post_init__(self) -> None:
        if self.layout not in ("ring", "growing"):
            raise ValueError(f"layout must be 'ring' or 'growing', not {self.layout!r}")
        low, high = RING_FILE_COUNT_RANGE
        if not low <= self.file_count <= high:
            raise ValueError(f"file_count must be {low}..{high}, not {self.file_count}")
        if self.compact_acks_after_no_gc < 0:
            raise ValueError(f"compact_acks_after_no_gc must not be negative, not {self.compact_acks_after_no_gc}")
        if self.index_cache_rows is not None and self.index_cache_rows < 1:
            raise ValueError(f"index_cache_rows must be at least 1, not {self.index_cache_rows}")
        for field in ("file_size", "max_file_length"):
            if getattr(self, field) < MIN_FILE_SIZE:
                raise ValueError(f"{field} must be at least {MIN_FILE_SIZE} bytes")

    @property
    def path(self) -> Path:
        return Path(self.directory)

    @property
    def queue_name(self) -> str:
        return self.name if self.name is not None else Path(self.directory).name

    @property
    def segment_size(self) -> int:
        """The size of one file in this layout."""
        return self.file_size if self.layout == "ring" else self.max_file_length


class Location(NamedTuple):
    """Where a record lives: its seq, file id, offset in the file, total length."""

    seq: int
    file_id: int
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class RecoveredRecord:
    """A live enqueue as ``Journal.recovered()`` yields it.

    ``payload`` is None when iterating with ``payloads=False`` (read it later
    with ``Journal.read(location)``). ``delivered`` means a DELIVERED marker was
    written for it: the broker should flag it redelivered.
    """

    seq: int
    key: bytes
    payload: bytes | None
    location: Location
    delivered: bool


class Pin(NamedTuple):
    """A live enqueue that keeps a file from being reused or deleted."""

    seq: int
    key: bytes
    file_id: int


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One journal file as ``Journal.files()`` reports it.

    ``live`` counts the live enqueues in this file (including those of open
    transactions). ``pins`` are the messages that keep it: its own live
    enqueues and, in the growing layout, the live messages of older files for
    which it holds dequeue or commit records (or, for an abort record, the
    messages keeping the files of the transaction it ended). ``first_seq`` is the seq of its
    header record (None for a ring file never written), ``used`` the bytes of
    records in it, ``size`` its size on disk.
    """

    file_id: int
    name: str
    size: int
    used: int
    records: int
    live: int
    pins: tuple[Pin, ...]
    first_seq: int | None
    last_seq: int | None
    current: bool
    open_txids: tuple[bytes, ...] = ()

    @property
    def pinned(self) -> bool:
        return bool(self.pins) or bool(self.open_txids)
