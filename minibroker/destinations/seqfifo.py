"""A store cursor's list of store-only messages: numbers, mostly on disk.

Theory of operation. A queue's store-only messages are kept in dispatch order
as (broker seq, journal seq, expiry) entries: twelve bytes a message while the
numbers fit four-byte arrays (``storage.entries.column``; an expiry, in ms
since the epoch, widens its chunk's column to eight), for a backlog may hold
millions. The entries are cut into chunks of ``CHUNK`` (4,096), one array per
column. A queue is read at its head (a page-in) and written at its tail (a new
message), so only the first and the last chunk stay in memory; with a
``SpillFile`` (``spill``, asked for on first need) every chunk in between is
written there as it fills and read back when the head reaches it. A backlog of
a million messages then keeps about 100 kB of entries in memory, not 12 MB,
plus a few dozen bytes per spilled chunk. Without a spill file every chunk
stays in memory.

An entry that comes out of seq order (a transaction's sends, routed at its
commit) is inserted in its place, in whichever chunk holds that place.
"""

from __future__ import annotations

import itertools
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Iterator

from storage.entries import column, inserted, widened
from storage.errors import StoreFull
from storage.spill import Slot, SpillFile, pack_columns, unpack_columns

__all__ = ["CHUNK", "SeqFifo"]

#: Entries per chunk: a new chunk starts when the last one holds this many.
CHUNK = 4096


class _Chunk:
    """Consecutive entries: three arrays, or (spilled) the slot that holds them."""

    __slots__ = ("seqs", "refs", "expires", "count", "slot")

    def __init__(self, seqs: array[int], refs: array[int], expires: array[int]) -> None:
        self.seqs: array[int] | None = seqs
        self.refs: array[int] | None = refs
        self.expires: array[int] | None = expires
        self.count = len(seqs)
        self.slot: Slot | None = None

    def columns(self) -> tuple[array[int], array[int], array[int]]:
        assert self.seqs is not None and self.refs is not None and self.expires is not None
        return self.seqs, self.refs, self.expires

    def encode(self) -> bytes:
        return pack_columns(self.columns())

    @staticmethod
    def decode(blob: bytes) -> tuple[array[int], array[int], array[int]]:
        (seqs, refs, expires), _ = unpack_columns(blob)
        return seqs, refs, expires


