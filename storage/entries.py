"""Where the live enqueues are: a compact table, a few bytes per message, of
which only the blocks used lately are kept in memory.

Theory of operation. A broker's backlog may keep millions of messages on disk
only, and the journal must know where each one's record is. A dict of tuples
costs about 200 bytes a message; this table keeps one row per enqueue in
parallel arrays instead (seq, file, offset, length, key id, state: 17 bytes).

Rows are appended in seq order: the journal writes records with increasing
seqs and recovery replays them in log order (a row that comes out of order is
inserted in its place, slowly, for safety). The rows are cut into *blocks* of
``BLOCK_ROWS`` (8,192): the last block takes the appends, and ``firsts`` holds
each block's lowest seq, so a seq is found by a binary search over the blocks,
then one within its block. A position is the block's number and the row's,
in one int (``block << 16 | row``); positions are good until the next change
of the table. Most lookups are the row last found or the next one (a page-in,
a consumer) and take one or two probes.

Only ``cache_rows`` rows' worth of blocks (by default 65,536: about 1.1 MB)
stay in memory, the ones used last (the tail, and wherever consumers are
reading); the others are written to a ``SpillFile`` (``spill.py``) and read
back when a lookup lands in them, as KahaDB keeps its index in a page file
with a cache of pages. So a backlog costs memory for the blocks' directory
(about 100 bytes per 8,192 messages), not for every message. Without a
``cache_rows`` (the default for a bare table) every block stays in memory.

The arrays start narrow (file and key ids two bytes, seqs, offsets and
lengths four: 17 bytes a row) and a block's array is widened to eight-byte
items the first time a value does not fit (seq 2**32, a file past 4 GiB, the
65,536th file or key), so a row never holds less than it was given.

A row dies (``kill``) when its message is dequeued or its transaction is
aborted; dead rows stay, so positions do not move, until they outnumber the
others in their block (then the block is rebuilt without them: amortised
O(1) per row), or until every row of a block but the last is dead (then the
block goes). Keys (the queue a message belongs to) are few, so each row holds
a key id.
"""

from __future__ import annotations

import os
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Iterator, Sequence
from itertools import compress

from storage.errors import StoreFull
from storage.spill import Slot, SpillFile, pack_columns, unpack_columns

__all__ = ["BLOCK_ROWS", "DEAD", "DEFAULT_CACHE_ROWS", "LIVE", "PENDING", "EntryTable", "column", "inserted", "widened"]

#: Row states: dequeued (or aborted), live, enqueued in a transaction still open.
DEAD, LIVE, PENDING = 0, 1, 2

#: A block takes appends until it holds this many rows; then a new one starts.
BLOCK_ROWS = 8192
#: A block grown past this many rows by out-of-order inserts is cut in two.
_SPLIT_ROWS = 2 * BLOCK_ROWS
#: A position is ``block << _SHIFT | row``: rows of a block stay below 2**16.
_SHIFT = 16
_MASK = (1 << _SHIFT) - 1
#: Dead rows of a block are dropped once there are more of them than this and than live ones.
_COMPACT_MIN = 1024
#: The rows' worth of blocks a journal keeps in memory unless told otherwise.
DEFAULT_CACHE_ROWS = 65536
#: At least this many blocks stay in memory (whatever ``cache_rows`` says).
_MIN_CACHE_BLOCKS = 4
#: The numeric arrays of a row, in the order ``add`` fills them.
_COLUMNS = ("seqs", "files", "offsets", "lengths", "key_ids")
#: ``bytes.translate`` table: a state byte -> 1 if the row is live.
_LIVE_ONLY = bytes(1 if state == LIVE else 0 for state in range(256))


def column(typecode: str, values: Iterable[int] = ()) -> array[int]:
    """An array of ``values``: of ``typecode`` if they all fit it, else of eight-byte items."""
    values = list(values)
    try:
        return array(typecode, values)
    except OverflowError:
        return array("q", values)


