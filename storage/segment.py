"""One file of a journal or temp store: its handles, preallocation and reads.

A segment has at most one buffered write handle (only the current write file
has one) and one raw read descriptor used with ``os.pread`` for random reads.
Writes go through the buffer and reach the OS on ``flush``; ``flushed`` tracks
how far, so a read of a just-written record knows to flush first.

Preallocation is ``ftruncate`` to the full capacity: the file reads as zeros
(sparse on most filesystems), its size on disk is the capacity, and zeroing a
reused file is ``ftruncate(0)`` then ``ftruncate(capacity)``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import BinaryIO

__all__ = ["Segment", "fsync_directory", "numbered_files"]

_WRITE_BUFFER = 256 * 1024


def numbered_files(directory: Path, pattern: re.Pattern[str]) -> dict[int, Path]:
    """The files of ``directory`` whose names match ``pattern``, by its one number group."""
    found = {}
    for path in directory.iterdir():
        match = pattern.match(path.name)
        if match:
            found[int(match.group(1))] = path
    return found


def fsync_directory(directory: Path) -> None:
    """Make a created, renamed or deleted entry of ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Segment:
    """A file with a numeric id, a capacity and a write position (``offset``)."""

    def __init__(self, path: Path, file_id: int, capacity: int) -> None:
        self.path = path
        self.file_id = file_id
        self.capacity = capacity
        self.offset = 0
        self.flushed = 0
        self._writer: BinaryIO | None = None
        self._read_fd: int | None = None

    @property
    def name(self) -> str:
        return self.path.name

    def __repr__(self) -> str:
        return f"Segment({self.name!r}, offset={self.offset}, capacity={self.capacity})"

    # -- whole-file operations ------------------------------------------------

    @classmethod
    def create(cls, path: Path, file_id: int, capacity: int) -> Segment:
        """Create a new file preallocated with zeros (fails if it exists)."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.ftruncate(fd, capacity)
        finally:
            os.close(fd)
        return cls(path, file_id, capacity)

    def zero_from(self, offset: int) -> None:
        """Zero the file from ``offset`` to its capacity (cuts a torn tail, resets a file)."""
        if self._writer is not None:
            self._writer.flush()
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.ftruncate(fd, offset)
            os.ftruncate(fd, max(self.capacity, offset))
        finally:
            os.close(fd)
        self.flushed = min(self.flushed, offset)

    def extend(self) -> None:
        """Grow a short file (one truncated by ``repair``) back to its capacity."""
        if os.path.getsize(self.path) < self.capacity:
            os.truncate(self.path, self.capacity)

    def read_all(self) -> bytes:
        with open(self.path, "rb") as f:
            return f.read()

    def read_head(self, length: int) -> bytes:
        """The first ``length`` bytes (fewer if the file is shorter)."""
        with open(self.path, "rb") as f:
            return f.read(length)

    def disk_size(self) -> int:
        return os.path.getsize(self.path)

    def unlink(self) -> None:
        self.close()
        self.path.unlink()

    # -- writing ----------------------------------------------------------------

    def open_writer(self, offset: int) -> None:
        """Open the buffered write handle positioned at ``offset``."""
        self.close_writer()
        writer = open(self.path, "r+b", buffering=_WRITE_BUFFER)  # noqa: SIM115
        writer.seek(offset)
        self._writer = writer
        self.offset = self.flushed = offset

    def append(self, data: bytes) -> int:
        """Write one record at the write position; returns its offset (not flushed)."""
        assert self._writer is not None, "segment is not open for writing"
        offset = self.offset
        self._writer.write(data)
        self.offset = offset + len(data)
        return offset

    def flush(self) -> None:
        """Push buffered bytes to the OS (no fsync)."""
        if self._writer is not None and self.flushed != self.offset:
            self._writer.flush()
            self.flushed = self.offset

    def fsync(self) -> None:
        self.flush()
        if self._writer is not None:
            os.fsync(self._writer.fileno())
        else:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def dup_fd(self) -> int:
        """A duplicate of the write descriptor, to fsync outside the journal's lock."""
        assert self._writer is not None, "segment is not open for writing"
        return os.dup(self._writer.fileno())

    def close_writer(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    # -- reading ----------------------------------------------------------------

    def pread(self, offset: int, length: int) -> bytes:
        """Read ``length`` bytes at ``offset`` (flushes first if they are still buffered)."""
        if offset + length > self.flushed:
            self.flush()
        if self._read_fd is None:
            self._read_fd = os.open(self.path, os.O_RDONLY)
        return os.pread(self._read_fd, length, offset)

    def close(self) -> None:
        self.close_writer()
        if self._read_fd is not None:
            os.close(self._read_fd)
            self._read_fd = None