class SeqFifo:
    """(broker seq, journal seq, expiry) entries in seq order, popped from the head
    (see the module docstring). An expiry of 0 is none."""

    __slots__ = ("_chunks", "_firsts", "head", "_len", "_spill")

    def __init__(
        self, spill: Callable[[], SpillFile] | None = None, entries: Iterable[tuple[int, int, int]] = ()
    ) -> None:
        """``spill``: gives the file for the chunks between the first and the last
        (None: keep them all in memory)."""
        self._chunks: list[_Chunk] = []
        #: Each chunk's lowest seq (a bound: entries before ``head`` may have gone).
        self._firsts: list[int] = []
        #: Entries of the first chunk already dropped.
        self.head = 0
        self._len = 0
        self._spill = spill
        for seq, ref, expires in entries:
            self.add(seq, ref, expires)

    def __len__(self) -> int:
        return self._len

    def nbytes(self) -> int:
        """Bytes of the entries in memory."""
        return sum(len(a) * a.itemsize for c in self._chunks if c.seqs is not None for a in c.columns())

    def spilled(self) -> int:
        """Chunks in the spill file."""
        return sum(1 for c in self._chunks if c.seqs is None)

    # -- chunks ----------------------------------------------------------------

    def _arrays(self, chunk: _Chunk) -> tuple[array[int], array[int], array[int]]:
        """``chunk``'s arrays (a spilled one's read aside, not kept)."""
        if chunk.seqs is not None:
            return chunk.columns()
        assert self._spill is not None and chunk.slot is not None
        return _Chunk.decode(self._spill().read(chunk.slot))

    def _load(self, chunk: _Chunk) -> None:
        """Bring ``chunk`` back into memory, its slot freed."""
        if chunk.seqs is None:
            assert self._spill is not None and chunk.slot is not None
            spill = self._spill()
            chunk.seqs, chunk.refs, chunk.expires = _Chunk.decode(spill.read(chunk.slot))
            spill.free(chunk.slot)
            chunk.slot = None

    def _store(self, chunk: _Chunk) -> None:
        """Write a chunk between the first and the last to the spill file."""
        if self._spill is not None and chunk.seqs is not None:
            try:
                chunk.slot = self._spill().write(chunk.encode())
            except StoreFull:  # a full disk: the chunk stays in memory
                return
            chunk.seqs = chunk.refs = chunk.expires = None

    # -- entries ---------------------------------------------------------------

    def add(self, seq: int, ref: int, expires: int = 0) -> None:
        chunks = self._chunks
        tail = chunks[-1] if chunks else None
        if tail is not None and self._len and seq < tail.seqs[-1]:  # type: ignore[index]
            self._insert(seq, ref, expires)  # out of seq order (a transaction, a recovery)
            return
        if tail is None or tail.count >= CHUNK:
            if len(chunks) >= 2:
                self._store(tail)  # type: ignore[arg-type]
            tail = _Chunk(column("I"), column("I"), column("I"))
            chunks.append(tail)
            self._firsts.append(seq)
        seqs, refs, expiries = tail.columns()
        rows = len(seqs)
        try:
            seqs.append(seq)
            refs.append(ref)
            expiries.append(expires)
        except OverflowError:  # a number too wide for four bytes: widen what did not take it
            tail.seqs, tail.refs, tail.expires = widened((seqs, refs, expiries), (seq, ref, expires), rows)
        tail.count = rows + 1
        self._len += 1

    def _insert(self, seq: int, ref: int, expires: int) -> None:
        """An entry before the last one: into the chunk that holds its place."""
        i = max(0, bisect_right(self._firsts, seq) - 1)
        chunk = self._chunks[i]
        spilled = chunk.seqs is None
        self._load(chunk)
        pos = bisect_left(chunk.seqs, seq, self.head if i == 0 else 0)  # type: ignore[arg-type]
        chunk.seqs, chunk.refs, chunk.expires = (
            inserted(c, pos, v) for c, v in zip(chunk.columns(), (seq, ref, expires), strict=False)
        )
        chunk.count += 1
        if seq < self._firsts[i]:
            self._firsts[i] = seq
        if spilled:
            self._store(chunk)
        self._len += 1

    def runs(self) -> Iterator[tuple[array[int], array[int], array[int]]]:
        """The entries from the head, a chunk at a time, as three arrays."""
        for i, chunk in enumerate(self._chunks):
            columns = self._arrays(chunk)
            if i == 0 and self.head:
                columns = tuple(c[self.head :] for c in columns)  # type: ignore[assignment]
            if columns[0]:
                yield columns

    def entries(self) -> Iterator[tuple[int, int, int]]:
        return itertools.chain.from_iterable(zip(*columns, strict=False) for columns in self.runs())

    def slice(self, count: int) -> tuple[array[int], array[int], array[int]]:
        """The first ``count`` (or fewer) entries, as three arrays."""
        if self._chunks:
            first = self._chunks[0]
            head = self.head
            if first.count - head >= count:  # the usual case: all in the first chunk
                return tuple(c[head : head + count] for c in first.columns())  # type: ignore[return-value]
        out: tuple[list[int], list[int], list[int]] = ([], [], [])
        for columns in self.runs():  # across chunks
            take = count - len(out[0])
            for values, column_ in zip(out, columns, strict=False):
                values.extend(column_[:take])
            if len(out[0]) >= count:
                break
        return array("q", out[0]), array("q", out[1]), array("q", out[2])

    def drop(self, count: int) -> int:
        """Remove the first ``count`` entries; returns how many there were (at most ``count``)."""
        count = min(count, self._len)
        self._len -= count
        chunks = self._chunks
        head = self.head + count
        while chunks and head >= chunks[0].count and (len(chunks) > 1 or head > 0):
            head -= chunks[0].count
            del chunks[0]
            del self._firsts[0]
            if chunks:
                self._load(chunks[0])  # the new first chunk stays in memory
        self.head = head
        return count

    def without(self, gone: set[int]) -> SeqFifo:
        """A copy without the entries whose broker seq is in ``gone``; this FIFO is
        emptied (``release``): use the copy instead."""
        copy = SeqFifo(self._spill, (entry for entry in self.entries() if entry[0] not in gone))
        self.release()
        return copy

    def release(self) -> None:
        """Empty the FIFO and give its chunks' slots back to the spill file."""
        for chunk in self._chunks:
            if chunk.slot is not None:
                assert self._spill is not None
                self._spill().free(chunk.slot)
        self._chunks.clear()
        self._firsts.clear()
        self.head = self._len = 0