def inserted(values: array[int], pos: int, value: int) -> array[int]:
    """``values`` with ``value`` inserted at ``pos``: ``values`` itself, or (when
    its narrow type cannot hold the value) a copy of eight-byte items."""
    try:
        values.insert(pos, value)
        return values
    except OverflowError:
        wide = array("q", values)
        wide.insert(pos, value)
        return wide


def widened(columns: Sequence[array[int]], values: Iterable[int], rows: int) -> list[array[int]]:
    """``columns`` (of ``rows`` items each) after an append of one value to each
    stopped at the first value too wide for its column (``OverflowError``): the
    columns that did not take their value get it now, widened as need be."""
    return [inserted(c, rows, v) if len(c) == rows else c for c, v in zip(columns, values, strict=True)]


class _Block:
    """Some consecutive rows: their arrays (None while spilled), counts, and spill slot."""

    __slots__ = ("seqs", "files", "offsets", "lengths", "key_ids", "states", "rows", "dead", "slot", "dirty")

    def __init__(self) -> None:
        self.seqs: array[int] | None = array("I")
        self.files: array[int] | None = array("H")
        self.offsets: array[int] | None = array("I")
        self.lengths: array[int] | None = array("I")
        self.key_ids: array[int] | None = array("H")
        self.states: bytearray | None = bytearray()
        self.rows = 0
        self.dead = 0
        #: Where its last spilled copy is, and whether the arrays changed since.
        self.slot: Slot | None = None
        self.dirty = True

    def arrays(self) -> tuple[array[int], ...]:
        return (self.seqs, self.files, self.offsets, self.lengths, self.key_ids)  # type: ignore[return-value]

    def nbytes(self) -> int:
        if self.states is None:
            return 0
        return sum(len(a) * a.itemsize for a in self.arrays()) + len(self.states)

    def encode(self) -> bytes:
        return pack_columns(self.arrays(), self.states)  # type: ignore[arg-type]

    def decode(self, blob: bytes) -> None:
        """Take the arrays back from ``encode``'s bytes."""
        columns, states = unpack_columns(blob)
        self.seqs, self.files, self.offsets, self.lengths, self.key_ids = columns
        self.states = bytearray(states)

    def drop_arrays(self) -> None:
        self.seqs = self.files = self.offsets = self.lengths = self.key_ids = None
        self.states = None


