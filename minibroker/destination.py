"""Destinations: queues (competing consumers) and topics (every subscriber).

Theory of operation
-------------------
A **queue** keeps its undelivered messages in a pending list ordered by
arrival (``seq``). ``dispatch()`` walks that list from the head and gives
each message to a consumer that has capacity and whose selector accepts it.
Consumers are grouped by priority (``activemq.priority``): the highest group
is served first and a lower group only gets what the higher ones have no room
for; within a group the choice rotates (round-robin). While an exclusive
consumer exists (``activemq.exclusive``), it alone receives. A message no
consumer accepts stays where it is, for a later consumer: the walk looks at
most ``max_page_size`` such skipped messages per call, as ActiveMQ pages in
200 at a time. Messages returned by NACK, unsubscribe or disconnect go back to
the head, in their original order, flagged ``redelivered``.

A **topic** has no backlog of its own: ``publish`` hands the message to every
current subscription in turn, and each subscription delivers it at once or
keeps it in its own pending list until the consumer has capacity.

Both call back into the broker (``self.broker``) only for the clock, for
accounting and for the trace; they never see sessions' sockets.
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING, Any, Iterator

from .cursor import QueueCursor
from .usage import Usage

if TYPE_CHECKING:
    from .broker import Broker
    from .config import PolicyEntry
    from .message import Message
    from .subscription import Subscription

__all__ = ["Destination", "Queue", "Topic", "DurableState", "FifoPending", "PriorityPending", "parse_address", "DESTINATION_KINDS"]

#: Address prefix -> destination kind.
DESTINATION_KINDS = {"/queue/": "queue", "/topic/": "topic"}


def parse_address(address: str) -> tuple[str, str] | None:
    """``/queue/a.b`` -> ``("queue", "a.b")``; None when the prefix is unknown."""
    for prefix, kind in DESTINATION_KINDS.items():
        if address.startswith(prefix) and len(address) > len(prefix):
            return kind, address[len(prefix) :]
    return None


class FifoPending:
    """Pending messages in arrival order (a VM cursor)."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: deque["Message"] = deque()

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator["Message"]:
        return iter(self._items)

    def append(self, message: "Message") -> None:
        self._items.append(message)

    def popleft(self) -> "Message":
        return self._items.popleft()

    def push_front(self, messages: list["Message"]) -> None:
        """Put ``messages`` (sorted by seq) back, keeping the whole list in seq order."""
        if not messages:
            return
        items = self._items
        if not items or messages[-1].seq < items[0].seq:
            items.extendleft(reversed(messages))
        else:
            self._items = deque(heapq.merge(messages, items, key=lambda m: m.seq))

    def remove_where(self, predicate: Any) -> list["Message"]:
        """Remove and return every message for which ``predicate`` is true."""
        kept: deque["Message"] = deque()
        removed = []
        for m in self._items:
            (removed if predicate(m) else kept).append(m)
        self._items = kept
        return removed


class PriorityPending:
    """Pending messages by priority, highest first, FIFO within a priority.

    ActiveMQ's ``PrioritizedPendingList``: ten buckets (0-9); used when the
    destination policy sets ``prioritized_messages``.
    """

    __slots__ = ("_buckets", "_count")

    def __init__(self) -> None:
        self._buckets: list[FifoPending] = [FifoPending() for _ in range(10)]
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator["Message"]:
        for bucket in reversed(self._buckets):
            yield from bucket

    def append(self, message: "Message") -> None:
        self._buckets[message.priority].append(message)
        self._count += 1

    def popleft(self) -> "Message":
        for bucket in reversed(self._buckets):
            if bucket:
                self._count -= 1
                return bucket.popleft()
        raise IndexError("pop from an empty pending list")

    def push_front(self, messages: list["Message"]) -> None:
        by_priority: dict[int, list["Message"]] = {}
        for m in messages:
            by_priority.setdefault(m.priority, []).append(m)
        for priority, group in by_priority.items():
            self._buckets[priority].push_front(group)
        self._count += len(messages)

    def remove_where(self, predicate: Any) -> list["Message"]:
        removed: list["Message"] = []
        for bucket in self._buckets:
            removed += bucket.remove_where(predicate)
        self._count -= len(removed)
        return removed


