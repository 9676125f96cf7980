"""Where the live enqueues are: a compact table, a few bytes per message.

Theory of operation. A broker's backlog may keep millions of messages on disk
only, and the journal must know where each one's record is. A dict of tuples
costs about 200 bytes a message; this table keeps one row per enqueue in
parallel arrays instead (seq, file, offset, length, key id, state: 17 bytes).

Rows are appended in seq order: the journal writes records with increasing
seqs and recovery replays them in log order (a row that comes out of order is
inserted in its place, slowly, for safety). So a seq is found by binary search,
narrowed by the row last found: seqs increase by at least one per row, so the
row of ``seq`` is at most ``seq - seqs[hint]`` rows away from the hint. A page-in
or a consumer asks for neighbouring seqs, one after another, and most lookups
take one or two probes.

The arrays start narrow (file and key ids two bytes, seqs, offsets and
lengths four: 17 bytes a row) and an array is widened to eight-byte items the
first time a value does not fit (seq 2**32, a file past 4 GiB, the 65,536th
file or key), so a row never holds less than it was given.

A row dies (``kill``) when its message is dequeued or its transaction is
aborted; dead rows stay, so positions do not move, until they outnumber the
others: then the table is rebuilt without them (amortised O(1) per row).
Keys (the queue a message belongs to) are few, so each row holds a key id.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Iterable, Iterator
from itertools import compress

__all__ = ["DEAD", "LIVE", "PENDING", "EntryTable", "column", "inserted"]

#: Row states: dequeued (or aborted), live, enqueued in a transaction still open.
DEAD, LIVE, PENDING = 0, 1, 2

#: Dead rows are dropped once there are more of them than this and than live ones.
_COMPACT_MIN = 4096
#: The numeric arrays of a row, in the order ``add`` fills them.
_COLUMNS = ("seqs", "files", "offsets", "lengths", "key_ids")
#: ``bytes.translate`` table: a state byte -> 1 if the row is live.
_LIVE_ONLY = bytes(1 if state == LIVE else 0 for state in range(256))


def column(typecode: str, values: Iterable[int] = ()) -> array:
    """An array of ``values``: of ``typecode`` if they all fit it, else of eight-byte items."""
    values = list(values)
    try:
        return array(typecode, values)
    except OverflowError:
        return array("q", values)


def inserted(values: array, pos: int, value: int) -> array:
    """``values`` with ``value`` inserted at ``pos``: ``values`` itself, or (when
    its narrow type cannot hold the value) a copy of eight-byte items."""
    try:
        values.insert(pos, value)
        return values
    except OverflowError:
        wide = array("q", values)
        wide.insert(pos, value)
        return wide


class EntryTable:
    """Enqueue records by seq: location, key and state (see the module docstring)."""

    __slots__ = ("seqs", "files", "offsets", "lengths", "key_ids", "states", "keys", "_key_ids",
                 "dead", "_hint")

    def __init__(self) -> None:
        self.seqs = array("I")
        self.files = array("H")
        self.offsets = array("I")
        self.lengths = array("I")
        self.key_ids = array("H")
        self.states = bytearray()
        #: key id -> key; ``_key_ids`` the other way.
        self.keys: list[bytes] = []
        self._key_ids: dict[bytes, int] = {}
        self.dead = 0
        self._hint = 0

    def __len__(self) -> int:
        """Rows that are not dead."""
        return len(self.seqs) - self.dead

    def nbytes(self) -> int:
        """Bytes the rows take (dead ones included, until compaction drops them)."""
        arrays = (self.seqs, self.files, self.offsets, self.lengths, self.key_ids)
        return sum(len(a) * a.itemsize for a in arrays) + len(self.states)

    def add(self, seq: int, key: bytes, file_id: int, offset: int, length: int, state: int) -> None:
        """A new enqueue record (live, or pending in a transaction)."""
        key_id = self._key_ids.get(key)
        if key_id is None:
            key_id = self._key_ids[key] = len(self.keys)
            self.keys.append(key)
        seqs = self.seqs
        if seqs and seq <= seqs[-1]:
            self._insert(seq, key_id, file_id, offset, length, state)
            return
        rows = len(seqs)
        try:  # the narrow arrays take almost every value ...
            seqs.append(seq)
            self.files.append(file_id)
            self.offsets.append(offset)
            self.lengths.append(length)
            self.key_ids.append(key_id)
        except OverflowError:  # ... and widen for the first one that does not fit
            for name, value in zip(_COLUMNS, (seq, file_id, offset, length, key_id)):
                values = getattr(self, name)
                if len(values) == rows:  # not appended before the error
                    setattr(self, name, inserted(values, rows, value))
        self.states.append(state)

    def _insert(self, seq: int, key_id: int, file_id: int, offset: int, length: int, state: int) -> None:
        """A row out of seq order: into its place (O(rows), never on the usual paths)."""
        pos = bisect_left(self.seqs, seq)
        if pos < len(self.seqs) and self.seqs[pos] == seq:
            raise ValueError(f"seq {seq} is already in the table")
        for name, value in zip(_COLUMNS, (seq, file_id, offset, length, key_id)):
            setattr(self, name, inserted(getattr(self, name), pos, value))
        self.states.insert(pos, state)
        self._hint = 0

    def find(self, seq: int) -> int:
        """The row of ``seq`` if it is live or pending, else -1."""
        seqs = self.seqs
        pos = self._hint
        try:
            at = seqs[pos]
            if at != seq:  # the usual cases: the row last found, or the next one
                pos += 1
                if at > seq or seqs[pos] != seq:
                    return self._search(seq, pos - 1, at)
        except IndexError:
            return self._search(seq, -1, 0)
        if self.states[pos]:
            self._hint = pos
            return pos
        return -1

    def _search(self, seq: int, hint: int, at: int) -> int:
        """``find`` by binary search, within ``seq - at`` rows of row ``hint`` (seq ``at``)."""
        seqs = self.seqs
        n = len(seqs)
        if hint < 0:
            pos = bisect_left(seqs, seq)
        elif at < seq:
            pos = bisect_left(seqs, seq, hint + 1, min(n, hint + 1 + seq - at))
        else:
            pos = bisect_left(seqs, seq, max(0, hint - (at - seq)), hint)
        if pos < n and seqs[pos] == seq and self.states[pos]:
            self._hint = pos
            return pos
        return -1

    def kill(self, pos: int) -> None:
        """Row ``pos`` is gone (dequeued, or its transaction aborted)."""
        self.states[pos] = DEAD
        self.dead += 1
        if self.dead > _COMPACT_MIN and self.dead > len(self.seqs) - self.dead:
            self._compact()

    def _compact(self) -> None:
        keep = self.states
        self.seqs = array(self.seqs.typecode, compress(self.seqs, keep))
        self.files = array(self.files.typecode, compress(self.files, keep))
        self.offsets = array(self.offsets.typecode, compress(self.offsets, keep))
        self.lengths = array(self.lengths.typecode, compress(self.lengths, keep))
        self.key_ids = array(self.key_ids.typecode, compress(self.key_ids, keep))
        self.states = bytearray(keep.replace(b"\0", b""))
        self.dead = 0
        self._hint = 0

    def live_seqs(self) -> array:
        """The seqs of the live rows, in order (a copy: safe to dequeue while iterating)."""
        return array("q", compress(self.seqs, self.states.translate(_LIVE_ONLY)))

    def rows(self) -> Iterator[int]:
        """Positions of the rows that are not dead, in seq order."""
        return (pos for pos, state in enumerate(self.states) if state)
