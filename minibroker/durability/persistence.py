"""The broker's message store: persistent messages to and from ``storage`` journals.

Theory of operation
-------------------
``storage`` deals in keys and bytes; this module gives those bytes a meaning.

- **Layouts.** ``growing`` (KahaDB) keeps one journal for the whole broker in
  ``<data_dir>/journal``; ``ring`` (Qpid legacystore) keeps one journal per
  destination in ``<data_dir>/journal/<name>``, named after it, so a refused
  enqueue names its queue: ``Enqueue capacity threshold exceeded on queue "x".``
  The directory's name is an injective escaping of the destination's
  (``journaldirs``): ``/queue/a.b`` and ``/queue/a/b`` never share one.
- **Keys.** A record's key is the destination address (``/queue/orders``) or,
  for a durable topic subscription, ``durable:<topic>|<client-id>|<name>``: each
  durable subscriber gets its own copy of a persistent message (KahaDB stores it
  once with per-subscription acks; the copy is simpler and is what Qpid does).
- **Payload.** A message's bytes in a record: ``payload.py``.
- **Durability.** Writes go to the journals' buffers. ``write_generation``
  counts them; ``sync()`` (safe from another thread) fsyncs every journal
  written since the last sync and returns the generation it covers, so one
  fsync releases the RECEIPTs of every producer that wrote before it (group
  commit). When to call it is the edge's business (``fsync`` policy).
- **Transactions.** A transaction's records carry its storage txid (unique per
  broker run) and take effect at its TX_COMMIT. In the ``ring`` layout a
  transaction may touch several journals; its decision is fsynced to
  ``<data_dir>/txlog`` before the first TX_COMMIT and retired once a sync has
  made every commit durable, so a crash between two journals' commits is
  completed at the next start instead of half applied (``storage.txlog``).
- **Durable subscriptions** themselves (topic, client id, name, selector) are a
  small JSON file, rewritten atomically when one is created or removed (a
  temporary file, fsynced, renamed over it, the directory fsynced).
- **Failures.** Every file operation goes through ``storage.fileio``. A full
  disk refuses one write with ``StoreFull`` and changes nothing: dequeues it
  refuses stay deferred and are written when space returns. Anything else, a
  failed fsync above all, is ``StoreFailed``: it is kept (``failure``) and
  raised by every later write and sync, and nothing more is ever reported
  durable; ``close`` then closes without syncing.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import threading
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from minibroker.config import StoreConfig
from minibroker.durability import journaldirs
from minibroker.durability.payload import (
    StoredMessage,
    decode_messages,
    decode_meta,
    decode_payload,
    encode_payload,
    encode_wire_payload,
)
from minibroker.durability.ringcost import RingReservation
from storage import Journal, JournalConfig, Location, StorageError, StoreFailed, StoreFull, TransactionLog, file_ops
from storage.fileio import is_no_space

__all__ = [
    "MessageStore",
    "StoreRef",
    "StoredMessage",
    "encode_payload",
    "encode_wire_payload",
    "decode_meta",
    "decode_payload",
    "decode_messages",
    "durable_key",
]

log = logging.getLogger("minibroker.store")

#: At most this many dequeues of one journal wait for the flush (one full DEQUEUE_MANY record).
_DEFERRED_MAX = 4096


class StoreRef:
    """Where one persistent message lives: its journal, record seq and location."""

    __slots__ = ("journal", "seq", "key")

    def __init__(self, journal: Journal, seq: int, key: str) -> None:
        self.journal = journal
        self.seq = seq
        self.key = key

    @property
    def location(self) -> Location:
        """Where the record is, from the journal's index (not kept here)."""
        return self.journal.location(self.seq)

    def __repr__(self) -> str:
        return f"<StoreRef {self.key} seq={self.seq}>"


def durable_key(topic: str, client_id: str, name: str) -> str:
    """The journal key of a durable subscription's messages."""
    return f"durable:{topic}|{client_id}|{name}"


