"""The in-memory index: what the log means, replayed one record at a time.

Theory of operation: the journal and recovery drive the same state machine.
The journal validates an operation (a dequeue of an unknown seq is the
caller's bug), writes its record, then applies it here; recovery applies every
record it scans, in log order, and is lenient (a dequeue whose enqueue lived
in a reclaimed file is simply ignored). So a journal reopened from disk ends
in exactly the state the writing journal was in.

Per file it keeps what the layouts need to decide reuse and deletion:

``live``        enqueues in the file that are live, or pending in an open
                transaction (the Qpid legacystore's per-file enqueue count);
``tx_records``  records of open transactions in the file;
``deps``        for dequeue and commit records in the file, the files holding
                the enqueues they refer to: while such a file is kept, this
                one must be kept too, or recovery would resurrect (a lost
                dequeue) or drop (a lost commit) a message. This is KahaDB's
                "a file containing acks for messages in a still-live file is
                kept". For an abort record, the files holding the records of
                the transaction it ends: a lost abort would leave them open
                at recovery, for a later commit of the same txid to adopt.

Payloads are never held. The live and pending (in an open transaction)
enqueues are rows of an ``EntryTable`` (``entries.py``: parallel arrays, 17
bytes a message, in blocks of which only the ones used lately stay in memory,
for a backlog may hold millions): their seq, key, file, offset, length and
state.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Iterator, Mapping

from storage.entries import LIVE, PENDING, EntryTable
from storage.model import FileInfo, Location, Pin

__all__ = ["FileStats", "JournalIndex", "Tx"]

#: ``Location(*fields)`` without the named tuple's Python-level ``__new__`` (a page-in makes many).
_location = tuple.__new__


class FileStats:
    """Counts for one file; ``used`` is the offset just after its last record."""

    __slots__ = ("file_id", "first_seq", "last_seq", "records", "used", "live", "tx_records", "deps")

    def __init__(self, file_id: int, first_seq: int, used: int) -> None:
        self.file_id = file_id
        self.first_seq = first_seq
        self.last_seq = first_seq
        self.records = 1  # the file header
        self.used = used
        self.live = 0
        self.tx_records = 0
        self.deps: dict[int, int] = {}


class Tx:
    """An open transaction: its pending enqueues and dequeues, and its files."""

    __slots__ = ("enqueues", "dequeues", "files")

    def __init__(self) -> None:
        self.enqueues: list[int] = []  # seqs of its (pending) enqueues
        # (enqueue seq, file of the dequeue record, file of the enqueue or None)
        self.dequeues: list[tuple[int, int, int | None]] = []
        self.files: dict[int, int] = {}


def _bump(deps: dict[int, int], file_id: int, by: int) -> None:
    count = deps.get(file_id, 0) + by
    if count > 0:
        deps[file_id] = count
    else:
        deps.pop(file_id, None)


class JournalIndex:
    """Live enqueues, open transactions and per-file counts of one journal."""

    def __init__(self, cache_rows: int | None = None, spill_dir: str | os.PathLike[str] | None = None) -> None:
        """``cache_rows`` and ``spill_dir``: how much of the table of live enqueues
        stays in memory, and where the rest goes (``EntryTable``)."""
        #: The live and pending enqueues (``entries.py``).
        self.table = EntryTable(cache_rows, spill_dir)
        self._pending = 0  # rows of the table that are pending
        self.markers: dict[int, int] = {}  # delivered enqueue seq -> file of its latest marker
        self.txs: dict[bytes, Tx] = {}
        self.files: dict[int, FileStats] = {}
        self.current = -1  # the current write file (set by the journal)
        self.emptied = False  # a file other than the current one lost its last pin

    # -- files ---------------------------------------------------------------

    def add_file(self, file_id: int, first_seq: int, used: int) -> FileStats:
        """Start counting a file whose header record has ``first_seq`` (replaces old counts)."""
        self.forget_file(file_id)
        stats = self.files[file_id] = FileStats(file_id, first_seq, used)
        return stats

    def forget_file(self, file_id: int) -> None:
        """Drop a reclaimed file's counts and every dependency on it."""
        if self.files.pop(file_id, None) is None:
            return
        for stats in self.files.values():
            stats.deps.pop(file_id, None)

    def log_order(self) -> list[FileStats]:
        return sorted(self.files.values(), key=lambda s: s.first_seq)

    # -- live enqueues ---------------------------------------------------------

    @property
    def live_count(self) -> int:
        """Live enqueues (not those pending in an open transaction)."""
        return len(self.table) - self._pending

    def is_live(self, seq: int) -> bool:
        return self.table.find(seq, LIVE) >= 0

    def pending_in(self, seq: int, txid: bytes) -> bool:
        """Is ``seq`` an enqueue pending in the open transaction ``txid``?"""
        tx = self.txs.get(txid)
        return tx is not None and seq in tx.enqueues

    def holds(self, seq: int) -> bool:
        """Is ``seq`` a live or transaction-pending enqueue?"""
        return self.table.find(seq) >= 0

    def location(self, seq: int) -> Location | None:
        """Where the live or pending enqueue ``seq`` is (None if neither)."""
        pos = self.table.find(seq)
        return None if pos < 0 else self._location_at(pos)

    def _location_at(self, pos: int) -> Location:
        return _location(Location, self.table.location(pos))

    def live_locations(self) -> Iterator[tuple[bytes, Location]]:
        """(key, location) of every live enqueue, in seq order; dequeuing meanwhile is safe."""
        table = self.table
        for run in table.live_runs():
            for seq in run:
                pos = table.find(seq, LIVE)
                if pos >= 0:
                    key, fields = table.entry(pos)
                    yield key, _location(Location, fields)

    # -- records -------------------------------------------------------------

    def _note(self, file_id: int, seq: int, end: int) -> FileStats:
        stats = self.files[file_id]
        stats.records += 1
        stats.last_seq = seq
        stats.used = end
        return stats

    def _tx(self, txid: bytes, stats: FileStats) -> Tx:
        tx = self.txs.get(txid)
        if tx is None:
            tx = self.txs[txid] = Tx()
        tx.files[stats.file_id] = tx.files.get(stats.file_id, 0) + 1
        stats.tx_records += 1
        return tx

    def enqueue(self, seq: int, key: bytes, txid: bytes, file_id: int, offset: int, end: int) -> None:
        stats = self.files[file_id]  # _note, inlined: this is the hottest path
        stats.records += 1
        stats.last_seq = seq
        stats.used = end
        stats.live += 1
        if txid:
            self._tx(txid, stats).enqueues.append(seq)
            self.table.add(seq, key, file_id, offset, end - offset, PENDING)
            self._pending += 1
        else:
            self.table.add(seq, key, file_id, offset, end - offset, LIVE)

    def dequeue(self, seq: int, ref: int, txid: bytes, file_id: int, end: int) -> None:
        stats = self._note(file_id, seq, end)
        table = self.table
        if not txid:
            # A pending enqueue is dequeued only in its own transaction (the journal
            # checks that): its commit makes the enqueue live, then applies the dequeue.
            pos = table.find(ref, LIVE)
            if pos >= 0:
                self._drop(pos, stats)
            return
        pos = table.find(ref)
        enq_file = None if pos < 0 else table.file(pos)
        self._tx(txid, stats).dequeues.append((ref, file_id, enq_file))
        if enq_file is not None and enq_file != file_id:
            _bump(stats.deps, enq_file, 1)

    def dequeue_many(self, seq: int, refs: Iterable[int], file_id: int, end: int) -> None:
        """A DEQUEUE_MANY record: ``dequeue`` of each of ``refs``, none in a transaction."""
        stats = self._note(file_id, seq, end)
        find, drop = self.table.find, self._drop
        for ref in refs:
            pos = find(ref, LIVE)
            if pos >= 0:
                drop(pos, stats)

    def _drop(self, pos: int, stats: FileStats) -> None:
        """Row ``pos`` is dequeued by a record in ``stats``'s file."""
        enq_file = self._unpin(pos)
        if enq_file != stats.file_id:
            _bump(stats.deps, enq_file, 1)

    def commit(self, seq: int, txid: bytes, file_id: int, end: int) -> None:
        stats = self._note(file_id, seq, end)
        tx = self.txs.pop(txid, None)
        if tx is None:
            return
        table = self.table
        for enq_seq in tx.enqueues:
            pos = table.find(enq_seq)
            table.set_state(pos, LIVE)
            self._pending -= 1
            enq_file = table.file(pos)
            if enq_file != file_id:
                _bump(stats.deps, enq_file, 1)
        for ref, _, _ in tx.dequeues:
            pos = table.find(ref, LIVE)
            if pos >= 0:
                self._drop(pos, stats)
        self._release(tx)

    def abort(self, seq: int, txid: bytes, file_id: int, end: int) -> None:
        stats = self._note(file_id, seq, end)
        tx = self.txs.get(txid)
        if tx is not None:
            # While a file holding the transaction's records is kept, so is
            # this abort: without it, a later commit of the same txid would
            # adopt those records at recovery.
            for tx_file in tx.files:
                if tx_file != file_id:
                    _bump(stats.deps, tx_file, 1)
        self.discard(txid)

    def discard(self, txid: bytes) -> None:
        """Forget an open transaction's records (an abort, in memory only)."""
        tx = self.txs.pop(txid, None)
        if tx is None:
            return
        for enq_seq in tx.enqueues:
            self._pending -= 1
            self._unpin(self.table.find(enq_seq))
        for _, dq_file, enq_file in tx.dequeues:
            holder = self.files.get(dq_file)
            if holder is not None and enq_file is not None and enq_file != dq_file:
                _bump(holder.deps, enq_file, -1)
        self._release(tx)

    def _unpin(self, pos: int) -> int:
        """Row ``pos`` is no longer live nor pending: it dies (positions may move).
        Returns the file of its enqueue."""
        table = self.table
        if self.markers:
            self.markers.pop(table.seq(pos), None)
        file_id = table.kill(pos)
        home = self.files[file_id]
        home.live -= 1
        if home.live == 0 and file_id != self.current:
            self.emptied = True
        return file_id

    def _release(self, tx: Tx) -> None:
        for file_id, count in tx.files.items():
            stats = self.files.get(file_id)
            if stats is not None:
                stats.tx_records -= count
                if file_id != self.current:
                    self.emptied = True

    def delivered(self, seq: int, ref: int, file_id: int, end: int) -> None:
        self._note(file_id, seq, end)
        if self.holds(ref):
            self.markers[ref] = file_id

    def forward_acks(self, moved: Mapping[int, Mapping[int, int]], to_file: int) -> None:
        """Acks written again into ``to_file`` (ack compaction, ``ackforward.py``): for each
        file of ``moved``, its dependencies on the files its forwarded acks referred to go to
        ``to_file``, which now holds those acks."""
        target = self.files[to_file]
        for file_id, deps in moved.items():
            holder = self.files[file_id]
            for dep, count in deps.items():
                _bump(holder.deps, dep, -count)
                if dep != to_file:
                    _bump(target.deps, dep, count)
        self.emptied = True

    # -- questions -------------------------------------------------------------

    def retained(self, current: int, pinned: Collection[int] = ()) -> set[int]:
        """Files the growing layout must keep (see the module docstring), with
        ``pinned`` (files kept for a reason of the caller's) and what they keep."""
        keep: set[int] = set()
        for stats in self.log_order():
            if (
                stats.file_id == current
                or stats.live
                or stats.tx_records
                or stats.file_id in pinned
                or any(dep in keep for dep in stats.deps)
            ):
                keep.add(stats.file_id)
        return keep

    def own_pins(self) -> dict[int, list[Pin]]:
        """For each file, the live and pending enqueues in it, in seq order."""
        pins: dict[int, list[Pin]] = {file_id: [] for file_id in self.files}
        for seq, key, file_id in self.table.entries():
            pins.setdefault(file_id, []).append(Pin(seq, key, file_id))
        return pins

    def pins(self, transitive: bool) -> dict[int, tuple[Pin, ...]]:
        """Messages keeping each file; ``transitive`` adds those of its ``deps``."""
        own = self.own_pins()
        result: dict[int, tuple[Pin, ...]] = {}
        for stats in self.log_order():
            found = {pin.seq: pin for pin in own[stats.file_id]}
            if transitive:
                for dep in stats.deps:
                    found.update((pin.seq, pin) for pin in result.get(dep, ()))
            result[stats.file_id] = tuple(found[seq] for seq in sorted(found))
        return result

    def open_txids(self) -> dict[int, tuple[bytes, ...]]:
        """For each file, the open transactions with records in it."""
        result: dict[int, list[bytes]] = {}
        for txid, tx in self.txs.items():
            for file_id in tx.files:
                result.setdefault(file_id, []).append(txid)
        return {file_id: tuple(sorted(txids)) for file_id, txids in result.items()}

    def markers_by_file(self, file_ids: Iterable[int]) -> dict[int, list[int]]:
        """For each of ``file_ids`` holding any, the delivered enqueue seqs whose latest marker sits there."""
        wanted = set(file_ids)
        found: dict[int, list[int]] = {}
        for seq, file_id in self.markers.items():
            if file_id in wanted:
                found.setdefault(file_id, []).append(seq)
        return found

    def file_infos(self, files: Mapping[int, tuple[str, int]], current: int | None, transitive: bool) -> list[FileInfo]:
        """``FileInfo`` for each of ``files`` (file id -> (name, size)), by file id."""
        pins = self.pins(transitive)
        txids = self.open_txids()
        infos = []
        for fid in sorted(files):
            name, size = files[fid]
            stats = self.files.get(fid)
            infos.append(
                FileInfo(
                    file_id=fid,
                    name=name,
                    size=size,
                    used=stats.used if stats else 0,
                    records=stats.records if stats else 0,
                    live=stats.live if stats else 0,
                    pins=pins.get(fid, ()),
                    first_seq=stats.first_seq if stats else None,
                    last_seq=stats.last_seq if stats else None,
                    current=fid == current,
                    open_txids=txids.get(fid, ()),
                )
            )
        return infos
