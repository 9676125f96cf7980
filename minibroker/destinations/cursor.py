"""The queue store cursor: ActiveMQ's ``StoreQueueCursor``, the heart of the
starving consumers ("Starving JMS consumers when not setting destination limits in
ActiveMQ", 13 Apr 2016).

Theory of operation
-------------------
A queue's undelivered messages live in two places:

- the *cache*: messages in memory, charged to the queue's memory usage, ready
  to dispatch (``queue.pending``). Non-persistent messages always live here
  (a VM cursor; the temp-store issue adds swapping).
- the *store*: persistent messages that are only on disk (``store_only``), in
  dispatch order, as three numbers each (broker seq, journal seq, expiry: ``StoreIndex``),
  for they are counted by no memory usage and a backlog may hold millions
  (so most of those numbers are on disk too: ``seqfifo.py``); a
  ``StoreRef`` is made only when one is read.

A persistent message is always written to the journal. It is *also* kept in
the cache while the cursor has space (``has_space``: see ``usage.py``, the
``current`` and ``legacy`` rules against ``cursor_memory_high_water_mark``,
default 70). Past the mark the cache is *disabled*: this message and every
later one are store-only, so the cache always holds the older messages and
order is kept. The cache is enabled again only once the store is drained and
there is space (``AbstractStoreCursor.canEnableCash``).

When the cache runs empty and the queue has a consumer, the cursor *pages in*
``max_page_size`` (200) messages from the store, but only if it has space,
and it stops early once the broker's memory reaches 90%.
Without space it stays empty and logs "cursor blocked, no space available to
page in messages": a consumer waits while its messages sit on disk, which is
what starves queue A in the starving-consumers case when other queues hold the broker's memory.
After a restart every recovered message is store-only and nothing is read
until a consumer needs it.
"""

from __future__ import annotations

import logging
import operator
from array import array
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from minibroker.destinations.paged import PagedRef, StoreRun
from minibroker.destinations.seqfifo import SeqFifo
from minibroker.durability.persistence import StoreRef
from storage import StoreFull
from storage.spill import SpillFile

if TYPE_CHECKING:
    from minibroker.config import PolicyEntry
    from minibroker.destinations.destination import FifoPending, PriorityPending
    from minibroker.destinations.ports import DestinationEvents, DestinationStore
    from minibroker.destinations.usage import Usage
    from minibroker.protocol.message import Message

__all__ = ["QueueCursor", "StoreIndex"]

log = logging.getLogger("minibroker.cursor")


class CursorOwner(Protocol):
    """The queue (``queue.Queue``) as its cursor sees it: where paged-in messages
    go (``pending``), what charges them (``hold_page``), the memory they are
    charged to, the store that reads them and whom to tell of a page-in."""

    address: str
    policy: "PolicyEntry"
    memory: "Usage"
    root_memory: "Usage"
    events: "DestinationEvents"
    stored: "DestinationStore"
    pending: "FifoPending | PriorityPending"

    def hold_page(self, messages: list[Message], size: int) -> None: ...

    def leaves_at_once(self) -> bool:
        """A message given to this queue's consumers leaves at once (auto ack)."""
        ...


_BY_SEQ = operator.attrgetter("seq")
#: A page-in stops once broker memory reaches this (AbstractStoreCursor.canRecoveryNextMessage).
_RECOVERY_LIMIT_PERCENT = 90
#: Message priorities (JMS): 0..9, 4 by default.
_PRIORITIES = 10
_DEFAULT_PRIORITY = 4
#: ``PagedRef(*fields)`` without the named tuple's Python-level ``__new__`` (a page-in makes many).
_new = tuple.__new__


