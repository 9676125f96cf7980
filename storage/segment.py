"""One file of a journal or temp store: its descriptors, preallocation and reads.

Writes go straight to the file with ``pwrite`` (one call per record, through
the ``fileio`` seam), not through a buffer: a write the file system refuses
fails the call that made it, before the record counts anywhere, and a record
cut short by an error is zeroed again at once (``append``). So a full disk
refuses one operation and leaves nothing half-written behind, and a buffered
record can never fail later, after its message was handed on.

Preallocation is ``ftruncate`` to the full capacity: the file reads as zeros
(sparse on most filesystems), its size on disk is the capacity, and zeroing a
reused file is ``ftruncate(0)`` then ``ftruncate(capacity)``. A segment created
with ``reserve`` also reserves disk blocks (``fallocate``) a chunk ahead of the
write position, and an append may ask for ``keep`` bytes more to stay reserved
after it: an enqueue keeps room for the dequeues that will free space, so on a
full disk the consumers can still acknowledge and the files their acks empty
can still be deleted.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from storage.fileio import file_ops, is_no_space

__all__ = ["RESERVE_CHUNK", "Segment", "fsync_directory", "numbered_files"]

#: A reserving segment allocates its blocks this many bytes at a time.
RESERVE_CHUNK = 1024 * 1024


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
    file_ops().fsync_directory(directory)


class Segment:
    """A file with a numeric id, a capacity and a write position (``offset``)."""

    def __init__(self, path: Path, file_id: int, capacity: int, *, reserve: bool = False) -> None:
        self.path = path
        self.file_id = file_id
        self.capacity = capacity
        self.offset = 0
        #: Kept equal to ``offset``: every append reaches the file at once.
        self.flushed = 0
        self.reserve = reserve
        #: Bytes from the start whose blocks ``fallocate`` reserved (with ``reserve``).
        self.reserved = 0
        self._write_fd: int | None = None
        self._read_fd: int | None = None

    @property
    def name(self) -> str:
        return self.path.name

    def __repr__(self) -> str:
        return f"Segment({self.name!r}, offset={self.offset}, capacity={self.capacity})"

    # -- whole-file operations ------------------------------------------------

    @classmethod
    def create(cls, path: Path, file_id: int, capacity: int, *, reserve: bool = False) -> Segment:
        """Create a new file preallocated with zeros (fails if it exists)."""
        ops = file_ops()
        fd = ops.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            ops.ftruncate(fd, capacity)
        finally:
            ops.close(fd)
        return cls(path, file_id, capacity, reserve=reserve)

    def zero_from(self, offset: int) -> None:
        """Zero the file from ``offset`` to its capacity (cuts a torn tail, resets a file)."""
        ops = file_ops()
        fd = ops.open(self.path, os.O_RDWR)
        try:
            ops.ftruncate(fd, offset)
            ops.ftruncate(fd, max(self.capacity, offset))
        finally:
            ops.close(fd)
        self.flushed = min(self.flushed, offset)
        self.reserved = min(self.reserved, offset)

    def extend(self) -> None:
        """Grow a short file (one truncated by ``repair``) back to its capacity."""
        if os.path.getsize(self.path) < self.capacity:
            file_ops().truncate(self.path, self.capacity)

    def read_all(self) -> bytes:
        """The whole file (through the file seam: it may fail)."""
        return file_ops().read_file(self.path)

    def read_head(self, length: int) -> bytes:
        """The first ``length`` bytes (fewer if the file is shorter)."""
        return file_ops().read_file(self.path, length)

    def disk_size(self) -> int:
        return os.path.getsize(self.path)

    def unlink(self) -> None:
        self.close()
        file_ops().unlink(self.path)

    # -- writing ----------------------------------------------------------------

    def open_writer(self, offset: int) -> None:
        """Open the write descriptor, the write position at ``offset``."""
        self.close_writer()
        self._write_fd = file_ops().open(self.path, os.O_RDWR)
        self.offset = self.flushed = offset
        self.reserved = min(self.reserved, offset) if self.reserve else 0

    def append(self, data: bytes | memoryview, keep: int = 0) -> int:
        """Write one record at the write position; returns its offset.

        Raises ``OSError`` with nothing changed: the write position stays, and
        bytes a failed write left in the file are zeroed again, unless that
        fails too (then ``exc.cut_back`` is False: the file holds a torn record
        at the write position, which recovery cuts as a torn tail). With
        ``reserve``, blocks up to ``keep`` bytes past the record are reserved
        first (ENOSPC if the disk has none).
        """
        fd = self._write_fd
        assert fd is not None, "segment is not open for writing"
        offset = self.offset
        size = len(data)
        end = offset + size
        ops = file_ops()
        if self.reserve and min(self.capacity, end + keep) > self.reserved:
            self._reserve_to(min(self.capacity, end + keep))
        written = 0
        try:
            written = ops.pwrite(fd, data, offset)  # the usual case: one call writes it all
            if written != size:
                ops.write_all(fd, memoryview(data)[written:], offset + written)
        except OSError as exc:
            written += getattr(exc, "written", 0)
            exc.cut_back = True  # type: ignore[attr-defined]
            if written:
                try:
                    ops.write_all(fd, bytes(written), offset)
                except OSError:
                    exc.cut_back = False  # type: ignore[attr-defined]
            raise
        self.offset = self.flushed = end
        return offset

    def _reserve_to(self, needed: int) -> None:
        """Reserve blocks up to ``needed`` (a chunk beyond it if the disk has them)."""
        ops = file_ops()
        fd = self._write_fd
        assert fd is not None
        target = min(self.capacity, max(needed, self.reserved + RESERVE_CHUNK))
        try:
            ops.fallocate(fd, self.reserved, target - self.reserved)
        except OSError as exc:
            if not is_no_space(exc) or target == needed:
                raise
            ops.fallocate(fd, self.reserved, needed - self.reserved)  # at least what this record needs
            target = needed
        self.reserved = target

    def flush(self) -> None:
        """Nothing to do: appends reach the file at once (kept for the callers' symmetry)."""

    def fsync(self) -> None:
        ops = file_ops()
        if self._write_fd is not None:
            ops.fsync(self._write_fd)
        else:
            fd = ops.open(self.path, os.O_RDONLY)
            try:
                ops.fsync(fd)
            finally:
                ops.close(fd)

    def dup_fd(self) -> int:
        """A duplicate of the write descriptor, to fsync outside the journal's lock."""
        assert self._write_fd is not None, "segment is not open for writing"
        return os.dup(self._write_fd)

    def close_writer(self) -> None:
        if self._write_fd is not None:
            fd, self._write_fd = self._write_fd, None
            os.close(fd)

    # -- reading ----------------------------------------------------------------

    def pread(self, offset: int, length: int) -> bytes:
        """Read ``length`` bytes at ``offset`` (through the file seam: it may fail)."""
        ops = file_ops()
        if self._read_fd is None:
            self._read_fd = ops.open(self.path, os.O_RDONLY)
        return ops.pread(self._read_fd, length, offset)

    def close(self) -> None:
        self.close_writer()
        if self._read_fd is not None:
            os.close(self._read_fd)
            self._read_fd = None
