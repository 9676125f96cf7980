"""The broker core's side of persistence: journaling, group commit, recovery.

A mixin of ``Broker``. Persistent queue messages are journaled before they
enter the queue (``admit``); a RECEIPT for them waits, under fsync policy
``always``, until the edge reports an fsync that covers them
(``store_synced``): one fsync releases every producer that wrote before it.
Durable topic subscriptions journal their own copy of each persistent
message. ``recover`` brings it all back at start.

Storage failures (theory of operation)
--------------------------------------
The fsync is an action: ``take_actions`` asks the edge for one (``Sync``)
while RECEIPTs wait, and the edge reports back ``store_synced`` or
``store_failed``. Writes happen in the core's own calls and raise there.

- **The store failed** (``StoreFailed``: a failed fsync, an I/O error): fail-stop.
  ``store_failed`` logs it CRITICAL, answers every RECEIPT still waiting for
  durability with an ERROR naming the store and the error, refuses every
  persistent SEND and transaction after it the same way, and asks the edge to
  shut the broker down (``Shutdown``, exit status ``STORE_FAILED_EXIT``). Nothing
  is retried: after a failed fsync no later one proves anything.
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

from typing import TYPE_CHECKING, Any, Callable

from storage import StorageError, StoreFailed, StoreFull, TempStore
from storage.spill import SpillFile

from .codec import encode
from .cursor import PagedRef, StoreRun
from .coreutil import DEFERRED, log
from .destination import Destination
from .queue import Queue
from .topic import DurableState, Topic
from .actions import Shutdown
from .errors import NoSpaceError, ResourceLimitError
from .failstop import fail_stop
from .frames import Frame
from .message import Message
from .persistence import StoreRef, decode_messages, durable_key, encode_wire_payload
from .session import Session
from .trace import Recorder

if TYPE_CHECKING:
    from .actions import Action
    from .clock import Clock
    from .config import BrokerConfig
    from .flow import ProducerFlowControl
    from .persistence import MessageStore
    from .timers import Timers
    from .usage import Usage

__all__ = ["STORE_FAILED_EXIT", "SPACE_PROBE_SECONDS", "StoreHooks"]

#: The exit status of ``minibroker serve`` after a storage failure stopped it.
STORE_FAILED_EXIT = 3
#: While the disk is full, how often a persistent message may try it again.
SPACE_PROBE_SECONDS = 1.0


class StoreHooks:
    """Journaling, fsync waiting and recovery."""

    # What it uses of the Broker it is mixed into (declared for the type checker).
    config: "BrokerConfig"
    clock: "Clock"
    timers: "Timers"
    trace: Recorder
    boot: str
    store: "MessageStore | None"
    store_usage: "Usage"
    destinations: dict[str, Destination]
    flow: "ProducerFlowControl"
    _control: list["Action"]
    _temp_store: "TempStore | None"
    _index_spill: "SpillFile | None"
    store_failure: str | None
    store_full: str | None
    _txid: str | None
    _next_message: int
    _next_storage_tx: int
    _journal_files: dict[int, int]
    _sync_waiters: list[tuple[int, Session, str]]
    _space_probe: bool
    _emit: Callable[..., None]
    compile_selector: Callable[[str | None], Any]
    destination: Callable[[str], Destination]
    space_freed: Callable[[], None]
    temp_changed: Callable[[], None]
    temp_store: Callable[[], "TempStore"]

    def _after_write(self, session: Session, receipt: str | None, wrote: bool) -> Any:
        """Hold a RECEIPT until the journal is on disk, when the fsync policy says so."""
        if receipt is None or not wrote or self.store is None or self.config.store.fsync != "always":
            return None
        self._sync_waiters.append((self.store.write_generation, session, receipt))
        session.sync.wait()
        return DEFERRED

    def recover(self) -> int:
        """Bring back what the journals hold; returns the number of messages.

        Queue messages come back store-only (nothing is read until a consumer
        needs it); durable subscriptions and their messages come back in memory.
        Delivered-but-unacknowledged messages come back flagged redelivered.
        """
        if self.trace.enabled:
            self._emit("start")  # a trace's backlogs start again here: what recovery brings back
        store = self.store
        if store is None:
            return 0
        states: dict[str, DurableState] = {}
        for d in store.load_durables():
            topic = self.destination(d["topic"])
            assert isinstance(topic, Topic)
            state = DurableState(d["client_id"], d["name"], d.get("selector"), bool(d.get("no_local")), d.get("owner"))
            state.selector = self.compile_selector(state.selector_text)
            topic.durables[(state.client_id, state.name)] = state
            states[durable_key(topic.address, state.client_id, state.name)] = state
        count = 0
        orphans = 0
        for key, location, delivered, journal in store.recover():
            ref = StoreRef(journal, location.seq, key)
            # Journal order is the order the messages were sent in: recovered
            # messages take new broker seqs in that order, before any new one.
            seq = self._next_message
            self._next_message += 1
            if key.startswith("durable:"):
                found = states.get(key)
                if found is None:
                    store.dequeue(ref)  # its subscription was removed
                    orphans += 1
                    continue
                topic = self.destinations[key[len("durable:") :].split("|", 1)[0]]
                message = self.load_message(topic, PagedRef(ref, seq, 4, delivered, 0))
                found.refs[message.seq] = ref
                if delivered:
                    found.redelivered[message.seq] = 1
                topic.hold(message)
                found.pending.append(message)
            else:
                queue = self.destination(key)
                assert isinstance(queue, Queue)
                priority, expires = 4, 0
                if queue.policy.prioritized_messages:  # the only case where order needs the payload
                    _, priority, expires = store.read_meta(ref)
                queue.cursor.add_recovered(ref, seq, priority, delivered, expires)
            count += 1
        for state in states.values():
            state.pending = type(state.pending)(sorted(state.pending, key=lambda m: m.seq))
        if self.trace.enabled:
            for dest in self.destinations.values():
                stored = len(dest.cursor.store_only) if isinstance(dest, Queue) else 0
                if stored:
                    self._emit("recover", dest=dest.address, count=stored)
        self._set_store_usage(store.disk_usage())
        log.info(
            "recovered %d persistent messages (%d durable subscriptions)%s",
            count,
            len(states),
            f"; dropped {orphans} of removed durable subscriptions" if orphans else "",
        )
        return count

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

    @fail_stop
    def store_synced(self, generation: int) -> None:
        """The edge's fsync covered every write up to ``generation``: release RECEIPTs."""
        self._sync_in_flight = False
        if self.store_failure is None:
            self._release_sync_waiters(generation)

    @property
    def sync_wanted(self) -> bool:
        """Are RECEIPTs waiting for an fsync?"""
        return bool(self._sync_waiters)

    # -- storage failures (see the module docstring)
    @fail_stop
    def store_failed(self, error: BaseException) -> None:
        """The store failed (a ``Sync`` the edge carried out raised, or a write did):
        stop promising durability at once, and ask the edge to stop the broker."""
        self._sync_in_flight = False
        if self.store_failure is not None:
            return
        text = str(error) if isinstance(error, StorageError) else f"Store failed: {error}"
        self.store_failure = text
        log.critical(
            "%s; nothing more is receipted as durable: the broker stops (restart it once the disk is "
            "checked: what was receipted before is recovered)",
            text,
        )
        refusal = f"{text}; the broker accepts no persistent message and is stopping"
        waiters, self._sync_waiters = self._sync_waiters, []
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
        self._control.append(Shutdown(text, STORE_FAILED_EXIT))

    def _store_full(self, error: StoreFull) -> None:
        """A write found the disk full: the store is full (logged once) until a write succeeds,
        and persistent messages wait or are refused without trying the disk until it may
        have room (``_probe_space``, ``_space_returned``)."""
        if self.store_full is None:
            log.error(
                "%s: the store is full; persistent messages are refused (or their producers wait) until "
                "space returns, while consumers and non-persistent messages go on",
                error,
            )
            if self.trace.enabled:
                self._emit("error", message=str(error), code="store_full", fatal=False)
        self.store_full = str(error)
        self.flow.disk_full = True
        if not self._space_probe:
            self._space_probe = True
            self.timers.call_at(self.clock.now() + SPACE_PROBE_SECONDS, self._probe_space)

    def _probe_space(self) -> None:
        """Let the next persistent message try the disk again (it closes the gate again if it is still full)."""
        self._space_probe = False
        self._space_returned()

    def _space_returned(self) -> None:
        """The disk may have room (a second passed, or journal files were deleted)."""
        if self.flow.disk_full:
            self.flow.disk_full = False
            self.space_freed()

    def store_writable(self) -> None:
        """A persistent message was written, or journal files deleted: if the store was
        full, it has space again."""
        if self.store_full is not None:
            log.info("the store has space again: persistent messages are accepted")
            self.store_full = None
            self._space_returned()

    @property
    def store_state(self) -> str:
        """``ok``, ``full`` (no space on disk: persistent messages wait or are refused) or
        ``failed`` (the broker is stopping)."""
        return "failed" if self.store_failure is not None else "full" if self.store_full is not None else "ok"

    def _release_sync_waiters(self, generation: int) -> None:
        waiters = self._sync_waiters
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
        self._sync_waiters = keep

    def _set_store_usage(self, used: int) -> None:
        if used < self.store_usage.usage:  # journal files were deleted: the disk has room again
            self.store_writable()
        self._set_usage(self.store_usage, used)

    def _set_usage(self, usage: Any, used: int) -> None:
        """Bring ``usage`` to ``used`` bytes; space freed wakes what waits for it."""
        delta = used - usage.usage
        if delta > 0:
            usage.increase(delta)
        elif delta < 0:
            usage.decrease(-delta)
            self.space_freed()

    def _payload(self, message: Message) -> bytes:
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
        if self.store_failure is not None:
            raise ResourceLimitError(f"{self.store_failure}; the broker accepts no persistent message and is stopping")
        try:
            result = fn()
        except StoreFailed as exc:
            self.store_failed(exc)
            raise ResourceLimitError(f"{exc}; the broker accepts no persistent message and is stopping") from None
        except StoreFull as exc:
            self._store_full(exc)
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
        self._txid = txid = f"{self.boot}.{session.id}.{self._next_storage_tx}"
        self._next_storage_tx += 1
        return txid

    def commit_storage_transaction(self, txid: str) -> None:
        """Write the TX_COMMIT of ``txid`` (a refusal raises ``ResourceLimitError``)."""
        store = self.store
        assert store is not None
        self._storage_call(lambda: store.commit(txid))

    def end_storage_transaction(self) -> None:
        """Journal records no longer belong to a storage transaction."""
        self._txid = None

    def admit(self, destination: Destination, message: Message) -> Any:
        """Journal a persistent queue message, then hand it to the destination."""
        if message.persistent and self.store is not None and isinstance(destination, Queue):
            store = self.store
            payload = self._payload(message)
            try:
                message.store_ref = self._storage_call(lambda: store.enqueue(destination.address, payload, self._txid))
            except NoSpaceError:
                raise
            except ResourceLimitError:
                if self.trace.enabled and self.store_failure is None:
                    self._trace_journal(
                        "journal_full", store.journal_for(destination.address), dest=destination.address
                    )
                raise
        return destination.accept(message)

    def persist_durable(self, topic: Topic, state: DurableState, message: Message) -> None:
        """Journal a persistent topic message for one durable subscription.

        A refusal (a full disk or ring, a failed store) raises ``ResourceLimitError``:
        the SEND gets an ERROR, never a RECEIPT for a copy that is not on disk
        (subscribers served before this one keep theirs)."""
        if not message.persistent or self.store is None:
            return
        key = durable_key(topic.address, state.client_id, state.name)
        store = self.store
        payload = self._payload(message)
        try:
            state.refs[message.seq] = self._storage_call(lambda: store.enqueue(key, payload, self._txid))
        except ResourceLimitError as exc:
            log.error(
                "%s: could not journal %s for durable subscription %s: %s",
                topic.address,
                message.message_id,
                key,
                exc.message,
            )
            raise

    def mark_durable_delivered(self, state: DurableState, message: Message) -> None:
        """A persistent message went to a client-ack durable subscriber: note it on
        that subscription's stored copy, for recovery (as ``mark_delivered`` for a queue)."""
        ref = state.refs.get(message.seq)
        if ref is not None and self.store is not None:
            self.store.mark_delivered(ref)

    def settle_durable(self, state: DurableState, message: Message) -> None:
        ref = state.refs.pop(message.seq, None)
        if ref is not None and self.store is not None:
            self.store.dequeue(ref, self._txid)

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
            for t in self.destinations.values()
            if isinstance(t, Topic)
            for s in t.durables.values()
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
                self.store.dequeue(ref, self._txid)
        else:
            self.temp_store().release(ref)
            self.temp_changed()

    def spill(self, queue: Destination, message: Message) -> int:
        """Write a non-persistent queue message to the temp store (a file cursor); returns its temp seq."""
        entry = self.temp_store().append(queue.address, self._payload(message))
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

    def load_run(self, destination: Destination, run: StoreRun, budget: int | None) -> tuple[list[Message], int]:
        """Page in ``run``'s messages, read together, while the bytes loaded are
        below ``budget`` (None: all of them); returns them and their size."""
        journal, key, _priority, seqs, journal_seqs = run
        loaded = decode_messages(journal.read_seqs(journal_seqs), seqs, destination.address)
        taken = 0
        for n, (message, journal_seq) in enumerate(zip(loaded, journal_seqs)):
            if budget is not None and taken >= budget:
                del loaded[n:]  # left in the store: the broker's memory is at the page-in limit
                break
            message.store_ref = StoreRef(journal, journal_seq, key)
            taken += message.size
        return loaded, taken

    def load_message(self, destination: Destination, paged: PagedRef, payload: bytes | None = None) -> Message:
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
