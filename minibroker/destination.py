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

if TYPE_CHECKING:
    from .broker import Broker
    from .config import PolicyEntry
    from .message import Message
    from .subscription import Subscription

__all__ = ["Destination", "Queue", "Topic", "FifoPending", "parse_address", "DESTINATION_KINDS"]

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


class Destination:
    """What queues and topics share: identity, policy, statistics."""

    kind = ""

    def __init__(self, broker: "Broker", name: str, policy: "PolicyEntry") -> None:
        self.broker = broker
        #: Physical name without prefix, e.g. ``orders.us``.
        self.name = name
        #: Full address, e.g. ``/queue/orders.us``.
        self.address = f"/{self.kind}/{name}"
        self.policy = policy
        self.enqueued = 0
        self.dequeued = 0
        self.dispatched = 0
        self.expired = 0

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

    def redeliver(self, sub: "Subscription", messages: list["Message"]) -> None:
        """``sub``'s consumer refused ``messages`` (NACK): deliver them again."""
        raise NotImplementedError

    @property
    def subscriptions(self) -> list["Subscription"]:
        raise NotImplementedError

    def on_delivered(self, sub: "Subscription", message: "Message") -> None:
        """A MESSAGE frame for ``message`` was written to ``sub``'s consumer."""
        self.dispatched += 1
        if sub.auto:
            self.dequeued += 1
            self.broker.message_consumed(self, message)

    def size(self) -> int:
        """Messages held (pending plus delivered-unacknowledged)."""
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {
            "destination": self.address,
            "kind": self.kind,
            "size": self.size(),
            "enqueued": self.enqueued,
            "dequeued": self.dequeued,
            "dispatched": self.dispatched,
            "expired": self.expired,
            "consumers": len(self.subscriptions),
        }

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.address}>"


class Queue(Destination):
    """Point-to-point: each message goes to exactly one consumer."""

    kind = "queue"

    def __init__(self, broker: "Broker", name: str, policy: "PolicyEntry") -> None:
        super().__init__(broker, name, policy)
        self.pending = FifoPending()
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
        return len(self.pending) + sum(len(s.dispatched) for s in self.consumers)

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
        for m in returned:
            m.redeliveries += 1  # as ActiveMQ does for messages of a closed consumer
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
        self.pending.append(message)
        if self.consumers:
            self.dispatch()

    def dispatch_to(self, sub: "Subscription") -> None:
        self.dispatch()

    # -- dispatch
    def dispatch(self) -> None:
        """Give pending messages to consumers with capacity, in order."""
        if self._dispatching or not self.pending or not self._groups:
            return
        self._dispatching = True
        try:
            if len(self._groups) == 1 and len(self._groups[0]) == 1 and not self._any_selector:
                self._dispatch_single(self._groups[0][0])
            else:
                self._dispatch_general()
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

    def redeliver(self, sub: "Subscription", messages: list["Message"]) -> None:
        for m in messages:
            m.redeliveries += 1
        self.pending.push_front(sorted(messages, key=lambda m: m.seq))
        self.dispatch()

    def purge(self) -> int:
        """Drop every pending message; returns how many."""
        dropped = self.pending.remove_where(lambda m: True)
        for m in dropped:
            self.dequeued += 1
            self.broker.message_consumed(self, m)
        return len(dropped)


class Topic(Destination):
    """Publish-subscribe: every current subscription gets every message."""

    kind = "topic"

    def __init__(self, broker: "Broker", name: str, policy: "PolicyEntry") -> None:
        super().__init__(broker, name, policy)
        self.subs: list["Subscription"] = []

    @property
    def subscriptions(self) -> list["Subscription"]:
        return self.subs

    def size(self) -> int:
        return sum(len(s.pending) + len(s.dispatched) for s in self.subs)

    def add_subscription(self, sub: "Subscription") -> None:
        self.subs.append(sub)

    def remove_subscription(self, sub: "Subscription") -> None:
        """Detach ``sub``; what it held is dropped (a non-durable subscription)."""
        self.subs.remove(sub)
        dropped = list(sub.pending) + sub.take_all_dispatched()
        sub.pending.clear()
        for m in dropped:
            self.broker.message_consumed(self, m)

    def accept(self, message: "Message") -> None:
        """Hand ``message`` to each subscription in turn (ActiveMQ's SimpleDispatchPolicy)."""
        self.enqueued += 1
        for sub in self.subs:
            if not sub.accepts(message):
                continue
            if not sub.pending and sub.has_capacity():
                sub.deliver(message)
            else:
                sub.pending.append(message)

    def dispatch_to(self, sub: "Subscription") -> None:
        pending = sub.pending
        now_ms = self.broker.clock.wall_ms()
        while pending and sub.has_capacity():
            message = pending.popleft()
            if message.expires and message.is_expired(now_ms):
                self.expired += 1
                self.broker.message_expired(self, message)
                continue
            sub.deliver(message)

    def acknowledge(self, sub: "Subscription", messages: list["Message"]) -> None:
        for m in messages:
            self.dequeued += 1
            sub.acked_count += 1
            self.broker.message_consumed(self, m)
        self.dispatch_to(sub)

    def redeliver(self, sub: "Subscription", messages: list["Message"]) -> None:
        ordered = sorted(messages, key=lambda m: m.seq)
        for m in ordered:
            sub.redelivered.add(m.seq)
        sub.pending.extendleft(reversed(ordered))
        self.dispatch_to(sub)