class Destination:
    """What queues and topics share: identity, policy, statistics."""

    kind = ""

    def __init__(self, broker: "Broker", name: str, policy: "PolicyEntry", *, address: str = "", owner: int | None = None) -> None:
        self.broker = broker
        #: Physical name without prefix, e.g. ``orders.us``.
        self.name = name
        #: Full address, e.g. ``/queue/orders.us``.
        self.address = address or f"/{self.kind}/{name}"
        self.policy = policy
        #: For a temporary destination, the session that owns it.
        self.owner = owner
        #: True for a dead letter queue (nothing is dead-lettered out of one).
        self.is_dlq = False
        root = broker.memory
        #: This destination's memory: a child of the broker's (seed 000's heart).
        self.memory = Usage(self.address, policy.memory_limit or root.limit, parent=root)
        self.enqueued = 0
        self.dequeued = 0
        self.dispatched = 0
        self.expired = 0

    # -- memory: a message is charged once, while anything here holds it
    def hold(self, message: "Message") -> None:
        if message.refs == 0:
            self.memory.increase(message.size)
        message.refs += 1

    # -- overridden by Queue and Topic
    def add_subscription(self, sub: "Subscription") -> None:
        raise NotImplementedError

    def remove_subscription(self, sub: "Subscription") -> None:
        raise NotImplementedError

    def accept(self, message: "Message") -> None:
        """Take a newly sent message."""
        raise NotImplementedError

    def dispatch_to(self, sub: "Subscription") -> None:
        """``sub`` has capacity again: give it what it can take."""
        raise NotImplementedError

    def acknowledge(self, sub: "Subscription", messages: list["Message"]) -> None:
        """``sub``'s consumer acknowledged ``messages``."""
        raise NotImplementedError

    def redeliver(self, sub: "Subscription", messages: list["Message"], cause: str) -> None:
        """``sub``'s consumer refused ``messages`` (``cause``: "nack" or
        "rollback"): deliver them again, or dead-letter those that have had
        too many deliveries."""
        raise NotImplementedError

    def _survivors(self, messages: list["Message"], cause: str, count: Any) -> list["Message"]:
        """Count one more delivery for each message; dead-letter those over the limit."""
        policy = self.policy
        limit = policy.maximum_redeliveries
        kept = []
        for m in sorted(messages, key=lambda m: m.seq):
            n = count(m)
            if cause == "nack" and policy.dead_letter_on_nack:
                self.broker.dead_letter(self, m, f"NACK (delivery {n})")
            elif limit >= 0 and n > limit:
                self.broker.dead_letter(self, m, f"redelivered {n} times, more than maximum_redeliveries={limit} ({cause})")
            else:
                kept.append(m)
        return kept

    @property
    def subscriptions(self) -> list["Subscription"]:
        raise NotImplementedError

    def on_delivered(self, sub: "Subscription", message: "Message") -> None:
        """A MESSAGE frame for ``message`` was written to ``sub``'s consumer."""
        if self.broker.trace.enabled:
            self.broker.delivered(sub, message)
        if sub.browser:
            return
        self.dispatched += 1
        if not sub.auto and message.store_ref is not None:
            self.broker.mark_delivered(message)
        if sub.auto:
            self.dequeued += 1
            self.broker.message_consumed(self, message)

    def size(self) -> int:
        """Messages held (pending plus delivered-unacknowledged)."""
        raise NotImplementedError

    def cursor_statistics(self) -> dict[str, Any]:
        """Where the pending messages are: cached in memory or only in the store."""
        return {"cachedCount": self.size(), "storeOnlyCount": 0}

    def release(self, message: "Message") -> None:
        message.refs -= 1
        if message.refs == 0:
            self.memory.decrease(message.size)
            self.broker.space_freed()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.address}>"


