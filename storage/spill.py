"""A scratch file for index blocks that are not kept in memory.

Theory of operation. The journal's table of live enqueues (``entries.py``)
and a queue cursor's list of store-only messages grow by a few bytes per
message, and a backlog may hold millions: KahaDB keeps such an index in a
page file and only a cache of its pages in memory (``indexCacheSize``). Here
a structure cuts itself into blocks and writes the ones it has not used
lately to a ``SpillFile``: an anonymous temporary file (unlinked at once, so
nothing is left behind by a crash and recovery never sees it), written and
read with ``pwrite``/``pread`` at slots this class hands out. Several
structures may share one file, each holding its own slots.

The file is scratch, never a record of anything: the journal rebuilds its
index from its own records at every open. A slot that is rewritten with a
blob no larger than it is reused in place; a freed slot is reused for the
next blob of exactly its size (the blocks of a full chunk all have the same);
otherwise the blob goes to the end. Once every slot is free (a drained
backlog), the file is truncated to nothing. Freed bytes not yet reused are waste:
when waste is more than half the file (and over ``_REPACK_MIN``),
``needs_repack`` tells an owner that holds all the file's slots to copy them
into a fresh file (``repacked``).

Writes, reads and truncations go through the ``fileio`` seam. A full disk refuses a
``write`` with ``StoreFull`` and changes nothing (the caller keeps its block
in memory); any other error, a failed read included, is ``StoreFailed``: the
file holds the broker's only list of store-only messages past the cache.
"""

from __future__ import annotations

import os
import struct
import tempfile
from array import array
from collections.abc import Sequence
from pathlib import Path

from storage.errors import StoreFailed, StoreFull
from storage.fileio import file_ops, is_no_space

__all__ = ["Slot", "SpillFile", "pack_columns", "unpack_columns"]

#: (offset, capacity, length) of one blob in the file.
Slot = tuple[int, int, int]

#: Waste below this many bytes is never worth a repack.
_REPACK_MIN = 1 << 20
#: ``pack_columns``' head: how many arrays, and how many items each holds (then their typecodes).
_COLUMNS_HEAD = struct.Struct("<BI")


def pack_columns(columns: Sequence[array[int]], tail: bytes | bytearray = b"") -> bytes:
    """Arrays of one length, then ``tail``, as one blob for a slot (``unpack_columns``)."""
    codes = "".join(values.typecode for values in columns).encode("ascii")
    head = _COLUMNS_HEAD.pack(len(codes), len(columns[0]))
    return b"".join((head, codes, *(values.tobytes() for values in columns), tail))


def unpack_columns(blob: bytes) -> tuple[list[array[int]], memoryview]:
    """The arrays ``pack_columns`` packed into ``blob``, and a view of its tail."""
    count, items = _COLUMNS_HEAD.unpack_from(blob)
    at = _COLUMNS_HEAD.size + count
    view = memoryview(blob)
    columns = []
    for code in blob[_COLUMNS_HEAD.size : at].decode("ascii"):
        values = array(code)
        end = at + items * values.itemsize
        values.frombytes(view[at:end])
        columns.append(values)
        at = end
    return columns, view[at:]


class SpillFile:
    """Blobs at slots of an anonymous temporary file (see the module docstring)."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        try:
            # the file lives as long as the table that spills into it: closed by close()
            self._file = tempfile.TemporaryFile(dir=directory, prefix="index-spill-")  # noqa: SIM115
        except OSError:  # a read-only journal directory (an offline tool): the system's temp dir
            self._file = tempfile.TemporaryFile(prefix="minibroker-index-spill-")  # noqa: SIM115
        self._fd = self._file.fileno()
        self.directory = None if directory is None else Path(directory)
        #: Bytes the file holds, and of those the bytes no slot uses any more.
        self.size = 0
        self.waste = 0
        #: Freed slots by capacity: offsets to reuse for a blob of that size.
        self._free: dict[int, list[int]] = {}

    def _pwrite(self, blob: bytes, offset: int) -> None:
        try:
            file_ops().write_all(self._fd, blob, offset)
        except OSError as exc:
            if is_no_space(exc):
                raise StoreFull("index spill file", "writing a block", exc) from None
            raise StoreFailed("index spill file", "writing a block", exc) from None

    def write(self, blob: bytes, slot: Slot | None = None) -> Slot:
        """Store ``blob``: in ``slot`` if it fits there, else at the end. Returns its
        slot. ``StoreFull`` (a full disk) leaves ``slot`` as it was."""
        if slot is not None:
            offset, capacity, _ = slot
            if len(blob) <= capacity:
                self._pwrite(blob, offset)
                return (offset, capacity, len(blob))
        size = len(blob)
        reusable = self._free.get(size)
        if reusable:
            offset = reusable[-1]
            self._pwrite(blob, offset)
            reusable.pop()
            self.waste -= size
        else:
            offset = self.size
            self._pwrite(blob, offset)  # a short write past the end is overwritten by the next blob
            self.size += size
        if slot is not None:
            self.free(slot)
        return (offset, size, size)

    def read(self, slot: Slot) -> bytes:
        """The blob last written to ``slot``."""
        offset, _, length = slot
        try:
            data = file_ops().pread(self._fd, length, offset)
        except OSError as exc:
            raise StoreFailed("index spill file", "reading a block", exc) from None
        if len(data) != length:
            raise StoreFailed(
                "index spill file",
                "reading a block",
                OSError(f"short read at {offset} ({len(data)} of {length} bytes)"),
            )
        return data

    def free(self, slot: Slot) -> None:
        """``slot`` is no longer used."""
        offset, capacity, _ = slot
        self.waste += capacity
        self._free.setdefault(capacity, []).append(offset)
        if self.waste == self.size:  # nothing in use (a backlog drained): the file starts again, empty
            try:
                file_ops().ftruncate(self._fd, 0)
            except OSError as exc:
                raise StoreFailed("index spill file", "truncating it", exc) from None
            self.size = self.waste = 0
            self._free.clear()

    @property
    def needs_repack(self) -> bool:
        return self.waste > _REPACK_MIN and self.waste * 2 > self.size

    def repacked(self, slots: list[Slot]) -> tuple[SpillFile, list[Slot]]:
        """A fresh file holding the blobs of ``slots`` (the live ones), and their new
        slots in the same order; this file is closed."""
        fresh = SpillFile(self.directory)
        moved = [fresh.write(self.read(slot)) for slot in slots]
        self.close()
        return fresh, moved

    def close(self) -> None:
        self._file.close()
