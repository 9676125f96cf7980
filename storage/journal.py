"""The journal: append records, replay them at open, read payloads back.

Theory of operation. ``Journal.open`` replays the directory (``recovery.py``),
cuts a torn tail, writes a TX_ABORT for every transaction left open (a TX_COMMIT
for one whose decision the caller passes in ``committed``: ``txlog.py``), and
opens the last file for appending. Every operation then validates, appends
one record to the current file's write buffer (rolling to another file when it
does not fit: ``ring.py`` / ``growing.py`` decide which), and applies the same
record to the ``JournalIndex`` that recovery would build from it.

Threads: one owner thread calls everything except ``sync``, which may run in
another thread while the owner appends (group commit). A lock guards the file
handles; ``sync`` holds it only to duplicate the descriptor, and runs the
fsync itself outside it, so appends continue during an fsync.

File system errors (``fileio.py``): a record the disk has no room for is
refused with ``StoreFull`` before it counts anywhere (its bytes cut back, its
seq not taken), and the journal goes on; an enqueue also keeps
``ENQUEUE_KEEP`` bytes reserved after it, so the dequeues that free files can
still be written on a full disk. Any other error, and every failed fsync,
makes the journal *failed*: it raises the same ``StoreFailed`` from every
operation afterwards and never reports more as durable. Only a new open
(recovery) continues from what is on disk.
"""

from __future__ import annotations

import contextlib
import os
import threading
from array import array
from collections.abc import Iterable, Iterator, Sequence
from types import TracebackType

from storage import ackforward
from storage.bodies import (
    ENQUEUE_FIXED,
    as_bytes,
    encode_dequeue,
    encode_dequeue_many,
    encode_enqueue,
    encode_file_header,
    encode_ref,
    verified_payload,
    verified_payloads,
)
from storage.errors import CorruptRecord, EnqueueThresholdExceeded, JournalFull, StoreFailed, StoreFull, TornWrite
from storage.fileio import file_ops, is_no_space
from storage.index import JournalIndex
from storage.model import FileInfo, JournalConfig, Location, RecoveredRecord
from storage.record import HEADER_SIZE, RecordType, encode
from storage.recovery import RecoveryReport, ScanResult, make_layout, scan_directory
from storage.ring import RingLayout
from storage.segment import Segment, fsync_directory

__all__ = ["ENQUEUE_KEEP", "Journal", "TxId"]

TxId = bytes | str
_HEADER_RECORD = HEADER_SIZE + len(encode_file_header(0, 0, 0)[0])
_DEQUEUE_FIXED = HEADER_SIZE + 10
#: A DELIVERED record: the header and the enqueue's seq.
_MARKER_SIZE = HEADER_SIZE + 8
#: dequeue_many: at most this many seqs in one DEQUEUE_MANY record (32 KB).
_MANY_MAX = 4096
#: read_seqs: neighbouring records are read in one pread spanning at most this many bytes...
_READ_SPAN = 1 << 20
#: ...and skipping at most this many bytes between two of them (other queues' records, acks).
_READ_GAP = 64 << 10
#: A growing journal's enqueue leaves this many bytes of its file (at most 1/32
#: of it), reserved, for the records that free space (dequeues, commits): on a
#: full disk, where no next file can be made, the consumers' acks still fit
#: (those of a whole file of 1 KB messages acked one at a time: 28 bytes each).
ENQUEUE_KEEP = 1 << 20