class Queue(Destination):
    """Point-to-point: each message goes to exactly one consumer."""

    kind = "queue"

    def __init__(self, broker: "Broker", name: str, policy: "PolicyEntry", **kw: Any) -> None:
        super().__init__(broker, name, policy, **kw)
        #: The cache: undelivered messages in memory, in dispatch order.
        self.pending: FifoPending | PriorityPending = PriorityPending() if policy.prioritized_messages else FifoPending()
        #: The store cursor: what is cached, what is only on disk, page-in.
        self.cursor = QueueCursor(self)
        self._sweep_scheduled = False
        self.consumers: list["Subscription"] = []
        self.exclusive_owner: "Subscription | None" = None
        # Consumers grouped by priority, highest first; rotation index per group.
        self._groups: list[list["Subscription"]] = []
        self._rotation: list[int] = []
        self._any_selector = False
        self._dispatching = False

    @property
    def subscriptions(self) -> list["Subscription"]:
        return self.consumers

    def size(self) -> int:
        return len(self.pending) + len(self.cursor.store_only) + sum(len(s.dispatched) for s in self.consumers)

    def cursor_statistics(self) -> dict[str, Any]:
        return self.cursor.statistics()

    # -- consumers
    def add_subscription(self, sub: "Subscription") -> None:
        self.consumers.append(sub)
        if sub.exclusive:
            owner = self.exclusive_owner
            if owner is None or sub.priority > owner.priority:
                self.exclusive_owner = sub
        self._regroup()
        self.dispatch()

    def remove_subscription(self, sub: "Subscription") -> None:
        """Detach ``sub``; its unacknowledged messages return to the head."""
        self.consumers.remove(sub)
        if self.exclusive_owner is sub:
            exclusives = [c for c in self.consumers if c.exclusive]
            # The highest-priority remaining exclusive consumer takes over.
            self.exclusive_owner = max(exclusives, key=lambda c: c.priority, default=None)
        self._regroup()
        returned = sub.take_all_dispatched()
        tracing = self.broker.trace.enabled
        for m in returned:
            m.redeliveries += 1  # as ActiveMQ does for messages of a closed consumer
            if tracing:
                self.broker.redelivering(self, m, sub)
        self.pending.push_front(sorted(returned, key=lambda m: m.seq))
        self.dispatch()

    def _regroup(self) -> None:
        if self.exclusive_owner is not None:
            eligible = [self.exclusive_owner]
        else:
            eligible = self.consumers
        by_priority: dict[int, list["Subscription"]] = {}
        for c in eligible:
            by_priority.setdefault(c.priority, []).append(c)
        self._groups = [by_priority[p] for p in sorted(by_priority, reverse=True)]
        self._rotation = [0] * len(self._groups)
        self._any_selector = any(c.selector is not None or c.no_local for c in eligible)

    # -- messages in
    def accept(self, message: "Message") -> None:
        self.enqueued += 1
        cached = self.cursor.add(message)
        self.broker.message_enqueued(self, message, cached)
        if message.expires and not self._sweep_scheduled and self.policy.expire_messages_period:
            self._schedule_sweep()
        if self.consumers:
            self.dispatch()

    def dispatch_to(self, sub: "Subscription") -> None:
        if sub.browser:
            self._browse(sub)
        else:
            self.dispatch()

    # -- expiry: ActiveMQ sweeps every expireMessagesPeriod
    def _schedule_sweep(self) -> None:
        self._sweep_scheduled = True
        period = self.policy.expire_messages_period / 1000
        self.broker.timers.call_at(self.broker.clock.now() + period, self._sweep)

    def _sweep(self) -> None:
        self._sweep_scheduled = False
        now_ms = self.broker.clock.wall_ms()
        for message in self.pending.remove_where(lambda m: m.is_expired(now_ms)):
            self._expire(message)
        for ref in self.cursor.store_only.remove_where(lambda r: 0 < r.expires <= now_ms):
            self._expire(self.broker.load_message(self, ref))
        if any(m.expires for m in self.pending) or any(r.expires for r in self.cursor.store_only):
            self._schedule_sweep()

    # -- browsing: a snapshot delivered without consuming, then browser:end
    def browse_snapshot(self) -> list["Message"]:
        """The pending messages, in dispatch order, for a new browser (store-only
        ones are read from disk for it, without entering the cache)."""
        now_ms = self.broker.clock.wall_ms()
        stored = [self.broker.load_message(self, r) for r in self.cursor.store_only]
        return [m for m in [*self.pending, *stored] if not m.is_expired(now_ms)]

    def _browse(self, sub: "Subscription") -> None:
        pending = sub.pending
        while pending and sub.has_capacity():
            message = pending.popleft()
            if sub.accepts(message):
                sub.deliver(message)
        if not pending and not sub.browse_done and sub.session.can_write:
            sub.browse_done = True
            self.broker.end_of_browse(sub)

    # -- dispatch
    def dispatch(self) -> None:
        """Give pending messages to consumers with capacity, in order, paging
        in from the store whenever the cache runs empty."""
        if self._dispatching or not self._groups:
            return
        cursor = self.cursor
        if not self.pending and not cursor.store_only:
            return
        self._dispatching = True
        try:
            while True:
                if not self.pending and not (self._someone_has_capacity() and cursor.page_in()):
                    break
                if len(self._groups) == 1 and len(self._groups[0]) == 1 and not self._any_selector:
                    self._dispatch_single(self._groups[0][0])
                else:
                    self._dispatch_general()
                if self.pending or not cursor.store_only or not self._someone_has_capacity():
                    break
        finally:
            self._dispatching = False

    def _dispatch_single(self, sub: "Subscription") -> None:
        pending = self.pending
        now_ms = self.broker.clock.wall_ms()
        while pending and sub.has_capacity():
            message = pending.popleft()
            if message.expires and message.is_expired(now_ms):
                self._expire(message)
                continue
            sub.deliver(message)

    def _dispatch_general(self) -> None:
        pending = self.pending
        now_ms = self.broker.clock.wall_ms()
        skipped: list["Message"] = []
        limit = self.broker.max_page_size(self)
        while pending and self._someone_has_capacity():
            message = pending.popleft()
            if message.expires and message.is_expired(now_ms):
                self._expire(message)
                continue
            target = self._choose(message)
            if target is None:
                skipped.append(message)
                if len(skipped) >= limit:
                    break
                continue
            target.deliver(message)
        pending.push_front(skipped)

    def _someone_has_capacity(self) -> bool:
        return any(c.has_capacity() for group in self._groups for c in group)

    def _choose(self, message: "Message") -> "Subscription | None":
        for g, group in enumerate(self._groups):
            n = len(group)
            start = self._rotation[g]
            for k in range(n):
                sub = group[(start + k) % n]
                if sub.has_capacity() and sub.accepts(message):
                    self._rotation[g] = (start + k + 1) % n
                    return sub
        return None

    def _expire(self, message: "Message") -> None:
        self.expired += 1
        self.broker.message_expired(self, message)

    # -- acknowledgements
    def acknowledge(self, sub: "Subscription", messages: list["Message"]) -> None:
        for m in messages:
            self.dequeued += 1
            sub.acked_count += 1
            self.broker.message_consumed(self, m)
        self.dispatch()

    def redeliver(self, sub: "Subscription", messages: list["Message"], cause: str) -> None:
        def count(m: "Message") -> int:
            m.redeliveries += 1
            return m.redeliveries

        kept = self._survivors(messages, cause, count)
        if self.broker.trace.enabled:
            for m in kept:
                self.broker.redelivering(self, m, sub)
        self.pending.push_front(kept)
        self.dispatch()

    def purge(self) -> int:
        """Drop every pending message, cached or store-only; returns how many."""
        dropped = self.pending.remove_where(lambda m: True)
        stored = self.cursor.store_only.remove_where(lambda r: True)
        for ref in stored:
            self.broker.discard_stored(ref.ref)
        for m in dropped:
            self.broker.message_consumed(self, m)
        self.dequeued += len(dropped) + len(stored)
        return len(dropped) + len(stored)


