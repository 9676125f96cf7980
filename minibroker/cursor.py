"""The queue store cursor: ActiveMQ's ``StoreQueueCursor``, the heart of seed 000.

Theory of operation
-------------------
A queue's undelivered messages live in two places:

- the *cache*: messages in memory, charged to the queue's memory usage, ready
  to dispatch (``queue.pending``). Non-persistent messages always live here
  (a VM cursor; the temp-store issue adds swapping).
- the *store*: persistent messages that are only on disk (``store_only``), in
  dispatch order, as small references (record location, seq, priority).

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
what starves queue A in seed 000 when other queues hold the broker's memory.
After a restart every recovered message is store-only and nothing is read
until a consumer needs it.
"""
from __future__ import annotations

import itertools
import logging
from collections import deque
from typing import TYPE_CHECKING, Any, Iterator, NamedTuple

from sortedcontainers import SortedKeyList

if TYPE_CHECKING:
    from .queue import Queue
    from .message import Message
    from .persistence import StoreRef

__all__ = ["QueueCursor", "PagedRef"]

log = logging.getLogger("minibroker.cursor")

#: A page-in stops once broker memory reaches this (AbstractStoreCursor.canRecoveryNextMessage).
_RECOVERY_LIMIT_PERCENT = 90


class PagedRef(NamedTuple):
    """A store-only message: where it is and what dispatch order needs."""

    ref: "StoreRef"
    seq: int
    priority: int
    redelivered: bool
    expires: int


class StoreIndex:
    """Store-only references in dispatch order: FIFO, or priority then FIFO."""

    def __init__(self, prioritized: bool) -> None:
        self._fifo: deque[PagedRef] | None = None if prioritized else deque()
        self._sorted: SortedKeyList | None = SortedKeyList(key=lambda r: (-r.priority, r.seq)) if prioritized else None

    def __len__(self) -> int:
        return len(self._fifo) if self._fifo is not None else len(self._sorted)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[PagedRef]:
        return iter(self._fifo if self._fifo is not None else self._sorted)  # type: ignore[arg-type]

    def add(self, item: PagedRef) -> None:
        if self._fifo is not None:
            if self._fifo and item.seq < self._fifo[-1].seq:  # recovery out of log order
                items = sorted([*self._fifo, item], key=lambda r: r.seq)
                self._fifo = deque(items)
            else:
                self._fifo.append(item)
        else:
            assert self._sorted is not None
            self._sorted.add(item)

    def first(self, count: int) -> list[PagedRef]:
        """The next ``count`` references in dispatch order, left in place."""
        return list(itertools.islice(iter(self), count))

    def pop_first(self) -> PagedRef:
        if self._fifo is not None:
            return self._fifo.popleft()
        assert self._sorted is not None
        return self._sorted.pop(0)

    def remove_where(self, predicate: Any) -> list[PagedRef]:
        kept = [r for r in self if not predicate(r)]
        removed = [r for r in self if predicate(r)]
        if self._fifo is not None:
            self._fifo = deque(kept)
        else:
            assert self._sorted is not None
            self._sorted = SortedKeyList(kept, key=self._sorted.key)
        return removed


class QueueCursor:
    """The store cursor of one queue (see the module docstring)."""

    def __init__(self, queue: "Queue") -> None:
        self.queue = queue
        self.store_only = StoreIndex(queue.policy.prioritized_messages)
        self.cache_enabled = True
        #: True while a page-in is refused for lack of space.
        self.blocked = False
        self.paged_in = 0

    @property
    def cached(self) -> int:
        return len(self.queue.pending)

    def has_space(self) -> bool:
        policy = self.queue.policy
        return self.queue.memory.has_space(policy.cursor_memory_high_water_mark, policy.space_check)

    def add(self, message: "Message") -> bool:
        """Take a new message; True if it is cached, False if store-only."""
        queue = self.queue
        if message.store_ref is not None:
            if not (self.cache_enabled and self.has_space()):
                self.cache_enabled = False
                self.store_only.add(PagedRef(message.store_ref, message.seq, message.priority, False, message.expires))
                return False
        elif queue.policy.pending_cursor == "file" and not (self.cache_enabled and self.has_space()):
            # A non-persistent message past the mark spills to the temp store (a file cursor).
            self.cache_enabled = False
            handle = queue.broker.spill(queue, message)
            self.store_only.add(PagedRef(handle, message.seq, message.priority, message.redeliveries > 0, message.expires))
            return False
        queue.hold(message)
        queue.pending.append(message)
        return True

    @property
    def spilled(self) -> int:
        """Store-only messages that are in the temp store (non-persistent)."""
        return sum(1 for r in self.store_only if not hasattr(r.ref, "journal"))

    def add_recovered(self, item: PagedRef) -> None:
        """A message found in the journal at start: store-only until needed."""
        self.cache_enabled = False
        self.store_only.add(item)

    def can_page_in(self) -> bool:
        return bool(self.store_only) and self.has_space()

    def page_in(self) -> bool:
        """Load up to ``max_page_size`` store-only messages; False if none could be."""
        queue = self.queue
        if not self.store_only:
            return False
        broker = queue.broker
        if not self.has_space():
            if not self.blocked:
                self.blocked = True
                log.warning(
                    "%s: cursor blocked, no space available to page in messages; destination memory %d%%, broker memory %d%% "
                    "(high-water mark %d%%, space check %s)",
                    queue.address, queue.memory.percent, broker.memory.percent,
                    queue.policy.cursor_memory_high_water_mark, queue.policy.space_check,
                )
                broker.page_in_blocked(queue)
            return False
        self.blocked = False
        count = min(queue.policy.max_page_size, len(self.store_only))
        batch = []
        root = broker.memory
        ahead = broker.read_ahead(self.store_only.first(count))  # one read per run of neighbours
        for _ in range(count):
            # ActiveMQ's canRecoveryNextMessage: stop once the broker is at 90%.
            if batch and root.limit and root.percent >= _RECOVERY_LIMIT_PERCENT:
                break
            paged = self.store_only.pop_first()
            message = broker.load_message(queue, paged, ahead.get(id(paged.ref)))
            queue.hold(message)
            batch.append(message)
        count = len(batch)
        queue.pending.push_front(sorted(batch, key=lambda m: m.seq))
        self.paged_in += count
        if not self.store_only and self.has_space():
            self.cache_enabled = True
        broker.paged_in(queue, count)
        return True

    def statistics(self) -> dict[str, Any]:
        return {
            "cachedCount": self.cached,
            "storeOnlyCount": len(self.store_only),
            "cacheEnabled": self.cache_enabled,
            "pageInBlocked": self.blocked,
            "pagedInCount": self.paged_in,
            "tempCount": self.spilled if self.queue.policy.pending_cursor == "file" else 0,
        }
