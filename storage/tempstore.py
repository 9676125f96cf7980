"""The temp store: spill files for ActiveMQ's FilePendingMessageCursor.

Theory of operation (ActiveMQ ``PListStoreImpl`` / ``PListImpl``). The store
lives in its own directory and is wiped at open: nothing in it survives a
restart, so it is never recovered and needs no transactions. Entries are
ENQUEUE records (the key is the list id) framed exactly like the journal's,
appended to files ``tmp-00000001.data`` ... of ``max_file_length`` bytes
(ActiveMQ's default is 32 MiB).

Usage is the sum of the files' sizes, and each file is **created at its full
size** (preallocated with ``ftruncate``), so one entry costs a whole file, as
in ActiveMQ, where TempUsage counts the journal files' lengths. (The other
choice, counting only written bytes, would hide the behaviour this store is
here to show.)

An entry is known by its seq (``append`` returns it). Where each live one is
(file, offset, length) is kept in an ``EntryTable``, the journal's table of
live enqueues (``entries.py``): a few bytes a row, mostly in an anonymous
spill file past its cache, not an object and a dict entry (some 250 bytes),
for a spilled backlog may hold millions.

A file is deleted once no entry in it is referenced (``release``), **except
the current write file, which is never deleted**. So after the first spill
the usage never falls below one file: with a temp limit below
``max_file_length`` the store reports >= 100% forever, and a producer blocked
waiting for temp space never wakes (the temp-storage deadlock).

File system errors: a full disk refuses an append with ``StoreFull`` and
leaves the store as it was; anything else is ``StoreFailed`` (``fileio.py``),
a read that fails included: the broker stops (its reasons are in
``minibroker/core/storehooks.py``, "A temp store that fails").
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

from storage.bodies import ENQUEUE_FIXED, Layout, as_bytes, encode_enqueue, encode_file_header, verified_payload
from storage.entries import DEFAULT_CACHE_ROWS, LIVE, EntryTable
from storage.errors import CorruptRecord, StoreFailed, StoreFull
from storage.fileio import file_ops, is_no_space
from storage.record import HEADER_SIZE, RecordType, encode
from storage.segment import Segment, numbered_files

__all__ = ["TEMP_MAX_FILE_LENGTH", "TEMP_STORE_NAME", "TempFileInfo", "TempHandle", "TempStore"]

TEMP_MAX_FILE_LENGTH = 32 * 1024 * 1024
#: The store its errors name.
TEMP_STORE_NAME = "temp store"
_NAME = re.compile(r"^tmp-(\d{8})\.data$")


class TempHandle(NamedTuple):
    """Where a spilled entry is: its seq, file, offset and record length (``TempStore.locate``)."""

    seq: int
    file_id: int
    offset: int
    length: int


class TempFileInfo(NamedTuple):
    """One temp file: its name, size, referenced entries, and whether it is current."""

    file_id: int
    name: str
    size: int
    referenced: int
    current: bool


class TempStore:
    """Append-only spill files with reference counts; see the module docstring."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        max_file_length: int = TEMP_MAX_FILE_LENGTH,
        cache_rows: int = DEFAULT_CACHE_ROWS,
    ) -> None:
        """``cache_rows``: the rows of the table of live entries kept in memory (``EntryTable``)."""
        self.directory = Path(directory)
        self.max_file_length = max_file_length
        file_ops().make_directory(self.directory)
        for path in numbered_files(self.directory, _NAME).values():  # wiped at open
            file_ops().unlink(path)
        self._segments: dict[int, Segment] = {}
        self._refs: dict[int, int] = {}
        self._live = EntryTable(cache_rows, self.directory)
        self._current: Segment | None = None
        self._next_id = 1
        self._next_seq = 1
        header = encode_file_header(Layout.TEMP, 0, 0)
        self._max_entry = max_file_length - (HEADER_SIZE + len(header[0])) - HEADER_SIZE - 4

    def _refused(self, what: str, exc: OSError) -> StoreFull | StoreFailed:
        if is_no_space(exc) and getattr(exc, "cut_back", True):
            return StoreFull(TEMP_STORE_NAME, what, exc)
        return StoreFailed(TEMP_STORE_NAME, what, exc)

    def _new_file(self) -> Segment:
        fid = self._next_id
        path = self.directory / f"tmp-{fid:08d}.data"
        seg = None
        try:
            seg = Segment.create(path, fid, self.max_file_length, reserve=True)
            seg.open_writer(0)
            seg.append(
                encode(
                    RecordType.FILE_HEADER, self._next_seq, encode_file_header(Layout.TEMP, fid, self.max_file_length)
                )
            )
        except OSError as exc:
            if seg is not None:
                seg.close()
            if path.exists():
                try:
                    file_ops().unlink(path)
                except OSError as again:
                    raise StoreFailed(TEMP_STORE_NAME, f"removing {path}", again) from None
            raise self._refused(f"creating {path}", exc) from None
        self._next_id += 1
        self._take_seq()
        self._segments[fid] = seg
        self._refs[fid] = 0
        old, self._current = self._current, seg
        if old is not None:
            old.close_writer()
            if self._refs[old.file_id] == 0:
                self._delete(old.file_id)
        return seg

    def _take_seq(self) -> int:
        seq = self._next_seq
        self._next_seq += 1
        return seq

    def _delete(self, file_id: int) -> None:
        seg = self._segments.pop(file_id)
        del self._refs[file_id]
        try:
            seg.unlink()
        except OSError as exc:
            raise StoreFailed(TEMP_STORE_NAME, f"deleting {seg.path}", exc) from None

    def append(self, list_id: bytes | str, payload: bytes) -> int:
        """Spill ``payload`` for list ``list_id``; returns its seq, to read or release it."""
        key = as_bytes(list_id, "list id")
        if len(key) + len(payload) > self._max_entry:
            raise ValueError(f"a {len(payload)}-byte entry does not fit in a temp file")
        parts = encode_enqueue(key, b"", payload)
        length = ENQUEUE_FIXED + len(key) + len(payload)
        seg = self._current
        if seg is None or seg.offset + length > seg.capacity:
            seg = self._new_file()
        seq = self._next_seq
        try:
            offset = seg.append(encode(RecordType.ENQUEUE, seq, parts))
        except OSError as exc:
            raise self._refused(f"writing to {seg.path}", exc) from None
        self._take_seq()
        self._refs[seg.file_id] += 1
        self._live.add(seq, b"", seg.file_id, offset, length, LIVE)  # the list id is in the record: never read back
        return seq

    def _find(self, seq: int) -> int:
        """The table position of the live entry ``seq`` (KeyError if it is not live)."""
        pos = self._live.find(seq, LIVE)
        if pos < 0:
            raise KeyError(f"no temp entry {seq}")
        return pos

    def locate(self, seq: int) -> TempHandle:
        """Where the live entry ``seq`` is (KeyError if it is not live)."""
        return TempHandle(*self._live.location(self._find(seq)))

    def read(self, seq: int) -> bytes:
        """The payload of a spilled entry that has not been released. A read that
        fails, or bytes that are not what was written, are ``StoreFailed``."""
        _, file_id, offset, length = self.locate(seq)
        seg = self._segments[file_id]
        try:
            return verified_payload(seg.pread(offset, length), seq, seg.name, offset)
        except (OSError, CorruptRecord) as exc:
            raise StoreFailed(TEMP_STORE_NAME, f"reading {seg.path}", exc) from None

    def release(self, seq: int) -> None:
        """Drop an entry; its file goes when nothing in it is referenced (unless current)."""
        file_id = self._live.kill(self._find(seq))
        self._refs[file_id] -= 1
        current = self._current.file_id if self._current is not None else None
        if self._refs[file_id] == 0 and file_id != current:
            self._delete(file_id)

    def flush(self) -> None:
        """Push buffered entries to the OS (reads flush by themselves)."""
        if self._current is not None:
            self._current.flush()

    def disk_usage(self) -> int:
        """Bytes on disk: every file counted at its full (preallocated) size."""
        return sum(seg.capacity for seg in self._segments.values())

    @property
    def entries(self) -> int:
        return len(self._live)

    def files(self) -> list[TempFileInfo]:
        current = self._current.file_id if self._current is not None else None
        return [
            TempFileInfo(fid, seg.name, seg.capacity, self._refs[fid], fid == current)
            for fid, seg in sorted(self._segments.items())
        ]

    def close(self) -> None:
        self._live.close()
        for seg in self._segments.values():
            seg.close()
        self._segments.clear()
        self._current = None