class StoreIndex:
    """Store-only references in dispatch order: FIFO, or priority then FIFO.

    Theory of operation: a store-only message costs a few bytes here, not an
    object. Each FIFO (one, or one per priority 0..9, highest first) holds
    three numbers a message, four bytes each while they fit, mostly in the
    broker's spill file (``seqfifo.py``): the broker seq, the journal seq and
    the expiry (0: none; a backlog of messages with a time to live is common,
    so it is not kept aside). The queue's journal and key are the same for all
    its messages (``_home``), so a ``StoreRef`` is made only when a
    ``PagedRef`` is asked for (a page-in, a browse, an expiry). A spilled
    non-persistent message (the ``file`` cursor) is a number too: its temp
    store seq t, kept as journal seq ``-(t + 1)`` (negative numbers widen that
    FIFO's array). What is rarely not the default lives in sparse collections
    by broker seq: ``redelivered`` (messages recovered after a delivery), and
    ``_objects``, for a ``StoreRef`` of another journal than the home one; its
    journal seq is -1. For the expiry sweep the index counts the messages that
    can expire and keeps a lower bound of their soonest expiry (``expired``).
    """

    def __init__(self, prioritized: bool, spill: Callable[[], SpillFile] | None = None) -> None:
        """``spill``: the file for the FIFOs' chunks that are neither first nor last (``seqfifo.py``)."""
        self.prioritized = prioritized
        self._fifos = [SeqFifo(spill) for _ in range(_PRIORITIES if prioritized else 1)]
        #: (journal, key) of the queue's StoreRefs: set by the first one added.
        self._home: tuple[Any, str] | None = None
        #: Messages here with an expiry, and a bound no later than the soonest of them.
        self.expiring = 0
        self._soonest = 0
        self.redelivered: set[int] = set()
        self._objects: dict[int, Any] = {}
        #: Spilled messages here (temp store entries).
        self.temps = 0

    def __len__(self) -> int:
        return sum(len(f) for f in self._fifos)

    def nbytes(self) -> int:
        """Bytes its arrays in memory take (the sparse dicts, rarely filled, are left out)."""
        return sum(f.nbytes() for f in self._fifos)

    def __bool__(self) -> bool:
        return any(self._fifos)

    def _ordered(self) -> list[tuple[int, SeqFifo]]:
        """(priority, FIFO) in dispatch order, the empty ones left out."""
        if not self.prioritized:
            return [(_DEFAULT_PRIORITY, self._fifos[0])]
        return [(p, self._fifos[p]) for p in range(_PRIORITIES - 1, -1, -1) if self._fifos[p]]

    def __iter__(self) -> Iterator[PagedRef]:
        for priority, fifo in self._ordered():
            for seqs, refs, expires in fifo.runs():
                yield from self._paged(seqs, refs, expires, priority)

    def _paged(self, seqs: array[int], refs: array[int], expires: array[int], priority: int) -> list[PagedRef]:
        """``PagedRef``s of (broker seq, journal seq, expiry) entries: a ``StoreRef`` for each."""
        journal, key = self._home if self._home is not None else (None, "")
        redelivered, objects = self.redelivered, self._objects
        if not (redelivered or objects or self.temps):  # the usual case, made quickly
            return [
                _new(PagedRef, (StoreRef(journal, ref, key), seq, priority, False, expiry))  # type: ignore[arg-type]
                for seq, ref, expiry in zip(seqs, refs, expires, strict=False)
            ]
        return [
            _new(
                PagedRef,
                (
                    StoreRef(journal, ref, key)  # type: ignore[arg-type]
                    if ref >= 0
                    else objects[seq]
                    if ref == -1
                    else -ref - 1,
                    seq,
                    priority,
                    seq in redelivered,
                    expiry,
                ),
            )
            for seq, ref, expiry in zip(seqs, refs, expires, strict=False)
        ]

    def add(
        self, ref: Any, seq: int, priority: int = _DEFAULT_PRIORITY, redelivered: bool = False, expires: int = 0
    ) -> None:
        """A store-only message: ``ref`` a ``StoreRef``, or a temp store entry's seq (an int)."""
        journal_seq = -1
        if type(ref) is StoreRef:
            if self._home is None:
                self._home = (ref.journal, ref.key)
            if ref.journal is self._home[0] and ref.key == self._home[1]:
                journal_seq = ref.seq
            else:
                self._objects[seq] = ref
        else:
            assert ref >= 1, ref  # temp store seqs start at 1: -(ref + 1) stays clear of the -1 of _objects
            journal_seq = -ref - 1
            self.temps += 1
        if redelivered:
            self.redelivered.add(seq)
        if expires:
            self._soonest = min(self._soonest, expires) if self.expiring else expires
            self.expiring += 1
        fifo = self._fifos[min(max(priority, 0), _PRIORITIES - 1) if self.prioritized else 0]
        fifo.add(seq, journal_seq, expires)

    def first(self, count: int) -> list[PagedRef]:
        """The next ``count`` references in dispatch order, left in place."""
        out: list[PagedRef] = []
        for priority, fifo in self._ordered():
            if len(out) >= count:
                break
            out += self._paged(*fifo.slice(count - len(out)), priority)
        return out

    def first_runs(self, count: int) -> list[StoreRun] | None:
        """The next ``count`` references in dispatch order as runs of numbers, one
        per priority, left in place: a page-in's fast path, which makes no
        ``PagedRef``. None when a temp store entry or a record of another
        journal is among the store-only ones (``first`` then)."""
        if self._objects or self.temps:
            return None
        if self._home is None:  # nothing was ever added
            return []
        journal, key = self._home
        runs: list[StoreRun] = []
        for priority, fifo in self._ordered():
            if count <= 0:
                break
            seqs, journal_seqs, _ = fifo.slice(count)
            runs.append(StoreRun(journal, key, priority, seqs, journal_seqs))
            count -= len(seqs)
        return runs

    def drop(self, count: int) -> None:
        """Remove the first ``count`` references (those ``first(count)`` returns)."""
        for _, fifo in self._ordered():
            if count <= 0:
                break
            count -= self._drop_head(fifo, count)

    def _drop_head(self, fifo: SeqFifo, count: int) -> int:
        """Remove ``fifo``'s first ``count`` references, keeping the counts and the
        sparse collections in step; returns how many there were."""
        if self.expiring or self.redelivered or self._objects or self.temps:  # rarely: read the entries only then
            seqs, refs, expires = fifo.slice(count)
            self.expiring -= len(expires) - expires.count(0)
            if self.temps:
                self.temps -= sum(1 for ref in refs if ref < -1)
            if self.redelivered or self._objects:
                for seq in seqs:
                    self._forget(seq)
        return fifo.drop(count)

    def _forget(self, seq: int) -> None:
        self.redelivered.discard(seq)
        self._objects.pop(seq, None)

    def clear(self) -> None:
        """Remove every reference (iterate first to see them: ``Queue.purge``)."""
        for fifo in self._fifos:
            fifo.release()
        self.expiring = self.temps = 0
        self.redelivered.clear()
        self._objects.clear()

    def remove_where(self, predicate: Callable[[PagedRef], bool]) -> list[PagedRef]:
        """Remove the references ``predicate`` accepts; returns them in dispatch order."""
        removed = [r for r in self if predicate(r)]
        if len(removed) == len(self):
            self.clear()
        elif removed:
            gone = {r.seq for r in removed}
            self._fifos = [f.without(gone) if f else f for f in self._fifos]
            self.expiring -= sum(1 for r in removed if r.expires)
            self.temps -= sum(1 for r in removed if type(r.ref) is int)
            for seq in gone:
                self._forget(seq)
        return removed

    def expired(self, now_ms: int) -> list[PagedRef]:
        """Remove and return the references whose message expired by ``now_ms``.

        Theory of operation: only when one may have: the soonest expiry is kept
        as a bound (a page-in that takes it leaves the bound early), and a sweep
        that finds nothing due moves the bound to the soonest expiry left. A
        sweep reads only the expiry column. Where the due messages are the head
        of their FIFO (one time to live for all: the usual case) they are
        dropped from it; due messages between others (mixed times to live) are
        removed by rebuilding the FIFOs (``remove_where``).
        """
        if not self.expiring or now_ms < self._soonest:
            return []
        soonest = 0
        heads: list[tuple[int, SeqFifo, int]] = []  # (priority, FIFO, how many due at its head)
        scattered = False
        for priority, fifo in self._ordered():
            position = head = 0
            for _, _, expires in fifo.runs():
                for expiry in expires:
                    if expiry > now_ms:
                        soonest = min(soonest, expiry) if soonest else expiry
                    elif expiry:
                        if position == head:
                            head += 1
                        else:
                            scattered = True
                    position += 1
            if head:
                heads.append((priority, fifo, head))
        if scattered:
            removed = self.remove_where(lambda r: 0 < r.expires <= now_ms)
        else:
            removed = []
            for priority, fifo, head in heads:
                removed += self._paged(*fifo.slice(head), priority)
                self._drop_head(fifo, head)
        self._soonest = soonest
        return removed