class Journal:
    """An append-only, segmented journal of enqueues, dequeues and transactions."""

    def __init__(self, config: JournalConfig, result: ScanResult) -> None:
        """Use ``Journal.open``; this only adopts a scanned directory."""
        self.config = config
        self._layout = make_layout(config)
        self._dir = config.path
        self._lock = threading.Lock()
        self._index: JournalIndex = result.index
        self._segments: dict[int, Segment] = result.segments
        self._next_seq = result.next_seq
        self._durable_seq = 0
        self._keys: dict[str, bytes] = {}
        self._unwritten_aborts: set[bytes] = set()
        self._closed = False
        #: The enqueue threshold's refusal of the last enqueue tried, until one is written (a ring).
        self.refusal: EnqueueThresholdExceeded | None = None
        #: Ack compaction: collections in a row that deleted nothing, and the current file
        #: when it was last considered (``_compact_acks``).
        self._no_gc = 0
        self._compaction_checked_at = -1
        #: Set by the first failure nothing can undo (``StoreFailed``): final.
        self._failed: StoreFailed | None = None
        self._current: Segment
        self._max_record = self._layout.size - _HEADER_RECORD
        self._keep = min(ENQUEUE_KEEP, self._layout.size // 32) if self._layout.reserves else 0
        self.recovery = RecoveryReport("new", 0, 0, 0)

    # -- lifecycle ---------------------------------------------------------------

    @classmethod
    def open(cls, config: JournalConfig, *, committed: Iterable[TxId] = ()) -> Journal:
        """Open (creating if needed) and recover the journal in ``config.directory``.

        A transaction left unfinished is aborted, unless its txid is in
        ``committed``: the decision, kept elsewhere, of a transaction that spans
        several journals (``txlog.py``); then its commit is written now.
        Raises ``CorruptRecord`` on damage before the tail of the log, and
        ``StorageError`` if the files do not match the config.
        """
        file_ops().make_directory(config.path)
        result = scan_directory(config)
        journal = cls(config, result)
        journal._start(result, {as_bytes(t, "txid") for t in committed})
        return journal

    def _start(self, result: ScanResult, committed: set[bytes]) -> None:
        torn = result.damage
        if torn is not None:
            self._cut(torn)
        if isinstance(self._layout, RingLayout):
            self._layout.create_files(self._dir, self._segments)
        order = [fid for fid in result.order if fid in self._segments]
        if order:
            self._current = self._segments[order[-1]]
            self._index.current = order[-1]
            self._index.emptied = True  # recovery may have left garbage behind
            self._current.extend()
            self._current.open_writer(self._current.offset)
        else:
            first = 0 if self._layout.fixed_files else max(self._segments, default=0) + 1
            self._open_file(first)
        unfinished = tuple(self._index.txs)
        decided = tuple(t for t in unfinished if t in committed)
        aborted = tuple(t for t in unfinished if t not in committed)
        for txid in decided:
            self.commit(txid)  # the decision is durable elsewhere: finish what the crash cut short
        for txid in aborted:
            try:
                self.abort(txid)
            except JournalFull:  # a full ring: write the abort before the txid is reused
                self._index.discard(txid)
                self._unwritten_aborts.add(txid)
        self._collect()
        outcome = "torn" if torn else ("clean" if order else "new")
        self.recovery = RecoveryReport(
            outcome, len(order), result.records, self._index.live_count, torn, aborted, decided
        )

    def _cut(self, torn: TornWrite) -> None:
        """Zero a torn tail (a torn file header: drop or zero the whole file)."""
        seg = next(s for s in self._segments.values() if s.name == torn.file)
        if torn.offset == 0 and not self._layout.fixed_files:
            seg.unlink()
            del self._segments[seg.file_id]
        else:
            seg.zero_from(torn.offset)
            seg.fsync()
        fsync_directory(self._dir)

    def close(self) -> None:
        """Flush, fsync and close every file. The journal cannot be used afterwards."""
        with self._lock:
            if self._closed:
                return
            if self._failed is None:
                self._fsync(self._current)
            self._closed = True
            for seg in self._segments.values():
                seg.close()
            self._index.table.close()

    def __enter__(self) -> Journal:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------

    def _live(self, file_id: int) -> int:
        stats = self._index.files.get(file_id)
        return stats.live if stats is not None else 0

    @property
    def failed(self) -> StoreFailed | None:
        """The failure that stopped this journal, or None while it works."""
        return self._failed

    def _fail(self, what: str, exc: BaseException) -> StoreFailed:
        """Record the first failure nothing can undo; every operation raises it from now on."""
        if self._failed is None:
            self._failed = exc if isinstance(exc, StoreFailed) else StoreFailed(self.config.queue_name, what, exc)
        return self._failed

    def _refused(self, what: str, exc: OSError) -> StoreFull | StoreFailed:
        """The error to raise for a write the file system refused: no space (and cut
        back: nothing changed) is ``StoreFull``; anything else fails the journal."""
        if is_no_space(exc) and getattr(exc, "cut_back", True):
            return StoreFull(self.config.queue_name, what, exc)
        return self._fail(what, exc)

    def _fsync(self, seg: Segment) -> None:
        try:
            seg.fsync()
        except OSError as exc:
            raise self._fail(f"fsync of {seg.path}", exc) from None

    def _fsync_directory(self) -> None:
        try:
            fsync_directory(self._dir)
        except OSError as exc:
            raise self._fail(f"fsync of the directory {self._dir}", exc) from None

    def _open_file(self, file_id: int) -> None:
        """Make ``file_id`` the current file: zero or create it, write its header.

        On failure the current file stays what it was; a file created for
        nothing is removed again (a full disk: ``StoreFull``).
        """
        created = file_id not in self._segments
        try:
            seg = self._layout.prepare(self._dir, self._segments, file_id)
            seg.open_writer(0)
            header = encode_file_header(self._layout.code, file_id, seg.capacity)
            seg.append(encode(RecordType.FILE_HEADER, self._next_seq, header))
            seg.fsync()
            if created:
                fsync_directory(self._dir)
        except OSError as exc:
            path = self._dir / self._layout.file_name(file_id)
            if created and is_no_space(exc):
                stale = self._segments.pop(file_id, None)
                try:
                    if stale is not None:
                        stale.close()
                    if path.exists():
                        file_ops().unlink(path)
                except OSError as again:
                    raise self._fail(f"removing {path} after {exc}", again) from None
                raise StoreFull(self.config.queue_name, f"creating {path}", exc) from None
            raise self._fail(f"starting the file {path}", exc) from None
        seq = self._next_seq
        self._next_seq += 1
        self._index.add_file(file_id, seq, seg.offset)
        self._index.current = file_id
        self._current = seg

    def _roll(self) -> None:
        old = self._current
        following = self._layout.next_file(old.file_id, self._live)  # may raise JournalFull
        self._fsync(old)
        self._open_file(following)  # may raise StoreFull: the old file stays current
        old.close_writer()
        self._index.emptied = True  # the old current file may now be reclaimable

    def _append(self, rtype: int, parts: list[bytes], length: int, keep: int = 0) -> tuple[int, int, int]:
        """Write one record (caller holds the lock); returns (seq, file id, offset).

        ``StoreFull`` leaves the journal as it was; ``StoreFailed`` fails it."""
        if self._closed:
            raise ValueError("the journal is closed")
        if self._failed is not None:
            raise self._failed
        if self._current.offset + length + keep > self._current.capacity:
            self._roll()
        seq = self._next_seq
        seg = self._current
        try:
            offset = seg.append(encode(rtype, seq, parts, length - HEADER_SIZE), keep)
        except OSError as exc:
            raise self._refused(f"writing to {seg.path}", exc) from None
        self._next_seq = seq + 1
        return seq, seg.file_id, offset

    def _txid(self, txid: TxId | None) -> bytes:
        """A txid as bytes (b"" for none); first writes an abort still owed for it."""
        if not txid:
            return b""
        t = as_bytes(txid, "txid")
        if t in self._unwritten_aborts:
            self._unwritten_aborts.discard(t)
            try:
                self.abort(t)
            except JournalFull:
                self._unwritten_aborts.add(t)
                raise
        return t

    def _key(self, key: bytes | str) -> bytes:
        if isinstance(key, str):
            cached = self._keys.get(key)
            if cached is None:
                cached = self._keys[key] = as_bytes(key, "key")
            return cached
        return key if type(key) is bytes and len(key) <= 0xFFFF else as_bytes(key, "key")

    def enqueue(
        self, key: bytes | str, payload: bytes, txid: TxId | None = None, *, use_reserve: bool = False
    ) -> Location:
        """Append a message for ``key``; buffered, not fsynced (see ``sync``).

        In a ring, the enqueue threshold may refuse it with
        ``EnqueueThresholdExceeded``; ``use_reserve=True`` (for compaction) skips
        that check and may raise ``JournalFull`` instead. With a ``txid`` the
        message becomes live only at ``commit(txid)``.
        """
        k = self._key(key)
        t = self._txid(txid)
        length = ENQUEUE_FIXED + len(k) + len(t) + len(payload)
        if length > self._max_record:
            raise ValueError(f"a {length}-byte record does not fit in a {self._layout.size}-byte file")
        parts = encode_enqueue(k, t, payload)
        with self._lock:
            if not use_reserve and not self._closed:
                cur = self._current
                try:
                    self._layout.check_enqueue(cur.file_id, cur.offset, length, self._live)
                except EnqueueThresholdExceeded as refused:
                    self.refusal = refused
                    raise
            keep = self._keep if length + self._keep <= self._max_record else 0
            seq, fid, offset = self._append(RecordType.ENQUEUE, parts, length, keep)
            self._index.enqueue(seq, k, t, fid, offset, offset + length)
            if not use_reserve:
                self.refusal = None
        return Location(seq, fid, offset, length)

    def dequeue(self, enqueue_seq: int, txid: TxId | None = None) -> int:
        """Remove a live message (at ``commit(txid)`` if given); returns the record's seq.

        A transaction may also dequeue what it enqueued itself (a message sent
        and consumed before its COMMIT): neither counts until the commit, and
        an abort drops both."""
        if not self._index.is_live(enqueue_seq) and not (
            txid and self._index.pending_in(enqueue_seq, as_bytes(txid, "txid"))
        ):
            raise KeyError(f"no live enqueue with seq {enqueue_seq}")
        t = self._txid(txid)
        with self._lock:
            seq, fid, offset = self._append(RecordType.DEQUEUE, encode_dequeue(enqueue_seq, t), _DEQUEUE_FIXED + len(t))
            self._index.dequeue(seq, enqueue_seq, t, fid, offset + _DEQUEUE_FIXED + len(t))
        self._collect()
        return seq

    def dequeue_many(self, enqueue_seqs: Sequence[int]) -> list[int]:
        """Remove many live messages, none in a transaction: ``dequeue`` of each,
        written as DEQUEUE_MANY records (8 bytes a message, not a record each).
        Returns the seqs of the records written.

        Checked first, so a KeyError (an unknown seq, or one given twice) writes
        nothing. The seqs go into as few records as fit: a record never spans two
        files, so one that would not fit in the current file's room is cut there
        (and a full ring refusing the next file, ``JournalFull``, leaves the
        records before it written).
        """
        is_live = self._index.is_live
        for seq in enqueue_seqs:
            if not is_live(seq):
                raise KeyError(f"no live enqueue with seq {seq}")
        if len(set(enqueue_seqs)) != len(enqueue_seqs):
            raise KeyError("a seq is dequeued twice in one dequeue_many")
        refs = array("Q", enqueue_seqs)
        written: list[int] = []
        with self._lock:
            done = 0
            while done < len(refs):
                cur = self._current
                fits = (cur.capacity - cur.offset - HEADER_SIZE) // 8
                if fits <= 0:  # _append rolls first: a fresh file's room
                    fits = (self._max_record - HEADER_SIZE) // 8
                count = min(len(refs) - done, _MANY_MAX, fits)
                chunk = refs[done : done + count]
                length = HEADER_SIZE + 8 * count
                try:
                    seq, fid, offset = self._append(RecordType.DEQUEUE_MANY, encode_dequeue_many(chunk), length)
                except StoreFull as exc:
                    exc.done = done  # type: ignore[attr-defined]  # the seqs before it are written
                    raise
                self._index.dequeue_many(seq, chunk, fid, offset + length)
                written.append(seq)
                done += count
        self._collect()
        return written

    def mark_delivered(self, enqueue_seq: int) -> int:
        """Record that a message went to a consumer: recovery flags it redelivered."""
        if not self._index.holds(enqueue_seq):
            raise KeyError(f"no live enqueue with seq {enqueue_seq}")
        with self._lock:
            seq = self._mark(enqueue_seq, self._keep)  # a marker is no ack: it leaves the acks' room alone
        self._collect()
        return seq

    def _mark(self, enqueue_seq: int, keep: int = 0) -> int:
        seq, fid, offset = self._append(RecordType.DELIVERED, encode_ref(enqueue_seq), _MARKER_SIZE, keep)
        self._index.delivered(seq, enqueue_seq, fid, offset + _MARKER_SIZE)
        return seq

    def _end_tx(self, rtype: RecordType, txid: TxId) -> int:
        if not txid:
            raise ValueError("a transaction id must not be empty")
        t = as_bytes(txid, "txid")
        if rtype is RecordType.TX_COMMIT:
            self._txid(t)
        apply = self._index.commit if rtype is RecordType.TX_COMMIT else self._index.abort
        with self._lock:
            seq, fid, offset = self._append(rtype, [t], HEADER_SIZE + len(t))
            apply(seq, t, fid, offset + HEADER_SIZE + len(t))
        self._unwritten_aborts.discard(t)
        self._collect()
        return seq

    def commit(self, txid: TxId) -> int:
        """Make the transaction's enqueues and dequeues effective; returns the seq."""
        return self._end_tx(RecordType.TX_COMMIT, txid)

    def abort(self, txid: TxId) -> int:
        """Discard the transaction's enqueues and dequeues; returns the seq."""
        return self._end_tx(RecordType.TX_ABORT, txid)

    def _collect(self) -> None:
        """Delete the files the layout says are garbage (growing only).

        Runs in the owner thread after an operation that may have emptied a
        file; it fsyncs the current file before deleting anything. It ends by
        construction:

        - a file goes with the markers of its live messages written again into
          the room the current file has left: the collection never rolls, so it
          never makes a file (one of markers only would be garbage in turn);
        - a garbage file whose markers do not fit stays (pinned, with every file
          that must stay with it) until its messages are acknowledged or a later
          current file has room for them;
        - each pass pins one more file or deletes, once.
        """
        if not self._index.emptied:
            return
        with self._lock:
            self._index.emptied = False
            pinned: set[int] = set()
            while True:
                victims = self._layout.reclaimable(self._index, self._current.file_id, pinned)
                if not victims:
                    if self._compact_acks(pinned):
                        continue  # the chain is broken: what is garbage now
                    return
                self._no_gc = 0
                room = (self._current.capacity - self._current.offset) // _MARKER_SIZE
                markers = self._index.markers_by_file(victims)
                moving: list[int] = []
                for fid in victims:
                    seqs = markers.get(fid, [])
                    if len(seqs) > room:
                        pinned.add(fid)
                    else:
                        room -= len(seqs)
                        moving.extend(seqs)
                if not pinned.isdisjoint(victims):
                    continue  # what the pinned files keep is no longer garbage: ask again
                break
            for seq in sorted(moving):
                # markers do not pin files: write them again (on a full disk the message
                # loses its redelivered flag, nothing more)
                with contextlib.suppress(StoreFull):
                    self._mark(seq)
            # The records that made these files garbage (a dequeue, a commit)
            # must be durable before the files go, or a crash could lose both
            # copies of a message that a transaction moved.
            self._fsync(self._current)
            self._durable_seq = self._next_seq - 1
            for fid in victims:
                if fid != self._current.file_id:
                    seg = self._segments.pop(fid)
                    try:
                        seg.unlink()
                    except OSError as exc:
                        raise self._fail(f"deleting {seg.path}", exc) from None
                    self._index.forget_file(fid)
            self._fsync_directory()

    def _compact_acks(self, pinned: set[int]) -> bool:
        """Ack compaction (``storage/ackforward.py``), when a collection deleted nothing
        ``compact_acks_after_no_gc`` times in a row, and the journal did not grow since the
        last time it was considered (unless ``compact_acks_ignores_store_growth``), as KahaDB
        decides it. Returns whether acks were written again (the caller collects again)."""
        config = self.config
        if not config.compact_acks_after_no_gc or self._layout.fixed_files:
            return False
        self._no_gc += 1
        if self._no_gc < config.compact_acks_after_no_gc:
            return False
        self._no_gc = 0
        grew, self._compaction_checked_at = self._compaction_checked_at != self._current.file_id, self._current.file_id
        if grew and not config.compact_acks_ignores_store_growth:
            return False
        cur = self._current
        room = cur.capacity - cur.offset - self._keep
        # at most half the room left (the rest for the markers the collection writes again)
        refs_room = max(0, (room // 2 - HEADER_SIZE * (1 + room // (16 * _MANY_MAX))) // 8)
        forwarding = ackforward.plan(self._index, self._segments, cur.file_id, pinned, refs_room)
        if not forwarding.refs:
            return False
        refs = array("Q", forwarding.refs)
        for start in range(0, len(refs), _MANY_MAX):  # into the room the current file has: no roll
            chunk = refs[start : start + _MANY_MAX]
            length = HEADER_SIZE + 8 * len(chunk)
            try:
                seq, fid, offset = self._append(RecordType.DEQUEUE_MANY, encode_dequeue_many(chunk), length)
            except StoreFull:  # a full disk: the copies written so far change nothing, the chain stays
                return False
            self._index.dequeue_many(seq, chunk, fid, offset + length)
        self._index.forward_acks(forwarding.moved, cur.file_id)
        return True

    # -- durability ----------------------------------------------------------------

    def flush(self) -> None:
        """Nothing to do: every record reaches the OS when it is written (no fsync)."""

    def sync(self) -> int:
        """fsync the current file; returns the highest seq now durable.

        Safe to call from another thread while the owner appends: the fsync
        runs outside the lock, on a duplicate of the descriptor.
        """
        with self._lock:
            if self._closed:
                raise ValueError("the journal is closed")
            if self._failed is not None:
                raise self._failed
            seq = self._next_seq - 1
            if seq <= self._durable_seq:
                return self._durable_seq
            fd = self._current.dup_fd()
            path = self._current.path
        try:
            file_ops().fsync(fd)
        except OSError as exc:
            with self._lock:
                raise self._fail(f"fsync of {path}", exc) from None
        finally:
            os.close(fd)
        with self._lock:
            if self._failed is not None:  # the owner's own fsync failed meanwhile
                raise self._failed
            self._durable_seq = max(self._durable_seq, seq)
        return seq

    # -- reading -------------------------------------------------------------------

    def read(self, location: Location) -> bytes:
        """The payload of a live (or transaction-pending) enqueue, read from disk."""
        if not self._index.holds(location.seq):
            raise KeyError(f"no live enqueue with seq {location.seq}")
        seg = self._segments[location.file_id]
        with self._lock:
            data = self._pread(seg, location.offset, location.length)
        try:
            return verified_payload(data, location.seq, seg.name, location.offset)
        except CorruptRecord as exc:
            raise self._fail(f"reading {seg.path}", exc) from None

    def _pread(self, seg: Segment, offset: int, length: int) -> bytes:
        """Read a span of ``seg`` (the lock held). A read error fails the journal: the
        broker cannot tell one that lost nothing from one that did (fail-stop)."""
        try:
            return seg.pread(offset, length)
        except OSError as exc:
            raise self._fail(f"reading {seg.path}", exc) from None

    def read_seqs(self, seqs: Sequence[int]) -> list[bytes]:
        """The payloads of the live (or transaction-pending) enqueues ``seqs``, in
        the order given: a page-in's batch. Records that lie close together in one
        file come from one ``pread`` of the span that holds them, at most
        ``_READ_SPAN`` bytes, skipping gaps of up to ``_READ_GAP`` bytes; each
        record is still checked as ``read`` checks it."""
        table = self._index.table
        find, location = table.find, table.location
        first = find(seqs[0]) if len(seqs) else -1
        if first >= 0:
            # The usual page-in: neighbouring rows (records written one after another),
            # none dead: their columns are taken as slices, not looked up one by one,
            # and they are in the order they were written (file by file, each's by offset).
            run = table.run(first, seqs if type(seqs) is array else array("q", seqs))
            if run is not None:
                return self._read_in_file_order(*run, seqs)
        rows = []
        for seq in seqs:
            row = find(seq)
            if row < 0:
                raise KeyError(f"no live enqueue with seq {seq}")
            _, file_id, offset, length = location(row)
            rows.append((file_id, offset, length, seq))
        order = sorted(range(len(rows)), key=rows.__getitem__)  # by (file, offset): each is unique
        files, offsets, lengths, ordered_seqs = (
            zip(*(rows[k] for k in order), strict=True) if rows else ((), (), (), ())
        )
        out: list[bytes] = [b""] * len(rows)
        for k, payload in zip(order, self._read_in_file_order(files, offsets, lengths, ordered_seqs), strict=True):
            out[k] = payload
        return out

    def _read_in_file_order(
        self, files: Sequence[int], offsets: Sequence[int], lengths: Sequence[int], seqs: Sequence[int]
    ) -> list[bytes]:
        """Payloads of records (file, offset, length, seq) given file by file, each
        file's by offset: one ``pread`` per span of neighbours."""
        out: list[bytes] = []
        count = len(seqs)
        i = 0
        while i < count:
            file_id = files[i]
            start = offsets[i]
            end = start + lengths[i]
            j = i + 1
            while j < count and files[j] == file_id:
                nxt = offsets[j]
                nxt_end = nxt + lengths[j]
                if nxt < end or nxt - end > _READ_GAP or nxt_end - start > _READ_SPAN:
                    break
                end = nxt_end
                j += 1
            seg = self._segments[file_id]
            with self._lock:
                data = self._pread(seg, start, end - start)
            try:
                out += verified_payloads(data, start, offsets[i:j], lengths[i:j], seqs[i:j], seg.name)
            except CorruptRecord as exc:  # read back damaged: as a read error, fail-stop
                raise self._fail(f"reading {seg.path}", exc) from None
            i = j
        return out

    def location(self, seq: int) -> Location:
        """Where the live (or transaction-pending) enqueue ``seq`` is (KeyError if neither)."""
        location = self._index.location(seq)
        if location is None:
            raise KeyError(seq)
        return location

    def recovered(self, *, payloads: bool = True) -> Iterator[RecoveredRecord]:
        """The live (committed) enqueues in log order; payloads read from disk if asked."""
        markers = self._index.markers
        for key, loc in self._index.live_locations():
            yield RecoveredRecord(loc.seq, key, self.read(loc) if payloads else None, loc, loc.seq in markers)

    # -- questions ---------------------------------------------------------------------

    @property
    def last_seq(self) -> int:
        return self._next_seq - 1

    @property
    def durable_seq(self) -> int:
        return self._durable_seq

    @property
    def live_count(self) -> int:
        return self._index.live_count

    @property
    def current_file_id(self) -> int:
        return self._current.file_id

    @property
    def open_txids(self) -> tuple[bytes, ...]:
        return tuple(self._index.txs)

    def writable(self) -> int:
        """Bytes that can be written before the journal is full (unbounded if growing)."""
        cur = self._current
        return self._layout.writable(cur.file_id, cur.offset, _HEADER_RECORD, self._live)

    def index_bytes(self) -> int:
        """Bytes the in-memory index of live and pending enqueues takes (counted by no usage)."""
        return self._index.table.nbytes()

    def index_spilled_bytes(self) -> int:
        """Bytes of that index kept in its scratch file instead (``entries.py``)."""
        return self._index.table.spilled_bytes()

    def disk_usage(self) -> int:
        """Bytes the journal's files take on disk (each counted at its full, preallocated size)."""
        return sum(seg.capacity for seg in self._segments.values())

    def used_bytes(self) -> int:
        """Bytes of records in the journal's files: what of ``disk_usage`` was written."""
        return sum(stats.used for fid, stats in self._index.files.items() if fid in self._segments)

    def file_counts(self) -> tuple[int, int]:
        """(files, files holding a live enqueue): ``files()``'s counts without its pins (cheap
        enough for every statistics request)."""
        stats = self._index.files
        return len(self._segments), sum(1 for fid in self._segments if fid in stats and stats[fid].live)

    def files(self) -> list[FileInfo]:
        """One ``FileInfo`` per file, by file id (see ``FileInfo``)."""
        return self._index.file_infos(
            {fid: (seg.name, seg.capacity) for fid, seg in self._segments.items()},
            self._current.file_id,
            transitive=not self._layout.fixed_files,
        )