class Topic(Destination):
    """Publish-subscribe: every current subscription gets every message."""

    kind = "topic"

    def __init__(self, broker: "Broker", name: str, policy: "PolicyEntry", **kw: Any) -> None:
        super().__init__(broker, name, policy, **kw)
        self.subs: list["Subscription"] = []
        #: Durable subscriptions by (client-id, subscription name), online or not.
        self.durables: dict[tuple[str, str], DurableState] = {}

    @property
    def subscriptions(self) -> list["Subscription"]:
        return self.subs

    def size(self) -> int:
        online = sum(len(s.pending) + len(s.dispatched) for s in self.subs)
        return online + sum(len(d.pending) for d in self.durables.values() if d.active is None)

    def add_subscription(self, sub: "Subscription") -> None:
        self.subs.append(sub)

    def remove_subscription(self, sub: "Subscription") -> None:
        """Detach ``sub``. A non-durable subscription's messages are dropped; a
        durable one keeps them (unacknowledged ones back at the head) for its
        next connection."""
        self.subs.remove(sub)
        returned = sub.take_all_dispatched()
        if sub.durable is not None:
            for m in returned:
                sub.redelivered[m.seq] = sub.redelivered.get(m.seq, 0) + 1
            sub.pending.extendleft(reversed(sorted(returned, key=lambda m: m.seq)))
            sub.durable.active = None
            return
        dropped = list(sub.pending) + returned
        sub.pending.clear()
        for m in dropped:
            self.broker.message_consumed(self, m)

    def durable_state(self, client_id: str, name: str, selector_text: str | None, no_local: bool) -> "DurableState":
        """The durable subscription (client_id, name), created or reset as needed.

        As in ActiveMQ, subscribing again with a different selector or noLocal
        replaces the subscription (its stored messages are dropped).
        """
        key = (client_id, name)
        state = self.durables.get(key)
        if state is not None and (state.selector_text != selector_text or state.no_local != no_local):
            self.delete_durable(client_id, name)
            state = None
        if state is None:
            state = DurableState(client_id, name, selector_text, no_local)
            self.durables[key] = state
            self.broker.durables_changed()
        return state

    def delete_durable(self, client_id: str, name: str) -> bool:
        """Remove a durable subscription and what it holds; False if unknown."""
        state = self.durables.pop((client_id, name), None)
        if state is None:
            return False
        for m in state.pending:
            self._settle(state, m)
            self.broker.message_consumed(self, m)
        state.pending.clear()
        self.broker.durables_changed()
        return True

    def accept(self, message: "Message") -> None:
        """Hand ``message`` to each subscription in turn (ActiveMQ's SimpleDispatchPolicy)."""
        self.enqueued += 1
        broker = self.broker
        for sub in self.subs:
            if not sub.accepts(message):
                continue
            if sub.durable is not None:
                broker.persist_durable(self, sub.durable, message)
            self.hold(message)  # one reference per subscription until it is done with it
            if not sub.pending and sub.has_capacity():
                sub.deliver(message)
            else:
                sub.pending.append(message)
        for state in self.durables.values():
            if state.active is None and state.accepts(message):
                broker.persist_durable(self, state, message)
                self.hold(message)
                state.pending.append(message)

    def dispatch_to(self, sub: "Subscription") -> None:
        pending = sub.pending
        now_ms = self.broker.clock.wall_ms()
        while pending and sub.has_capacity():
            message = pending.popleft()
            if message.expires and message.is_expired(now_ms):
                self.expired += 1
                self._settle(sub.durable, message)
                self.broker.message_expired(self, message)
                continue
            sub.deliver(message)

    def acknowledge(self, sub: "Subscription", messages: list["Message"]) -> None:
        for m in messages:
            self.dequeued += 1
            sub.acked_count += 1
            sub.redelivered.pop(m.seq, None)
            self._settle(sub.durable, m)
            self.broker.message_consumed(self, m)
        self.dispatch_to(sub)

    def on_delivered(self, sub: "Subscription", message: "Message") -> None:
        if sub.auto:
            self._settle(sub.durable, message)
        super().on_delivered(sub, message)

    def _settle(self, state: "DurableState | None", message: "Message") -> None:
        """A durable subscription is done with ``message``: drop its stored copy."""
        if state is not None:
            self.broker.settle_durable(state, message)

    def redeliver(self, sub: "Subscription", messages: list["Message"], cause: str) -> None:
        def count(m: "Message") -> int:
            sub.redelivered[m.seq] = sub.redelivered.get(m.seq, 0) + 1
            return sub.redelivered[m.seq]

        kept = self._survivors(messages, cause, count)
        for m in messages:
            if m not in kept:  # dead-lettered: the durable copy goes too
                self._settle(sub.durable, m)
            elif self.broker.trace.enabled:
                self.broker.redelivering(self, m, sub)
        sub.pending.extendleft(reversed(kept))
        self.dispatch_to(sub)


class DurableState:
    """A durable topic subscription, kept while its consumer is away."""

    __slots__ = ("client_id", "name", "selector_text", "selector", "no_local", "pending", "redelivered", "active", "refs")

    def __init__(self, client_id: str, name: str, selector_text: str | None, no_local: bool) -> None:
        self.client_id = client_id
        self.name = name
        self.selector_text = selector_text
        #: Set by the broker: a compiled selector, or None.
        self.selector: Any = None
        self.no_local = no_local
        self.pending: deque["Message"] = deque()
        #: message seq -> deliveries after the first.
        self.redelivered: dict[int, int] = {}
        #: The subscription consuming it now, or None while offline.
        self.active: "Subscription | None" = None
        #: message seq -> its stored copy for this subscription (persistent messages).
        self.refs: dict[int, Any] = {}

    def accepts(self, message: "Message") -> bool:
        if self.selector is None:
            return True
        return bool(self.selector.matches(message.header_view()))

