"""A store cursor's list of store-only messages: number pairs, mostly on disk.

Theory of operation. A queue's store-only messages are kept in dispatch order
as (broker seq, journal seq) pairs: eight bytes a message while the numbers
fit four-byte arrays (``storage.entries.column``), for a backlog may hold
millions. The pairs are cut into chunks of ``CHUNK`` (4,096). A queue is read
at its head (a page-in) and written at its tail (a new message), so only the
first and the last chunk stay in memory; with a ``SpillFile`` (``spill``,
asked for on first need) every chunk in between is written there as it fills
and read back when the head reaches it. A backlog of a million messages then
keeps about 64 kB of pairs in memory, not 8 MB, plus a few dozen bytes per
spilled chunk. Without a spill file every chunk stays in memory.

A pair that comes out of seq order (a transaction's sends, routed at its
commit) is inserted in its place, in whichever chunk holds that place.
"""
from __future__ import annotations

import itertools
from array import array
from bisect import bisect_left, bisect_right
from typing import Callable, Iterable, Iterator

from storage.entries import column, inserted
from storage.spill import Slot, SpillFile, pack_columns, unpack_columns

__all__ = ["CHUNK", "SeqFifo"]

#: Pairs per chunk: a new chunk starts when the last one holds this many.
CHUNK = 4096


class _Chunk:
    """Consecutive pairs: two arrays, or (spilled) the slot that holds them."""

    __slots__ = ("seqs", "refs", "count", "slot")

    def __init__(self, seqs: array, refs: array) -> None:
        self.seqs: array | None = seqs
        self.refs: array | None = refs
        self.count = len(seqs)
        self.slot: Slot | None = None

    def encode(self) -> bytes:
        assert self.seqs is not None and self.refs is not None
        return pack_columns((self.seqs, self.refs))

    @staticmethod
    def decode(blob: bytes) -> tuple[array, array]:
        (seqs, refs), _ = unpack_columns(blob)
        return seqs, refs


