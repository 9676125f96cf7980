"""The broker core's side of persistence: journaling, group commit, recovery.

A part the ``Broker`` holds (``broker.storehooks``), given the core's context
(``context.CoreContext``) and producer flow control (which a full or failed
store holds back or refuses). Persistent queue messages are journaled before they
enter the queue (``admit``). The RECEIPT of any frame that wrote to the
journal waits, under fsync policy ``always``, until the edge reports an
fsync that covers its records (``receipt``, ``store_synced``): one fsync
releases every frame that wrote before it.
Durable topic subscriptions journal their own copy of each persistent
message. ``recovery.recover`` brings it all back at start.

Storage failures (theory of operation)
--------------------------------------
The fsync is an action: the outbox holds one (``Sync``) while RECEIPTs
wait, and the edge reports back ``store_synced`` or ``store_failed``, both
events. Writes happen in the core's own calls, through the store it was
given, and raise there: the core reports a failure to itself (``store_failed``
inside the event that met it, including the write of the deferred dequeues
at the event's end), so it reaches the same place as a failed fsync.

- **The store failed** (``StoreFailed``: a failed fsync, an I/O error): fail-stop.
  ``store_failed`` logs it CRITICAL, answers every RECEIPT still waiting for
  durability with an ERROR naming the store and the error, refuses every
  persistent SEND and transaction after it the same way, and asks the edge to
  shut the broker down (``Shutdown``, exit status ``STORE_FAILED_EXIT``). Nothing
  is retried: after a failed fsync no later one proves anything.
- **A temp store that fails** (a non-persistent message spilled to disk by a file
  cursor cannot be read back) is a store that failed too, not a message quietly
  skipped. Non-persistent messages carry no promise of being on disk, but one
  the broker accepted and now cannot deliver is lost, and the broker cannot
  tell which consumer it would have gone to, nor whether the disk under the
  temp store (``data_dir/tmp_storage``, beside the journals) has lost
  receipted records too: the read error is evidence against the whole disk.
  Skipping it would leave a gap no one is told of; stopping tells every client
  (the one whose frame needed the message gets an ERROR naming the temp store,
  the file and the error; the log has it CRITICAL), and a restart loses only
  what a restart always loses: non-persistent messages.
- **A read at start that fails** (recovery): the broker refuses to start, naming
  the file and the error; it never serves what it recovered only in part.
- **The disk is full** (``StoreFull``): nothing was written, nothing is lost.
  The store is full (``store_full``, in the statistics and the log, until a
  persistent message is written again or journal files are deleted) and persistent SENDs are refused with
  an ERROR, or, under producer flow control without ``send_fail_if_no_space``,
  wait as for a full store limit, without trying the disk (``flow.disk_full``).
  Consumers, acknowledgements and non-persistent messages go on. Every
  ``SPACE_PROBE_SECONDS``, and whenever the journals shrink, the next
  persistent message tries the disk again: when the operator or the
  consumers' acks have freed space, sends work again without a restart.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from minibroker.connection.session import Session
from minibroker.core.actions import Shutdown
from minibroker.core.common import log
from minibroker.destinations.destination import Destination
from minibroker.destinations.paged import PagedRef, StoreRun
from minibroker.destinations.ports import DestinationStore
from minibroker.destinations.queue import Queue
from minibroker.destinations.topic import Topic
from minibroker.durability.persistence import StoreRef, decode_messages, durable_key, encode_wire_payload
from minibroker.errors import NoSpaceError, ResourceLimitError
from minibroker.frames import Frame
from minibroker.protocol.codec import encode
from minibroker.protocol.message import Message
from storage import StorageError, StoreFailed, StoreFull, TempStore
from storage.spill import SpillFile
from storage.tempstore import TEMP_STORE_NAME

if TYPE_CHECKING:
    from minibroker.core.actions import Action
    from minibroker.core.context import CoreContext
    from minibroker.core.flow import ProducerFlowControl
    from minibroker.destinations.ports import DestinationView, DurableCopies
    from minibroker.destinations.subscription import Subscription

__all__ = ["STORE_FAILED_EXIT", "SPACE_PROBE_SECONDS", "StoreHooks"]

#: The exit status of ``minibroker serve`` after a storage failure stopped it.
STORE_FAILED_EXIT = 3
#: While the disk is full, how often a persistent message may try it again.
SPACE_PROBE_SECONDS = 1.0
#: The generation of a waiting RECEIPT until its turn's ``flush`` gives it the one it reached.
AT_FLUSH = sys.maxsize


class StoreHooks(DestinationStore):
    """Journaling, fsync waiting, the temp store: a part the broker holds (``broker.storehooks``).

    Its own state: the RECEIPTs waiting for an fsync (``waiters``), whether a
    ``Sync`` is out (``sync_in_flight``), why the store failed or is full
    (``failure``, ``full``), the storage transaction being written (``txid``),
    the temp store and the store cursors' scratch file. Destinations call it as
    their ``ports.DestinationStore``."""

    def __init__(
        self,
        context: CoreContext,
        *,
        flow: ProducerFlowControl,
        temp_dir: Any,
        request: Callable[[Action], None],
    ) -> None:
        """``flow`` holds producers back while the store is full and refuses their
        persistent SENDs once it failed; the temp store lives in ``temp_dir`` (None:
        the broker has none); ``request`` hands the edge a control action (``Shutdown``)."""
        self.context = context
        # Bound once: journaling and accounting read these for every persistent message.
        self.config = context.config
        self.store = context.store
        self.trace = context.trace
        self._emit = context.trace.event
        self.flow = flow
        self.temp_dir = temp_dir
        self._request = request
        #: RECEIPTs waiting for an fsync: (store write generation, session, receipt id);
        #: ``AT_FLUSH`` until the end of the turn (``receipt``).
        self.waiters: list[tuple[int, Session, str]] = []
        #: Some waiter's generation is ``AT_FLUSH``.
        self._at_flush = False
        #: A ``Sync`` was asked for and its outcome is not reported yet.
        self.sync_in_flight = False
        #: Why the store failed (the broker is stopping), or None.
        self.failure: str | None = None
        #: Why the store is full (no space on disk), or None.
        self.full: str | None = None
        self._space_probe = False
        #: The storage transaction of the COMMIT being applied, if any.
        self.txid: str | None = None
        self._next_storage_tx = 1
        #: The store's write generation at the end of the last turn (``flush``): a
        #: flush is due when the store's differs or it holds deferred dequeues.
        self.generation_seen = 0
        #: id(journal) -> its current file, for ``journal_roll`` trace events.
        self._journal_files: dict[int, int] = {}
        self._temp_store: TempStore | None = None
        #: Where store cursors put the store-only lists they do not keep in memory (``index_spill``).
        self._index_spill: SpillFile | None = None

    def write_mark(self) -> tuple[int, int] | None:
        """Where the journal's writes stand now (None: no store), for ``receipt``:
        its write generation and the dequeues deferred to the end of the turn."""
        store = self.store
        return None if store is None else (store.write_generation, store.deferred)

    def receipt(self, session: Session, receipt: str, mark: tuple[int, int] | None) -> None:
        """The RECEIPT of a frame handled since ``write_mark`` gave ``mark``.

        The one rule of durability: a frame that wrote to the journal (a
        persistent SEND to a queue or to a durable subscription's copy, an ACK or
        NACK of a persistent message, a COMMIT, an admin move or purge, a durable
        subscription removed) gets its RECEIPT only after the fsync that covers
        its records. Theory of operation:

        - What it wrote shows as a changed mark: a new write generation, or more
          dequeues deferred to the turn's end (``MessageStore.dequeue``).
        - Its waiter takes ``AT_FLUSH`` for a generation: the end of the turn
          writes the deferred dequeues (``flush``) and gives every such waiter the
          generation it reached; the ``Sync`` goes out after that, so one fsync
          covers every frame of the turn (group commit).
        - Under fsync ``batch`` or ``never`` nothing waits: a RECEIPT then means
          handed to the operating system (a power loss may take it).
        """
        store = self.store
        if (
            store is not None
            and self.config.store.fsync == "always"
            and (store.write_generation, store.deferred) != mark
        ):
            self.waiters.append((AT_FLUSH, session, receipt))
            self._at_flush = True
            session.sync.wait()
            return
        self.send_receipt(session, receipt)

    def close(self) -> None:
        """Stop: make everything written durable and close the journals (and the temp store)."""
        if self.store is not None:
            if self.trace.enabled and not self.store.closed:
                for journal in self.store.journals():
                    self._trace_journal("journal_state", journal)
            self.store.close()
        if self._temp_store is not None:
            self._temp_store.close()
            self._temp_store = None
        if self._index_spill is not None:
            self._index_spill.close()
            self._index_spill = None

    def store_synced(self, generation: int) -> None:
        """The edge's fsync covered every write up to ``generation``: release RECEIPTs."""
        self.sync_in_flight = False
        if self.failure is None:
            self._release_sync_waiters(generation)

    def send_receipt(self, session: Session, receipt: str) -> None:
        """Write a RECEIPT, or queue it behind earlier ones still waiting for an fsync."""
        if session.sync.count:
            generation = max(g for g, s, _ in self.waiters if s is session)
            self.waiters.append((generation, session, receipt))
            session.sync.wait()
            return
        session.write(encode(Frame("RECEIPT", {"receipt-id": receipt}), session.version))

    def forget_session(self, session: Session) -> None:
        """``session`` closed: the RECEIPTs it was owed after an fsync are dropped."""
        if session.sync.count:
            self.waiters = [w for w in self.waiters if w[1] is not session]
            session.sync.drop()

    def flush(self) -> None:
        """The end of a turn: write what the journals hold back (the turn's dequeues),
        give this turn's waiting RECEIPTs the generation that covers them (``receipt``),
        account the journals' size, and release RECEIPTs that wait for no fsync. Does
        nothing when nothing was written since the last turn."""
        store = self.store
        if store is None or (store.write_generation == self.generation_seen and not store.deferred_dequeues):
            return
        try:
            store.flush()  # writes the deferred dequeues first (a new generation)
        except StoreFailed as exc:
            self.store_failed(exc)
        self.generation_seen = generation = store.write_generation
        if self._at_flush:  # the RECEIPTs of this turn's writes wait for an fsync of all of them
            self._at_flush = False
            self.waiters = [(generation if g == AT_FLUSH else g, s, r) for g, s, r in self.waiters]
        self.set_store_usage(store.disk_usage())
        if self.trace.enabled:
            self.trace_journal_rolls()
        if self.config.store.fsync != "always" and self.failure is None:
            self._release_sync_waiters(store.write_generation)

    def sync_due(self) -> bool:
        """Should the edge fsync now? RECEIPTs wait and no ``Sync`` is out (one at a time:
        it covers every write before it). Answering yes counts the ``Sync`` as out."""
        if self.waiters and not self.sync_in_flight and self.failure is None:
            self.sync_in_flight = True
            return True
        return False

    @property
    def sync_wanted(self) -> bool:
        """Are RECEIPTs waiting for an fsync?"""
        return bool(self.waiters)

    # -- storage failures (see the module docstring)
    def store_failed(self, error: BaseException) -> None:
        """The store failed (a ``Sync`` the edge carried out raised, or a write did):
        stop promising durability at once, and ask the edge to stop the broker."""
        self.sync_in_flight = False
        if self.failure is not None:
            return
        text = str(error) if isinstance(error, StorageError) else f"Store failed: {error}"
        self.failure = text
        log.critical(
            "%s; nothing more is receipted as durable: the broker stops (restart it once the disk is "
            "checked: what was receipted before is recovered)",
            text,
        )
        refusal = f"{text}; the broker accepts no persistent message and is stopping"
        waiters, self.waiters = self.waiters, []
        for _, session, receipt in waiters:  # none of them is known to be on disk: no RECEIPT, an ERROR
            session.sync.release()
            if session.is_open:
                self.flow.refuse_send(session, receipt, refusal)
        for session in list(self.flow.blocked):
            for parked in [p for p in session.producing.parked if p.message.persistent]:
                session.producing.parked.remove(parked)
                self.flow.refuse_send(session, parked.receipt, refusal)
            self.flow.retry = True
        if self.trace.enabled:
            self._emit("error", message=text, code="store_failed", fatal=True)
        self._request(Shutdown(text, STORE_FAILED_EXIT))

    def found_full(self, error: StoreFull) -> None:
        """A write found the disk full: the store is full (logged once) until a write succeeds,
        and persistent messages wait or are refused without trying the disk until it may
        have room (``_probe_space``, ``_space_returned``)."""
        if self.full is None:
            log.error(
                "%s: the store is full; persistent messages are refused (or their producers wait) until "
                "space returns, while consumers and non-persistent messages go on",
                error,
            )
            if self.trace.enabled:
                self._emit("error", message=str(error), code="store_full", fatal=False)
        self.full = reason = str(error)
        self.flow.disk_full = reason
        if not self._space_probe:
            self._space_probe = True
            self.context.timers.call_at(self.context.clock.now() + SPACE_PROBE_SECONDS, self._probe_space)

    def _probe_space(self) -> None:
        """Let the next persistent message try the disk again (it closes the gate again if it is still full)."""
        self._space_probe = False
        self._space_returned()

    def _space_returned(self) -> None:
        """The disk may have room (a second passed, or journal files were deleted)."""
        if self.flow.disk_full is not None:
            self.flow.disk_full = None
            self.flow.space_freed()

    def store_writable(self) -> None:
        """A persistent message was written, or journal files deleted: if the store was
        full, it has space again."""
        if self.full is not None:
            log.info("the store has space again: persistent messages are accepted")
            self.full = None
            self._space_returned()

    @property
    def store_state(self) -> str:
        """``ok``, ``full`` (no space on disk: persistent messages wait or are refused) or
        ``failed`` (the broker is stopping)."""
        return "failed" if self.failure is not None else "full" if self.full is not None else "ok"

    def _release_sync_waiters(self, generation: int) -> None:
        waiters = self.waiters
        if not waiters:
            return
        keep = []
        for gen, session, receipt in waiters:
            if gen <= generation:
                session.sync.release()
                if session.is_open:
                    session.write(encode(Frame("RECEIPT", {"receipt-id": receipt}), session.version))
            else:
                keep.append((gen, session, receipt))
        self.waiters = keep

    def set_store_usage(self, used: int) -> None:
        if used < self.context.store_usage.usage:  # journal files were deleted: the disk has room again
            self.store_writable()
        self._set_usage(self.context.store_usage, used)

    def _set_usage(self, usage: Any, used: int) -> None:
        """Bring ``usage`` to ``used`` bytes; space freed wakes what waits for it."""
        delta = used - usage.usage
        if delta > 0:
            usage.increase(delta)
        elif delta < 0:
            usage.decrease(-delta)
            self.flow.space_freed()

    def payload_of(self, message: Message) -> bytes:
        return encode_wire_payload(
            message.seq,
            message.message_id_wire("1.2"),
            message.wire_headers,
            message.body,
            persistent=message.persistent,
            priority=message.priority,
            expires=message.expires,
            timestamp=message.timestamp,
        )

    def _storage_call(self, fn: Callable[[], Any]) -> Any:
        """Run a journal write for a frame: a refusal becomes a ``ResourceLimitError``
        (the frame's ERROR), a full disk a ``NoSpaceError``, a failure ``store_failed``."""
        if self.failure is not None:
            raise ResourceLimitError(f"{self.failure}; the broker accepts no persistent message and is stopping")
        try:
            result = fn()
        except StoreFailed as exc:
            self.store_failed(exc)
            raise ResourceLimitError(f"{exc}; the broker accepts no persistent message and is stopping") from None
        except StoreFull as exc:
            self.found_full(exc)
            raise NoSpaceError(f"{exc}. Persistent messages are refused until space returns.") from None
        except StorageError as exc:
            raise ResourceLimitError(str(exc)) from None
        self.store_writable()
        return result

    def begin_storage_transaction(self, session: Session) -> str:
        """Open a storage transaction for ``session``'s COMMIT (or an administrator's
        move): every journal record until ``end_storage_transaction`` carries its id
        and takes effect at its TX_COMMIT. Unique across restarts too (the boot
        token): a storage transaction id is never reused."""
        self.txid = txid = f"{self.context.boot}.{session.id}.{self._next_storage_tx}"
        self._next_storage_tx += 1
        return txid

    def commit_storage_transaction(self, txid: str) -> None:
        """Write the TX_COMMIT of ``txid`` (a refusal raises ``ResourceLimitError``)."""
        store = self.store
        assert store is not None
        self._storage_call(lambda: store.commit(txid))

    def end_storage_transaction(self) -> None:
        """Journal records no longer belong to a storage transaction."""
        self.txid = None

    def admit(self, destination: Destination, message: Message) -> list[Subscription] | None:
        """Journal a persistent queue message, then hand it to the destination."""
        if message.persistent and self.store is not None and isinstance(destination, Queue):
            store = self.store
            payload = self.payload_of(message)
            try:
                message.store_ref = self._storage_call(lambda: store.enqueue(destination.address, payload, self.txid))
            except NoSpaceError:
                raise
            except ResourceLimitError:
                if self.trace.enabled and self.failure is None:
                    self._trace_journal(
                        "journal_full", store.journal_for(destination.address), dest=destination.address
                    )
                raise
        return destination.accept(message)

    def persist_durable(self, topic: DestinationView, state: DurableCopies, message: Message) -> None:
        """Journal a persistent topic message for one durable subscription.

        A refusal (a full disk or ring, a failed store) raises ``ResourceLimitError``:
        the SEND gets an ERROR, never a RECEIPT for a copy that is not on disk
        (subscribers served before this one keep theirs)."""
        if not message.persistent or self.store is None:
            return
        key = durable_key(topic.address, state.client_id, state.name)
        store = self.store
        payload = self.payload_of(message)
        try:
            state.refs[message.seq] = self._storage_call(lambda: store.enqueue(key, payload, self.txid))
        except ResourceLimitError as exc:
            log.error(
                "%s: could not journal %s for durable subscription %s: %s",
                topic.address,
                message.message_id,
                key,
                exc.message,
            )
            raise

    def mark_durable_delivered(self, state: DurableCopies, message: Message) -> None:
        """A persistent message went to a client-ack durable subscriber: note it on
        that subscription's stored copy, for recovery (as ``mark_delivered`` for a queue)."""
        ref = state.refs.get(message.seq)
        if ref is not None and self.store is not None:
            self.store.mark_delivered(ref)

    def settle_durable(self, state: DurableCopies, message: Message) -> None:
        ref = state.refs.pop(message.seq, None)
        if ref is not None and self.store is not None:
            self.store.dequeue(ref, self.txid)

    def _trace_journal(self, event: str, journal: Any, **extra: Any) -> None:
        """A ``journal_roll``, ``journal_full`` or ``journal_state`` event for ``journal``."""
        files = journal.files()
        current = next((f for f in files if f.current), files[-1] if files else None)
        self._emit(
            event,
            store=journal.config.queue_name,
            layout=journal.config.layout,
            file=current.name if current else "",
            files=len(files),
            live=journal.live_count,
            file_live={f.name: f.live for f in files},
            **extra,
        )

    def trace_journal_rolls(self) -> None:
        """Emit ``journal_roll`` for every journal that moved to another file."""
        assert self.store is not None
        for journal in self.store.journals():
            seen = self._journal_files.get(id(journal))
            if seen is not None and seen != journal.current_file_id:
                self._trace_journal("journal_roll", journal)
            self._journal_files[id(journal)] = journal.current_file_id

    def durables_changed(self) -> None:
        """Durable subscriptions were created or removed: save the list."""
        if self.store is None:
            return
        subs = [
            {
                "topic": t.address,
                "client_id": s.client_id,
                "name": s.name,
                "selector": s.selector_text,
                "no_local": s.no_local,
                "owner": s.owner,
            }
            for t in self.context.destinations.values()
            if isinstance(t, Topic)
            for s in t.durables.values()
            if not s.auto_delete  # (its consumers do not outlive the broker: nor does it)
        ]
        self.store.save_durables(subs)

    def mark_delivered(self, message: Message) -> None:
        """A persistent message went to a client-ack consumer: note it for recovery."""
        if self.store is not None and message.store_ref is not None:
            self.store.mark_delivered(message.store_ref)

    def discard_stored(self, ref: Any) -> None:
        """Drop a store-only message unread (a purge): its journal record or temp entry."""
        if isinstance(ref, StoreRef):
            if self.store is not None:
                self.store.dequeue(ref, self.txid)
        else:
            self.temp_store().release(ref)
            self.temp_changed()

    def spill(self, queue: DestinationView, message: Message) -> int:
        """Write a non-persistent queue message to the temp store (a file cursor); returns its temp seq."""
        entry = self.temp_store().append(queue.address, self.payload_of(message))
        self.temp_changed()
        return entry

    def read_ahead(self, refs: list[PagedRef]) -> list[bytes | None]:
        """The payloads of the journal's messages among ``refs``, read together (a
        page-in's batch), in the order of ``refs``: pass each to ``load_message``.
        Spilled messages are None, left for ``load_message``."""
        wanted = [p.ref for p in refs if type(p.ref) is StoreRef]
        if not wanted or self.store is None:
            return [None] * len(refs)
        payloads = iter(self.store.read_payloads(wanted))
        if len(wanted) == len(refs):
            return list(payloads)
        return [next(payloads) if type(p.ref) is StoreRef else None for p in refs]

    def load_run(self, destination: DestinationView, run: StoreRun, budget: int | None) -> tuple[list[Message], int]:
        """Page in ``run``'s messages, read together, while the bytes loaded are
        below ``budget`` (None: all of them); returns them and their size."""
        journal, key, _priority, seqs, journal_seqs = run
        loaded = decode_messages(journal.read_seqs(journal_seqs), seqs, destination.address)
        taken = 0
        for n, (message, journal_seq) in enumerate(zip(loaded, journal_seqs, strict=False)):
            if budget is not None and taken >= budget:
                del loaded[n:]  # left in the store: the broker's memory is at the page-in limit
                break
            message.store_ref = StoreRef(journal, journal_seq, key)
            taken += message.size
        return loaded, taken

    def load_message(self, destination: DestinationView, paged: PagedRef, payload: bytes | None = None) -> Message:
        """Read a store-only message back into a ``Message`` (a page-in, an expiry, a
        browse): from the journal (or ``payload``, read ahead), or (a spilled
        non-persistent message) from the temp store, where it stays until ``took``."""
        in_journal = type(paged.ref) is StoreRef
        if payload is None and in_journal:
            assert self.store is not None
            payload = self.store.read_payloads([paged.ref])[0]
        elif payload is None:
            payload = self.temp_store().read(paged.ref)
        [message] = decode_messages((payload,), (paged.seq,), destination.address)
        if in_journal:
            message.store_ref = paged.ref
        if paged.redelivered:
            message.redeliveries = 1
        return message

    def took(self, paged: PagedRef) -> None:
        """``paged`` left the store-only index with its message in memory (a page-in,
        an expiry): a spilled message's temp entry is freed. (A journal record
        stays until its message is consumed.)"""
        if type(paged.ref) is not StoreRef:
            self.temp_store().release(paged.ref)
            self.temp_changed()

    # -- the temp store (file cursors) and the store cursors' scratch file
    def temp_store(self) -> TempStore:
        """The temp store for file cursors, wiped and opened on first use in the
        directory the edge chose (``temp_dir``). A broker given none has no temp
        store: needing one is a store failure (only an in-process benchmark makes
        such a broker, and none of its messages spill)."""
        if self._temp_store is None:
            directory = self.temp_dir
            if directory is None:
                raise StoreFailed(
                    TEMP_STORE_NAME, "opening", OSError(errno.ENOENT, "the broker was given no temp directory")
                )
            self._temp_store = TempStore(
                directory, self.config.store.temp_journal_max_file_length, self.config.store.index_cache_rows
            )
        return self._temp_store

    def index_spill(self) -> SpillFile:
        """The scratch file for store cursors' lists of store-only messages
        (``seqfifo.py``), opened on first use: in the data directory, or the temp
        store's, or the system's temporary directory."""
        if self._index_spill is None:
            directory = self.store.root if self.store is not None else self.temp_dir
            self._index_spill = SpillFile(directory)
        return self._index_spill

    def index_spilled_bytes(self) -> int:
        """Bytes the store cursors keep in ``index_spill``'s file."""
        spill = self._index_spill
        return 0 if spill is None else spill.size - spill.waste

    def temp_changed(self) -> None:
        """The temp store grew or shrank: account it (``temp_usage``)."""
        store = self._temp_store
        if store is None:
            return
        self._set_usage(self.context.temp_usage, store.disk_usage())