class QueueCursor:
    """The store cursor of one queue (see the module docstring)."""

    def __init__(self, queue: CursorOwner) -> None:
        self.queue = queue
        #: The queue's policy and memory, which it keeps for its life: read for every message.
        self.policy = queue.policy
        self.memory = queue.memory
        self.store_only = StoreIndex(queue.policy.prioritized_messages, queue.stored.index_spill)
        self.cache_enabled = True
        #: True while a page-in is refused for lack of space.
        self.blocked = False
        #: A spill found the disk full (logged once until one succeeds).
        self.spill_refused = False
        self.paged_in = 0

    @property
    def cached(self) -> int:
        return len(self.queue.pending)

    def has_space(self) -> bool:
        policy = self.policy
        return self.memory.has_space(policy.cursor_memory_high_water_mark, policy.space_check)

    def add(self, message: Message) -> bool:
        """Take a new message: True if the queue caches it (``Queue.accept`` holds it in
        memory and appends it to ``pending``), False if it is store-only (journalled, or
        spilled to the temp store)."""
        queue = self.queue
        if message.store_ref is not None:
            if not (self.cache_enabled and self.has_space()):
                self.cache_enabled = False
                self.store_only.add(message.store_ref, message.seq, message.priority, False, message.expires)
                return False
        elif self.policy.pending_cursor == "file" and not (
            self.cache_enabled and (self.has_space() or queue.leaves_at_once())
        ):
            # A non-persistent message past the mark spills to the temp store (a file cursor),
            # unless a consumer takes it at once: a backlog spills, a message on its way out
            # does not (it would wait for memory to page it back in). On a full disk it stays
            # in memory, where memory limits govern it (if nothing is spilled before it: order
            # first, else the SEND is refused).
            try:
                entry = queue.stored.spill(queue, message)
            except StoreFull as exc:
                if self.store_only:
                    raise
                if not self.spill_refused:
                    log.warning("%s: %s; messages stay in memory", queue.address, exc)
                self.spill_refused = True
            else:
                self.spill_refused = False
                self.cache_enabled = False
                self.store_only.add(entry, message.seq, message.priority, message.redeliveries > 0, message.expires)
                return False
        return True

    @property
    def spilled(self) -> int:
        """Store-only messages that are in the temp store (non-persistent)."""
        return self.store_only.temps

    def add_recovered(self, ref: StoreRef, seq: int, priority: int, redelivered: bool, expires: int) -> None:
        """A message found in the journal at start: store-only until needed."""
        self.cache_enabled = False
        self.store_only.add(ref, seq, priority, redelivered, expires)

    def can_page_in(self) -> bool:
        return bool(self.store_only) and self.has_space()

    def page_in(self) -> bool:
        """Load up to ``max_page_size`` store-only messages; False if none could be."""
        queue = self.queue
        if not self.store_only:
            return False
        if not self.has_space():
            if not self.blocked:
                self.blocked = True
                log.warning(
                    "%s: cursor blocked, no space available to page in messages; destination memory %d%%, broker memory %d%% "
                    "(high-water mark %d%%, space check %s)",
                    queue.address,
                    queue.memory.percent,
                    queue.root_memory.percent,
                    queue.policy.cursor_memory_high_water_mark,
                    queue.policy.space_check,
                )
                queue.events.page_in_blocked(queue)
            return False
        self.blocked = False
        count = min(queue.policy.max_page_size, len(self.store_only))
        batch: list[Message] = []
        root = queue.root_memory
        # ActiveMQ's canRecoveryNextMessage: stop once the broker is at 90% (``percent`` is
        # ``usage * 100 // limit``): with the page's messages charged at once below, count here.
        room = -(-_RECOVERY_LIMIT_PERCENT * root.limit // 100) - root.usage if root.limit else None
        taken = 0
        runs = self.store_only.first_runs(count)
        if runs is not None:  # the usual case: numbers in, messages out, one read per run
            for run in runs:
                budget = None if room is None else max(room - taken, 0 if batch else 1)
                if budget == 0:
                    break
                loaded, size = queue.stored.load_run(queue, run, budget)
                batch += loaded
                taken += size
            redelivered = self.store_only.redelivered
            if redelivered:
                for message in batch:
                    if message.seq in redelivered:
                        message.redeliveries = 1
        else:
            refs = self.store_only.first(count)
            for paged, payload in zip(
                refs, queue.stored.read_ahead(refs), strict=False
            ):  # one read per run of neighbours
                if batch and room is not None and taken >= room:
                    break
                message = queue.stored.load_message(queue, paged, payload)
                queue.stored.took(paged)
                taken += message.size
                batch.append(message)
        queue.hold_page(batch, taken)
        count = len(batch)
        self.store_only.drop(count)
        # A FIFO page comes out in seq order; a prioritized one is by priority first.
        queue.pending.push_front(sorted(batch, key=_BY_SEQ) if self.store_only.prioritized else batch)
        self.paged_in += count
        if not self.store_only and self.has_space():
            self.cache_enabled = True
        queue.events.paged_in(queue, count)
        return True

    def statistics(self) -> dict[str, Any]:
        return {
            "cachedCount": self.cached,
            "storeOnlyCount": len(self.store_only),
            "cacheEnabled": self.cache_enabled,
            "pageInBlocked": self.blocked,
            "pagedInCount": self.paged_in,
            "tempCount": self.store_only.temps,
        }
