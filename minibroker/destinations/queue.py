"""Queues: point-to-point, competing consumers.

Theory of operation
-------------------
A queue keeps its undelivered messages in a cursor (``cursor.py``): a cache in
memory (``pending``, ordered by arrival ``seq``, or by priority) and, for
persistent messages past the memory high-water mark, references to the
journal. ``dispatch()`` walks the cache from the head and gives each message
to a consumer that has capacity and whose selector accepts it, paging in from
the store when the cache runs empty. Consumers are grouped by priority
(``activemq.priority``): the highest group is served first and a lower group
only gets what the higher ones have no room for; within a group the choice
rotates (round-robin). While an exclusive consumer exists
(``activemq.exclusive``), it alone receives. A message no consumer accepts
stays where it is for a later consumer: a pass steps over at most
``max_page_size`` such messages, as ActiveMQ pages in 200 at a time. Messages
returned by NACK, unsubscribe or disconnect go back to the head, in their
original order, flagged ``redelivered``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from minibroker.destinations.cursor import QueueCursor
from minibroker.destinations.destination import Destination, FifoPending, PriorityPending

if TYPE_CHECKING:
    from minibroker.config import PolicyEntry
    from minibroker.destinations.ports import DestinationParts
    from minibroker.destinations.subscription import Subscription
    from minibroker.protocol.message import Message

__all__ = ["Queue"]


class Queue(Destination):
    """Point-to-point: each message goes to exactly one consumer."""

    kind = "queue"

    def __init__(
        self, parts: DestinationParts, name: str, policy: PolicyEntry, *, address: str = "", owner: int | None = None
    ) -> None:
        # The keywords named, not passed on as **kw (which the compiled build passes wrongly).
        super().__init__(parts, name, policy, address=address, owner=owner)
        #: The cache: undelivered messages in memory, in dispatch order.
        self.pending: FifoPending | PriorityPending = (
            PriorityPending() if policy.prioritized_messages else FifoPending()
        )
        #: The store cursor: what is cached, what is only on disk, page-in.
        self.cursor = QueueCursor(self)
        self._sweep_scheduled = False
        self.consumers: list[Subscription] = []
        self.exclusive_owner: Subscription | None = None
        # Consumers grouped by priority, highest first; rotation index per group.
        self._groups: list[list[Subscription]] = []
        self._rotation: list[int] = []
        self._any_selector = False
        #: The one eligible consumer, when there is exactly one and it has no selector (the fast dispatch).
        self._single: Subscription | None = None
        self._dispatching = False
        #: Messages waiting out a redelivery delay (``redeliver``), by seq: still on the queue.
        self.delayed: dict[int, Message] = {}

    @property
    def subscriptions(self) -> list[Subscription]:
        return self.consumers

    def size(self) -> int:
        return (
            len(self.pending)
            + len(self.cursor.store_only)
            + sum(len(s.dispatched) for s in self.consumers)
            + len(self.delayed)
        )

    def cursor_statistics(self) -> dict[str, Any]:
        return self.cursor.statistics()

    # -- consumers
    def add_subscription(self, sub: Subscription) -> None:
        self.consumers.append(sub)
        if sub.exclusive:
            owner = self.exclusive_owner
            if owner is None or sub.priority > owner.priority:
                self.exclusive_owner = sub
        self._regroup()
        self.dispatch()

    def remove_subscription(self, sub: Subscription) -> None:
        """Detach ``sub``; its unacknowledged messages return to the head.

        A browser was never a consumer: it only drops what is left of its
        snapshot (references to messages that stay on the queue)."""
        if sub.browser:
            sub.pending.clear()
            return
        self.consumers.remove(sub)
        if self.exclusive_owner is sub:
            exclusives = [c for c in self.consumers if c.exclusive]
            # The highest-priority remaining exclusive consumer takes over.
            self.exclusive_owner = max(exclusives, key=lambda c: c.priority, default=None)
        self._regroup()
        returned = sub.take_all_dispatched()
        tracing = self.trace.enabled
        for m in returned:
            m.redeliveries += 1  # as ActiveMQ does for messages of a closed consumer
            if tracing:
                self.events.redelivering(self, m, sub, "closed")
        self.pending.push_front(sorted(returned, key=lambda m: m.seq))
        self.dispatch()

    def _regroup(self) -> None:
        if self.exclusive_owner is not None:
            eligible = [self.exclusive_owner]
        else:
            eligible = self.consumers
        by_priority: dict[int, list[Subscription]] = {}
        for c in eligible:
            by_priority.setdefault(c.priority, []).append(c)
        self._groups = [by_priority[p] for p in sorted(by_priority, reverse=True)]
        self._rotation = [0] * len(self._groups)
        self._any_selector = any(c.selector is not None or c.no_local for c in eligible)
        self._single = eligible[0] if len(eligible) == 1 and not self._any_selector else None

    # -- messages in
    def accept(self, message: Message) -> None:
        """Take a newly sent message: cache it (or leave it in the store) and dispatch."""
        self.enqueued += 1
        cached = self.cursor.add(message)
        if cached:
            self.hold(message)
            self.pending.append(message)
        self.events.message_enqueued(self, message, cached)
        if message.expires and not self._sweep_scheduled and self.policy.expire_messages_period:
            self._schedule_sweep()
        if self.consumers:
            self.dispatch()

    def dispatch_to(self, sub: Subscription) -> None:
        if sub.browser:
            self._browse(sub)
        else:
            self.dispatch()

    # -- expiry: ActiveMQ sweeps every expireMessagesPeriod
    def _schedule_sweep(self) -> None:
        self._sweep_scheduled = True
        period = self.policy.expire_messages_period / 1000
        self.timers.call_at(self.clock.now() + period, self._sweep)

    def _sweep(self) -> None:
        self._sweep_scheduled = False
        now_ms = self.clock.wall_ms()
        for message in self.pending.remove_where(lambda m: m.is_expired(now_ms)):
            self._expire(message)
        for ref in self.cursor.store_only.expired(now_ms):
            message = self.stored.load_message(self, ref)
            self.stored.took(ref)
            self._expire(message)
        if any(m.expires for m in self.pending) or self.cursor.store_only.expiring:
            self._schedule_sweep()

    # -- browsing: a snapshot delivered without consuming, then browser:end
    def browse_snapshot(self) -> list[Message]:
        """The pending messages, in dispatch order, for a new browser (store-only
        ones are read from disk for it, without entering the cache)."""
        now_ms = self.clock.wall_ms()
        stored = [self.stored.load_message(self, r) for r in self.cursor.store_only]
        return [m for m in [*self.pending, *stored] if not m.is_expired(now_ms)]

    def _browse(self, sub: Subscription) -> None:
        pending = sub.pending
        while pending and sub.has_capacity():
            message = pending.popleft()
            if sub.accepts(message):
                sub.deliver(message)
        if not pending and not sub.browse_done and sub.session.writing.can_write:
            sub.browse_done = True
            self.events.end_of_browse(sub)

    # -- dispatch
    def dispatch(self) -> None:
        """Give pending messages to consumers with capacity, in order, paging
        in from the store whenever the cache runs empty."""
        if self._dispatching or not self._groups:
            return
        cursor = self.cursor
        if not self.pending and (cursor.cache_enabled or not cursor.store_only):  # (enabled: none store-only)
            return
        self._dispatching = True
        try:
            while True:
                if not self.pending and not (self._someone_has_capacity() and cursor.page_in()):
                    break
                if self._single is not None:
                    self._dispatch_single(self._single)
                else:
                    self._dispatch_general()
                if self.pending or not cursor.store_only or not self._someone_has_capacity():
                    break
        finally:
            self._dispatching = False

    def _dispatch_single(self, sub: Subscription) -> None:
        pending = self.pending
        now_ms = 0  # read from the clock only when a message can expire
        while pending and sub.has_capacity():
            message = pending.popleft()
            if message.expires:
                now_ms = now_ms or self.clock.wall_ms()
                if message.is_expired(now_ms):
                    self._expire(message)
                    continue
            sub.deliver(message)

    def _dispatch_general(self) -> None:
        pending = self.pending
        now_ms = self.clock.wall_ms()
        skipped: list[Message] = []
        limit = self.events.max_page_size(self)
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

    def leaves_at_once(self) -> bool:
        """Would a new message go straight to a consumer? (nothing cached ahead of it, a consumer with room)"""
        return not self.pending and self._someone_has_capacity()

    def _choose(self, message: Message) -> Subscription | None:
        for g, group in enumerate(self._groups):
            n = len(group)
            start = self._rotation[g]
            for k in range(n):
                sub = group[(start + k) % n]
                if sub.has_capacity() and sub.accepts(message):
                    self._rotation[g] = (start + k + 1) % n
                    return sub
        return None

    def _expire(self, message: Message) -> None:
        self.expired += 1
        self.events.message_expired(self, message)

    # -- acknowledgements
    def acknowledge(self, sub: Subscription, messages: list[Message]) -> None:
        for m in messages:
            self.dequeued += 1
            sub.acked_count += 1
            self.events.message_consumed(self, m)
        self.dispatch()

    def redeliver(self, sub: Subscription, messages: list[Message], cause: str) -> None:
        def count(m: Message) -> int:
            m.redeliveries += 1
            return m.redeliveries

        kept = self._survivors(messages, cause, count)
        if self.trace.enabled:
            for m in kept:
                self.events.redelivering(self, m, sub, cause)
        # A redelivery delay (ActiveMQ's redelivery policy) keeps a message aside on the broker's
        # timers; it goes back to the head when its time comes (``_redelivery_due``).
        now, policy = self.clock.now(), self.policy
        at_once = []
        for m in kept:
            delay = policy.redelivery_delay_ms(m.redeliveries)
            if delay > 0:
                self.delayed[m.seq] = m
                self.timers.call_at(now + delay / 1000, self._redelivery_due, m)
            else:
                at_once.append(m)
        self.pending.push_front(at_once)
        self.dispatch()

    def _redelivery_due(self, message: Message) -> None:
        """A delayed redelivery's time has come: the message goes back to the head (unless it
        left the queue meanwhile: a purge)."""
        if self.delayed.pop(message.seq, None) is None:
            return
        self.pending.push_front([message])
        self.dispatch()

    def purge(self) -> int:
        """Drop every pending message, cached or store-only; returns how many."""
        dropped = self.pending.remove_where(lambda m: True) + list(self.delayed.values())
        self.delayed.clear()
        store_only = self.cursor.store_only
        stored = 0
        for ref in store_only:  # a chunk at a time, not the whole index at once
            self.stored.discard_stored(ref.ref)
            stored += 1
        store_only.clear()
        for m in dropped:
            self.events.message_consumed(self, m)
        self.dequeued += len(dropped) + stored
        return len(dropped) + stored