class EntryTable:
    """Enqueue records by seq: location, key and state (see the module docstring)."""

    __slots__ = (
        "blocks",
        "firsts",
        "keys",
        "_key_ids",
        "dead",
        "_rows",
        "_last",
        "_hint_b",
        "_hint_r",
        "_resident",
        "cache_blocks",
        "_spill",
        "_spill_dir",
    )

    def __init__(self, cache_rows: int | None = None, spill_dir: str | os.PathLike[str] | None = None) -> None:
        """``cache_rows``: keep about that many rows' worth of blocks in memory and
        spill the rest to a file in ``spill_dir`` (None: keep every block)."""
        self.blocks: list[_Block] = []
        #: Each block's lowest seq (a bound: its first row may since have gone).
        self.firsts: list[int] = []
        #: key id -> key; ``_key_ids`` the other way.
        self.keys: list[bytes] = []
        self._key_ids: dict[bytes, int] = {}
        self.dead = 0
        self._rows = 0
        self._last = -1
        self._hint_b = 0
        self._hint_r = 0
        #: The blocks in memory, least recently used first (used only when spilling).
        self._resident: dict[_Block, None] = {}
        self.cache_blocks = 0 if cache_rows is None else max(_MIN_CACHE_BLOCKS, -(-cache_rows // BLOCK_ROWS))
        self._spill: SpillFile | None = None
        self._spill_dir = spill_dir

    def __len__(self) -> int:
        """Rows that are not dead."""
        return self._rows - self.dead

    def nbytes(self) -> int:
        """Bytes the rows in memory take (dead ones included, until compaction drops them)."""
        return sum(block.nbytes() for block in self.blocks)

    def spilled_bytes(self) -> int:
        """Bytes of the blocks that are only in the spill file."""
        return sum(block.slot[2] for block in self.blocks if block.states is None and block.slot is not None)

    # -- blocks in memory and in the spill file ------------------------------

    def _new_block(self, first_seq: int, at: int | None = None) -> _Block:
        block = _Block()
        if at is None:
            self.blocks.append(block)
            self.firsts.append(first_seq)
        else:
            self.blocks.insert(at, block)
            self.firsts.insert(at, first_seq)
        self._touch(block)
        return block

    def _touch(self, block: _Block) -> None:
        """``block`` is in memory and was just used."""
        if not self.cache_blocks:
            return
        resident = self._resident
        resident.pop(block, None)
        resident[block] = None
        if len(resident) > self.cache_blocks:
            self._evict()

    def _evict(self) -> None:
        """Spill the least recently used blocks, but never the tail, the hinted one
        or the two used last (an operation may be using them)."""
        resident, blocks = self._resident, self.blocks
        keep = {id(blocks[-1])}
        if self._hint_b < len(blocks):
            keep.add(id(blocks[self._hint_b]))
        for block in list(resident)[:-2]:
            if len(resident) <= self.cache_blocks:
                break
            if id(block) not in keep:
                self._spill_block(block)

    def _spill_block(self, block: _Block) -> None:
        spill = self._spill
        if spill is None:
            spill = self._spill = SpillFile(self._spill_dir)
        if block.dirty or block.slot is None:
            try:
                block.slot = spill.write(block.encode(), block.slot)
            except StoreFull:  # a full disk: the block stays in memory for now
                return
            block.dirty = False
        block.drop_arrays()
        del self._resident[block]
        if spill.needs_repack:
            self._repack()

    def _repack(self) -> None:
        assert self._spill is not None
        kept = [block for block in self.blocks if block.slot is not None]
        self._spill, slots = self._spill.repacked([block.slot for block in kept])  # type: ignore[misc]
        for block, slot in zip(kept, slots, strict=True):
            block.slot = slot

    def _block(self, b: int) -> _Block:
        """Block ``b``, read back into memory if it was spilled."""
        block = self.blocks[b]
        if block.states is None:
            assert self._spill is not None and block.slot is not None
            block.decode(self._spill.read(block.slot))
            block.dirty = False
        self._touch(block)
        return block

    def _view(self, block: _Block) -> _Block:
        """``block``'s rows to read once (a spilled block is decoded aside, not kept)."""
        if block.states is not None:
            return block
        assert self._spill is not None and block.slot is not None
        copy = _Block()
        copy.decode(self._spill.read(block.slot))
        return copy

    # -- rows ------------------------------------------------------------------

    def add(self, seq: int, key: bytes, file_id: int, offset: int, length: int, state: int) -> None:
        """A new enqueue record (live, or pending in a transaction)."""
        key_id = self._key_ids.get(key)
        if key_id is None:
            key_id = self._key_ids[key] = len(self.keys)
            self.keys.append(key)
        if seq <= self._last:
            self._insert(seq, key_id, file_id, offset, length, state)
            return
        blocks = self.blocks
        block = blocks[-1] if blocks and blocks[-1].rows < BLOCK_ROWS else self._new_block(seq)
        rows = block.rows
        try:  # the narrow arrays take almost every value ...
            block.seqs.append(seq)  # type: ignore[union-attr]
            block.files.append(file_id)  # type: ignore[union-attr]
            block.offsets.append(offset)  # type: ignore[union-attr]
            block.lengths.append(length)  # type: ignore[union-attr]
            block.key_ids.append(key_id)  # type: ignore[union-attr]
        except OverflowError:  # ... and widen for the first one that does not fit
            columns = widened([getattr(block, name) for name in _COLUMNS], (seq, file_id, offset, length, key_id), rows)
            for name, values in zip(_COLUMNS, columns, strict=True):
                setattr(block, name, values)
        block.states.append(state)  # type: ignore[union-attr]
        block.rows = rows + 1
        self._rows += 1
        self._last = seq

    def _insert(self, seq: int, key_id: int, file_id: int, offset: int, length: int, state: int) -> None:
        """A row out of seq order: into its block (O(block), never on the usual paths)."""
        b = max(0, bisect_right(self.firsts, seq) - 1)
        block = self._block(b)
        pos = bisect_left(block.seqs, seq)  # type: ignore[arg-type]
        if pos < block.rows and block.seqs[pos] == seq:  # type: ignore[index]
            raise ValueError(f"seq {seq} is already in the table")
        for name, value in zip(_COLUMNS, (seq, file_id, offset, length, key_id), strict=True):
            setattr(block, name, inserted(getattr(block, name), pos, value))
        block.states.insert(pos, state)  # type: ignore[union-attr]
        block.rows += 1
        block.dirty = True
        self._rows += 1
        if seq < self.firsts[b]:
            self.firsts[b] = seq
        if block.rows > _SPLIT_ROWS:
            self._split(b)
        self._hint_b = self._hint_r = 0

    def _split(self, b: int) -> None:
        """Cut block ``b`` in two halves."""
        block = self.blocks[b]
        half = block.rows // 2
        upper = self._new_block(block.seqs[half], b + 1)  # type: ignore[index]
        for name in (*_COLUMNS, "states"):
            values = getattr(block, name)
            setattr(upper, name, values[half:])
            del values[half:]
        upper.rows = block.rows - half
        block.rows = half
        upper.dead = upper.states.count(DEAD)  # type: ignore[union-attr]
        block.dead -= upper.dead
        block.dirty = True

    def find(self, seq: int, only: int = 0) -> int:
        """The position of ``seq``'s row if it is live or pending (``only``: if its
        state is that one), else -1."""
        b = self._hint_b
        r = self._hint_r
        try:
            block = self.blocks[b]
            seqs = block.seqs
            at = seqs[r]  # type: ignore[index]
            if at != seq:  # the usual cases: the row last found, or the next one
                r += 1
                if at > seq or seqs[r] != seq:  # type: ignore[index]
                    return self._search(seq, only)
        except (IndexError, TypeError):  # a block gone, spilled, or ended
            return self._search(seq, only)
        state = block.states[r]  # type: ignore[index]
        if state and (not only or state == only):
            self._hint_r = r
            return b << _SHIFT | r
        return -1

    def _search(self, seq: int, only: int) -> int:
        """``find`` by binary search: over the blocks, then within one."""
        b = bisect_right(self.firsts, seq) - 1
        if b < 0:
            return -1
        block = self._block(b)
        seqs = block.seqs
        r = bisect_left(seqs, seq)  # type: ignore[arg-type]
        if r < block.rows and seqs[r] == seq:  # type: ignore[index]
            state = block.states[r]  # type: ignore[index]
            if state and (not only or state == only):
                self._hint_b = b
                self._hint_r = r
                return b << _SHIFT | r
        return -1

    def entry(self, pos: int) -> tuple[bytes, tuple[int, int, int, int]]:
        """(key, (seq, file, offset, length)) of the row at ``pos``."""
        block, r = self.blocks[pos >> _SHIFT], pos & _MASK
        return (
            self.keys[block.key_ids[r]],  # type: ignore[index]
            (block.seqs[r], block.files[r], block.offsets[r], block.lengths[r]),  # type: ignore[index]
        )

    def seq(self, pos: int) -> int:
        return self.blocks[pos >> _SHIFT].seqs[pos & _MASK]  # type: ignore[index]

    def file(self, pos: int) -> int:
        return self.blocks[pos >> _SHIFT].files[pos & _MASK]  # type: ignore[index]

    def state(self, pos: int) -> int:
        return self.blocks[pos >> _SHIFT].states[pos & _MASK]  # type: ignore[index]

    def key(self, pos: int) -> bytes:
        return self.keys[self.blocks[pos >> _SHIFT].key_ids[pos & _MASK]]  # type: ignore[index]

    def location(self, pos: int) -> tuple[int, int, int, int]:
        """(seq, file, offset, length) of the row at ``pos``."""
        block, r = self.blocks[pos >> _SHIFT], pos & _MASK
        return block.seqs[r], block.files[r], block.offsets[r], block.lengths[r]  # type: ignore[index]

    def set_state(self, pos: int, state: int) -> None:
        block = self.blocks[pos >> _SHIFT]
        block.states[pos & _MASK] = state  # type: ignore[index]
        block.dirty = True

    def run(self, pos: int, seqs: array[int]) -> tuple[array[int], array[int], array[int]] | None:
        """The files, offsets and lengths of ``seqs`` when they are the rows from
        ``pos`` on, all in its block and none dead (a page-in's usual case:
        taken as slices, not looked up one by one); else None."""
        block, first = self.blocks[pos >> _SHIFT], pos & _MASK
        end = first + len(seqs)
        if end > block.rows or block.seqs[first:end] != seqs or block.states.find(DEAD, first, end) >= 0:  # type: ignore[index, union-attr]
            return None
        return block.files[first:end], block.offsets[first:end], block.lengths[first:end]  # type: ignore[index]

    def kill(self, pos: int) -> int:
        """The row at ``pos`` is gone (dequeued, or its transaction aborted); returns its file."""
        b = pos >> _SHIFT
        block = self.blocks[b]
        r = pos & _MASK
        block.states[r] = DEAD  # type: ignore[index]
        file_id: int = block.files[r]  # type: ignore[index]
        dead = block.dead = block.dead + 1
        block.dirty = True
        self.dead += 1
        if dead == block.rows and b != len(self.blocks) - 1:
            self._remove(b)
        elif dead > _COMPACT_MIN and dead * 2 > block.rows:
            self._compact(b)
        return file_id

    def _remove(self, b: int) -> None:
        """Block ``b`` holds only dead rows: it goes."""
        block = self.blocks.pop(b)
        del self.firsts[b]
        self._resident.pop(block, None)
        if block.slot is not None and self._spill is not None:
            self._spill.free(block.slot)
        self._rows -= block.rows
        self.dead -= block.dead
        self._hint_b = self._hint_r = 0

    def _compact(self, b: int) -> None:
        block = self.blocks[b]
        keep = block.states
        assert keep is not None  # a block in memory
        for name in _COLUMNS:
            values = getattr(block, name)
            setattr(block, name, array(values.typecode, compress(values, keep)))
        block.states = bytearray(keep.replace(b"\0", b""))
        block.rows -= block.dead
        self._rows -= block.dead
        self.dead -= block.dead
        block.dead = 0
        if self._hint_b == b:
            self._hint_r = 0

    def live_runs(self) -> Iterator[array[int]]:
        """The seqs of the live rows, in order, a block's at a time (recovery's walk).

        Each block is read into memory once, as a lookup reads it, so a ``find``
        of the seqs of the run just given lands in it. Rows may be killed and
        added between runs: a run is taken afresh after the last seq given."""
        last = -1
        b = 0
        while b < len(self.blocks):
            block = self._block(b)
            seqs = array("q", compress(block.seqs, block.states.translate(_LIVE_ONLY)))  # type: ignore[arg-type, union-attr]
            run = seqs[bisect_right(seqs, last) :]
            if run:
                last = run[-1]
                yield run
                b = max(bisect_right(self.firsts, last) - 1, 0)  # the blocks may have moved meanwhile
            else:
                b += 1

    def entries(self) -> Iterator[tuple[int, bytes, int]]:
        """(seq, key, file) of the rows that are not dead, in seq order."""
        keys = self.keys
        for block in self.blocks:
            view = self._view(block)
            for seq, key_id, file_id, state in zip(view.seqs, view.key_ids, view.files, view.states, strict=True):  # type: ignore[arg-type]
                if state:
                    yield seq, keys[key_id], file_id

    def close(self) -> None:
        """Close the spill file (the table is not used afterwards)."""
        if self._spill is not None:
            self._spill.close()
            self._spill = None