class SeqFifo:
    """(broker seq, journal seq) pairs in seq order, popped from the head (see the module docstring)."""

    __slots__ = ("_chunks", "_firsts", "head", "_len", "_spill")

    def __init__(self, spill: Callable[[], SpillFile] | None = None,
                 pairs: Iterable[tuple[int, int]] = ()) -> None:
        """``spill``: gives the file for the chunks between the first and the last
        (None: keep them all in memory)."""
        self._chunks: list[_Chunk] = []
        #: Each chunk's lowest seq (a bound: pairs before ``head`` may have gone).
        self._firsts: list[int] = []
        #: Pairs of the first chunk already dropped.
        self.head = 0
        self._len = 0
        self._spill = spill
        for seq, ref in pairs:
            self.add(seq, ref)

    def __len__(self) -> int:
        return self._len

    def nbytes(self) -> int:
        """Bytes of the pairs in memory."""
        return sum(len(c.seqs) * c.seqs.itemsize + len(c.refs) * c.refs.itemsize  # type: ignore[arg-type, union-attr]
                   for c in self._chunks if c.seqs is not None)

    def spilled(self) -> int:
        """Chunks in the spill file."""
        return sum(1 for c in self._chunks if c.seqs is None)

    # -- chunks ----------------------------------------------------------------

    def _arrays(self, chunk: _Chunk) -> tuple[array, array]:
        """``chunk``'s arrays (a spilled one's read aside, not kept)."""
        if chunk.seqs is not None:
            return chunk.seqs, chunk.refs  # type: ignore[return-value]
        assert self._spill is not None and chunk.slot is not None
        return _Chunk.decode(self._spill().read(chunk.slot))

    def _load(self, chunk: _Chunk) -> None:
        """Bring ``chunk`` back into memory, its slot freed."""
        if chunk.seqs is None:
            assert self._spill is not None and chunk.slot is not None
            spill = self._spill()
            chunk.seqs, chunk.refs = _Chunk.decode(spill.read(chunk.slot))
            spill.free(chunk.slot)
            chunk.slot = None

    def _store(self, chunk: _Chunk) -> None:
        """Write a chunk between the first and the last to the spill file."""
        if self._spill is not None and chunk.seqs is not None:
            chunk.slot = self._spill().write(chunk.encode())
            chunk.seqs = chunk.refs = None

    # -- pairs -----------------------------------------------------------------

    def add(self, seq: int, ref: int) -> None:
        chunks = self._chunks
        tail = chunks[-1] if chunks else None
        if tail is not None and self._len and seq < tail.seqs[-1]:  # type: ignore[index]
            self._insert(seq, ref)  # out of seq order (a transaction, a recovery)
            return
        if tail is None or tail.count >= CHUNK:
            if len(chunks) >= 2:
                self._store(tail)  # type: ignore[arg-type]
            tail = _Chunk(column("I"), column("I"))
            chunks.append(tail)
            self._firsts.append(seq)
        seqs, refs = tail.seqs, tail.refs
        rows = len(seqs)  # type: ignore[arg-type]
        try:
            seqs.append(seq)  # type: ignore[union-attr]
            refs.append(ref)  # type: ignore[union-attr]
        except OverflowError:  # a number too wide for four bytes: widen what did not take it
            if len(seqs) == rows:  # type: ignore[arg-type]
                tail.seqs = inserted(seqs, rows, seq)  # type: ignore[arg-type]
            tail.refs = inserted(refs, rows, ref)  # type: ignore[arg-type]
        tail.count = rows + 1
        self._len += 1

    def _insert(self, seq: int, ref: int) -> None:
        """A pair before the last one: into the chunk that holds its place."""
        i = max(0, bisect_right(self._firsts, seq) - 1)
        chunk = self._chunks[i]
        spilled = chunk.seqs is None
        self._load(chunk)
        pos = bisect_left(chunk.seqs, seq, self.head if i == 0 else 0)  # type: ignore[arg-type]
        chunk.seqs = inserted(chunk.seqs, pos, seq)  # type: ignore[arg-type]
        chunk.refs = inserted(chunk.refs, pos, ref)  # type: ignore[arg-type]
        chunk.count += 1
        if seq < self._firsts[i]:
            self._firsts[i] = seq
        if spilled:
            self._store(chunk)
        self._len += 1

    def runs(self) -> Iterator[tuple[array, array]]:
        """The pairs from the head, a chunk at a time, as two arrays."""
        for i, chunk in enumerate(self._chunks):
            seqs, refs = self._arrays(chunk)
            if i == 0 and self.head:
                seqs, refs = seqs[self.head :], refs[self.head :]
            if seqs:
                yield seqs, refs

    def pairs(self) -> Iterator[tuple[int, int]]:
        return itertools.chain.from_iterable(zip(seqs, refs) for seqs, refs in self.runs())

    def slice(self, count: int) -> tuple[array, array]:
        """The first ``count`` (or fewer) pairs, as two arrays."""
        if self._chunks:
            first = self._chunks[0]
            head = self.head
            if first.count - head >= count:  # the usual case: all in the first chunk
                return first.seqs[head : head + count], first.refs[head : head + count]  # type: ignore[index]
        seqs: list[int] = []
        refs: list[int] = []
        for run_seqs, run_refs in self.runs():  # across chunks
            take = count - len(seqs)
            seqs.extend(run_seqs[:take])
            refs.extend(run_refs[:take])
            if len(seqs) >= count:
                break
        return array("q", seqs), array("q", refs)

    def drop(self, count: int) -> int:
        """Remove the first ``count`` pairs; returns how many there were (at most ``count``)."""
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

    def without(self, gone: set[int]) -> "SeqFifo":
        """A copy without the pairs whose broker seq is in ``gone``; this FIFO is
        emptied (``release``): use the copy instead."""
        copy = SeqFifo(self._spill, ((seq, ref) for seq, ref in self.pairs() if seq not in gone))
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