class MessageStore:
    """Persistent messages of one broker, over one or many journals."""

    def __init__(self, config: StoreConfig, data_dir: str | os.PathLike[str]) -> None:
        self.config = config
        self.root = Path(data_dir)
        file_ops().make_directory(self.root)
        # One broker per data directory (ActiveMQ's lock file): offline tools check it too.
        self._lock_file: TextIO | None = open(self.root / "lock", "a")  # noqa: SIM115 (held open: the lock lives as long as the store)
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise StorageError(
                f"another broker is using the data directory {self.root} (it holds {self.root / 'lock'})"
            ) from None
        self.layout = config.layout
        self._journals: dict[str, Journal] = {}
        self._dirty: set[Journal] = set()
        #: journal -> seqs of dequeues written at the next ``flush`` (``dequeue``); empty
        #: when none wait (the broker reads it at every event's end: is a flush due?)
        self.deferred_dequeues: dict[Journal, list[int]] = {}
        #: storage txid -> journals written under it (a ring transaction may span queues)
        self._tx_journals: dict[str, set[Journal]] = {}
        #: ring layout: the log of decisions of transactions across queues
        self._txlog: TransactionLog | None = None
        #: (txid, write generation of its commits), decided and not yet retired
        self._deciding: deque[tuple[str, int]] = deque()
        self._lock = threading.Lock()
        self.write_generation = 0
        self.synced_generation = 0
        #: The first failure nothing can undo (``StoreFailed``): once set, final.
        self.failure: StoreFailed | None = None
        #: Dequeues wait in ``deferred_dequeues`` for space on a full disk.
        self._dequeues_waiting = False
        self._durables_file = self.root / "durable-subscriptions.json"
        try:
            self._open_journals()
        except BaseException:
            for journal in self._journals.values():
                journal.close()
            self._unlock()
            raise

    @property
    def file_limit(self) -> tuple[int, str]:
        """(bytes, the option that sets it): a message's record must fit in one journal file."""
        if self.layout == "ring":
            return self.config.file_size, "store.file_size"
        return self.config.journal_max_file_length, "store.journal_max_file_length"

    def _open_journals(self) -> None:
        config = self.config
        if self.layout == "growing":
            self._shared: Journal | None = Journal.open(
                JournalConfig(
                    directory=self.root / "journal",
                    layout="growing",
                    name="journal",
                    max_file_length=config.journal_max_file_length,
                    index_cache_rows=config.index_cache_rows,
                    compact_acks_after_no_gc=config.compact_acks_after_no_gc,
                    compact_acks_ignores_store_growth=config.compact_acks_ignores_store_growth,
                )
            )
        else:
            self._shared = None
            # Decisions of transactions across queues come first: a crash may
            # have cut one short, and its journals must commit it, not abort it.
            self._txlog = TransactionLog(self.root / "txlog")
            decided = self._txlog.decided()
            base = self.root / "journal"
            file_ops().make_directory(base)
            for key, sub in sorted(journaldirs.scan(base).items()):
                journal = self._journals[key] = self._open_ring(sub, key, decided)
                journaldirs.check_keys(sub, key, (rec.key for rec in journal.recovered(payloads=False)))
            if decided:
                for journal in self._journals.values():
                    journal.sync()  # the commits written at open are durable: the decisions may go
                for txid in decided:
                    self._txlog.retire(txid)
                self._txlog.sync()

    # -- journals
    def _open_ring(self, directory: Path, key: str, committed: frozenset[bytes] = frozenset()) -> Journal:
        name = key.split("/", 2)[-1] if key.startswith("/") else key
        return Journal.open(
            JournalConfig(
                directory=directory,
                layout="ring",
                name=name,
                file_count=self.config.file_count,
                file_size=self.config.file_size,
                index_cache_rows=self.config.index_cache_rows,
            ),
            committed=committed,
        )

    def journal_for(self, key: str) -> Journal:
        """The journal holding ``key``'s messages (created on first use for the ring)."""
        if self._shared is not None:
            return self._shared
        journal = self._journals.get(key)
        if journal is None:
            self._check()
            try:
                directory = journaldirs.claim(self.root / "journal", key)
                journal = self._open_ring(directory, key)
            except OSError as exc:
                if is_no_space(exc):
                    raise StoreFull(key, "creating its journal", exc) from None
                raise self._failed(StoreFailed(key, "creating its journal", exc)) from None
            self._journals[key] = journal
        return journal

    def own_journal(self, key: str) -> Journal | None:
        """``key``'s own journal if it has one yet (a ring); never creates one."""
        return self._journals.get(key) if self._shared is None else None

    def journals(self) -> list[Journal]:
        return [self._shared] if self._shared is not None else list(self._journals.values())

    def journal_directories(self) -> list[Path]:
        """Where the journals are, for ``minibroker journal inspect``."""
        if self._shared is not None:
            return [self.root / "journal"]
        return [Path(j.config.directory) for j in self._journals.values()]

    # -- failures
    def _failed(self, exc: StoreFailed) -> StoreFailed:
        """Keep the first failure (final); returns it to raise."""
        if self.failure is None:
            self.failure = exc
        return self.failure

    def _check(self) -> None:
        if self.failure is not None:
            raise self.failure

    # -- writes (the broker's thread)
    def _wrote(self, journal: Journal, txid: str | None = None) -> None:
        if txid is not None:
            self._tx_journals.setdefault(txid, set()).add(journal)
        with self._lock:  # uncontended but for the instant sync() swaps the set
            self.write_generation += 1
            self._dirty.add(journal)

    def enqueue(self, key: str, payload: bytes, txid: str | None = None) -> StoreRef:
        """Write a message; raises ``storage`` errors (a full ring, a closed journal)."""
        journal = self.journal_for(key)
        try:
            location = journal.enqueue(key, payload, txid)
        except StoreFailed as exc:
            raise self._failed(exc) from None
        except StorageError:
            if journal not in self.deferred_dequeues:
                raise
            # A full ring may have room once this turn's dequeues are written.
            self._write_deferred(journal)
            try:
                location = journal.enqueue(key, payload, txid)
            except StoreFailed as exc:
                raise self._failed(exc) from None
        self._wrote(journal, txid)
        return StoreRef(journal, location.seq, key)

    def dequeue(self, ref: StoreRef, txid: str | None = None) -> None:
        """Remove a message (at ``commit(txid)`` with a txid).

        Without a txid the record is deferred: written with the others of this
        turn as one DEQUEUE_MANY record at the next ``flush`` (a drained page
        costs one record, not 200), which the broker calls at the end of every
        turn, before the turn's frames go out. It is no less durable for that:
        records reach the disk only at ``flush`` and ``sync`` anyway, and no
        RECEIPT waits for a dequeue outside a transaction (a transaction's are
        written at once, and its COMMIT's RECEIPT waits for their sync).
        """
        if txid is not None:
            ref.journal.dequeue(ref.seq, txid)
            self._wrote(ref.journal, txid)
            return
        seqs = self.deferred_dequeues.get(ref.journal)
        if seqs is None:
            seqs = self.deferred_dequeues[ref.journal] = []
        seqs.append(ref.seq)
        if len(seqs) >= _DEFERRED_MAX:  # a purge of a deep backlog: written as it goes, not all held
            self._write_deferred(ref.journal)

    @property
    def deferred(self) -> int:
        """Dequeues waiting for the next ``flush``."""
        return sum(map(len, self.deferred_dequeues.values()))

    def _write_deferred(self, journal: Journal | None = None) -> None:
        """Write the deferred dequeues (of ``journal`` only, if given), then count
        them as one write generation: a concurrent ``sync`` that claims it has
        them all on its journals."""
        if journal is None:
            deferred, self.deferred_dequeues = self.deferred_dequeues, {}
        else:
            seqs = self.deferred_dequeues.pop(journal, None)
            deferred = {journal: seqs} if seqs is not None else {}
        for target, seqs in deferred.items():
            try:
                target.dequeue_many(seqs)
            except StoreFailed as exc:
                raise self._failed(exc) from None
            except StoreFull as exc:  # a full disk: written when space returns (a crash meanwhile redelivers them)
                left = seqs[getattr(exc, "done", 0) :]
                self.deferred_dequeues.setdefault(target, [])[:0] = left
                if not self._dequeues_waiting:
                    log.warning("%s; acknowledged messages stay in the journal until space returns", exc)
                self._dequeues_waiting = True
                continue
            except (StorageError, KeyError) as exc:  # the messages stay in the journal: a restart redelivers them
                log.error(
                    "could not write %d dequeues to journal %s: %s; those not written come back at a restart",
                    len(seqs),
                    target.config.name,
                    exc,
                )
            if self._dequeues_waiting and not self.deferred_dequeues:
                log.info("the acknowledgements that waited for space are written")
                self._dequeues_waiting = False
        if deferred:
            with self._lock:
                self.write_generation += 1
                self._dirty.update(deferred)

    def mark_delivered(self, ref: StoreRef) -> None:
        """Note that a message went to a consumer (recovery flags it redelivered).
        On a full disk the note is skipped: a crash would then redeliver the
        message without the flag, nothing worse."""
        try:
            ref.journal.mark_delivered(ref.seq)
        except StoreFull:
            return
        except StoreFailed as exc:
            raise self._failed(exc) from None
        self._wrote(ref.journal)

    def commit(self, txid: str) -> None:
        """Make a transaction's records effective, in every journal it touched.

        Across several journals (queues of the ring layout) the decision is
        fsynced to the transaction log first: that is the commit point, and
        recovery completes the commit from it (``storage.txlog``).
        """
        journals = self._tx_journals.pop(txid, set())
        spans = len(journals) > 1 and self._txlog is not None
        if spans:
            assert self._txlog is not None
            self._txlog.decide(txid)
        for journal in journals:
            journal.commit(txid)
            self._wrote(journal)
        self._retire_decisions()
        if spans:
            self._deciding.append((txid, self.write_generation))

    def _retire_decisions(self) -> None:
        """Retire the decisions whose participants' commits a sync has made durable."""
        while self._deciding and self._deciding[0][1] <= self.synced_generation:
            txid, _ = self._deciding.popleft()
            assert self._txlog is not None
            self._txlog.retire(txid)

    def abort(self, txid: str) -> None:
        for journal in self._tx_journals.pop(txid, set()):
            journal.abort(txid)
            self._wrote(journal)

    def read(self, ref: StoreRef) -> StoredMessage:
        """A message read back from disk, decoded whole."""
        return self.read_many([ref])[0]

    def flush(self) -> None:
        """Write the deferred dequeues, and hand buffered writes to the operating system."""
        if self.deferred_dequeues:
            self._write_deferred()
        for journal in self._dirty:
            journal.flush()

    # -- durability (any thread)
    @property
    def needs_sync(self) -> bool:
        return self.write_generation > self.synced_generation

    def sync(self) -> int:
        """fsync every journal written since the last sync; returns the generation now durable.

        Safe to call from another thread while the broker keeps writing: what
        it writes meanwhile belongs to the next sync.
        """
        with self._lock:
            self._check()
            generation = self.write_generation
            dirty, self._dirty = self._dirty, set()
        try:
            for journal in dirty:  # outside the lock: writers never wait for an fsync
                journal.sync()
        except StoreFailed as exc:
            with self._lock:
                raise self._failed(exc) from None
        with self._lock:
            self._check()
            self.synced_generation = max(self.synced_generation, generation)
        return generation

    def disk_usage(self) -> int:
        """Bytes the journals reserve: every file at its full, preallocated size
        (what the store limit counts, as in KahaDB and Qpid)."""
        return sum(j.disk_usage() for j in self.journals())

    def written_bytes(self) -> int:
        """Bytes of records in the journals' files: what of ``disk_usage`` holds
        something (a ring is reserved whole at its creation, written as it goes)."""
        return sum(j.used_bytes() for j in self.journals())

    def ring_reservation(self) -> RingReservation | None:
        """How many rings the store holds and what each reserves (``None`` for
        the growing layout, whose one journal grows a file at a time)."""
        if self._shared is not None:
            return None
        return RingReservation(len(self._journals), self.config.file_count * self.config.file_size)

    def index_bytes(self) -> int:
        """Bytes the journals' in-memory indexes take (``Journal.index_bytes``)."""
        return sum(j.index_bytes() for j in self.journals())

    def index_spilled_bytes(self) -> int:
        """Bytes of those indexes in their scratch files (``Journal.index_spilled_bytes``)."""
        return sum(j.index_spilled_bytes() for j in self.journals())

    # -- recovery
    def recover(self) -> Iterator[tuple[str, Location, bool, Journal]]:
        """Every live message, in log order: (key, location, delivered, journal).

        Nothing is read beyond what opening the journal scanned: a message's
        payload stays on disk until it is paged in (``read``, ``read_meta``).
        """
        for journal in self.journals():
            for rec in journal.recovered(payloads=False):
                yield rec.key.decode("utf-8"), rec.location, rec.delivered, journal

    def read_many(self, refs: list[StoreRef]) -> list[StoredMessage]:
        """Many messages read back at once, decoded whole (``read_payloads``)."""
        return [decode_payload(payload) for payload in self.read_payloads(refs)]

    def read_payloads(self, refs: list[StoreRef]) -> list[bytes]:
        """The payloads of many messages, in the order of ``refs``: one read per run
        of neighbours in a file (a page-in's batch; ``decode_messages`` makes them messages)."""
        by_journal: dict[Journal, list[int]] = {}  # a queue's page is all in one journal
        for i, ref in enumerate(refs):
            by_journal.setdefault(ref.journal, []).append(i)
        out: list[bytes] = [b""] * len(refs)
        for journal, positions in by_journal.items():
            for i, payload in zip(positions, journal.read_seqs([refs[i].seq for i in positions]), strict=False):
                out[i] = payload
        return out

    def read_meta(self, ref: StoreRef) -> tuple[int, int, int]:
        """(broker seq, priority, expires) of a stored message, from its payload."""
        return decode_meta(ref.journal.read(ref.location))

    # -- durable subscriptions
    def load_durables(self) -> list[dict[str, Any]]:
        if not self._durables_file.exists():
            return []
        try:
            raw = file_ops().read_file(self._durables_file)
        except OSError as exc:
            raise StoreFailed(self._durables_file.name, f"reading {self._durables_file}", exc) from None
        data = json.loads(raw.decode("utf-8"))
        return list(data.get("subscriptions", []))

    def save_durables(self, subscriptions: list[dict[str, Any]]) -> None:
        """Rewrite the list of durable subscriptions atomically, durable when this returns.

        Any failure is ``StoreFailed`` (the file on disk is then the old list or
        the new one, and the broker can no longer say which it will find)."""
        self._check()
        data = json.dumps({"version": 1, "subscriptions": subscriptions}, indent=1).encode("utf-8")
        try:
            file_ops().replace_file(self._durables_file, data)
        except OSError as exc:
            raise self._failed(StoreFailed(self._durables_file.name, "saving the durable subscriptions", exc)) from None

    @property
    def failed(self) -> StoreFailed | None:
        """The failure that stopped the store (its own, or one of its journals'), or None."""
        if self.failure is None:
            logs = [self._txlog.journal] if self._txlog is not None else []
            for journal in [*self.journals(), *logs]:
                if journal.failed is not None:
                    self.failure = journal.failed
                    break
        return self.failure

    @property
    def closed(self) -> bool:
        return self._lock_file is None

    def close(self) -> None:
        """Sync and close every journal and release the data directory (idempotent)."""
        if self.closed:
            return
        if self.failed is not None:  # promise nothing more: close the files as they are
            for journal in self.journals():
                journal.close()
            if self._txlog is not None:
                self._txlog.close()
            self._unlock()
            return
        with contextlib.suppress(StoreFull):  # left for the next start to redeliver
            self._write_deferred()
        for journal in self.journals():
            journal.sync()
            journal.close()
        if self._txlog is not None:
            for txid, _ in self._deciding:  # every participant is synced now
                self._txlog.retire(txid)
            self._deciding.clear()
            self._txlog.close()
        self._unlock()

    def _unlock(self) -> None:
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None
