"""What queues and topics share: identity, policy, memory, statistics.

``queue.py`` holds queues (competing consumers, the store cursor) and
``topic.py`` topics (every subscriber, pending cursors, slow consumers); this
module has their base class and the in-memory pending lists.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from mypy_extensions import mypyc_attr

from minibroker.destinations.ports import DestinationHandle, DestinationParts
from minibroker.destinations.usage import Usage

if TYPE_CHECKING:
    from minibroker.config import PolicyEntry
    from minibroker.destinations.subscription import Subscription
    from minibroker.protocol.message import Message

__all__ = ["Destination", "FifoPending", "PriorityPending", "parse_address", "DESTINATION_KINDS"]

#: Address prefix -> destination kind.
DESTINATION_KINDS = {"/queue/": "queue", "/topic/": "topic"}


def parse_address(address: str) -> tuple[str, str] | None:
    """``/queue/a.b`` -> ``("queue", "a.b")``; None when the prefix is unknown."""
    for prefix, kind in DESTINATION_KINDS.items():
        if address.startswith(prefix) and len(address) > len(prefix):
            return kind, address[len(prefix) :]
    return None


@mypyc_attr(native_class=False)  # compiled, a Python class still: mypyc derives no native class from deque
class FifoPending(deque["Message"]):
    """Pending messages in arrival order (a VM cursor).

    A ``deque`` itself, not a wrapper around one: dispatch asks its length,
    appends and pops several times per message, and these stay C calls.
    """

    __slots__ = ()

    def push_front(self, messages: list[Message]) -> None:
        """Put ``messages`` (sorted by seq) back, keeping the whole list in seq order."""
        if not messages:
            return
        if not self or messages[-1].seq < self[0].seq:
            self.extendleft(reversed(messages))
        else:
            merged = list(heapq.merge(messages, self, key=lambda m: m.seq))
            self.clear()
            self.extend(merged)

    def remove_where(self, predicate: Any) -> list[Message]:
        """Remove and return every message for which ``predicate`` is true."""
        kept: list[Message] = []
        removed: list[Message] = []
        for m in self:
            (removed if predicate(m) else kept).append(m)
        if removed:
            self.clear()
            self.extend(kept)
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

    def __iter__(self) -> Iterator[Message]:
        for bucket in reversed(self._buckets):
            yield from bucket

    def append(self, message: Message) -> None:
        self._buckets[message.priority].append(message)
        self._count += 1

    def popleft(self) -> Message:
        for bucket in reversed(self._buckets):
            if bucket:
                self._count -= 1
                return bucket.popleft()
        raise IndexError("pop from an empty pending list")

    def push_front(self, messages: list[Message]) -> None:
        by_priority: dict[int, list[Message]] = {}
        for m in messages:
            by_priority.setdefault(m.priority, []).append(m)
        for priority, group in by_priority.items():
            self._buckets[priority].push_front(group)
        self._count += len(messages)

    def remove_where(self, predicate: Any) -> list[Message]:
        removed: list[Message] = []
        for bucket in self._buckets:
            removed += bucket.remove_where(predicate)
        self._count -= len(removed)
        return removed


class Destination(DestinationHandle):
    """What queues and topics share: identity, policy, statistics. What the broker
    and their subscriptions call is declared in their base classes
    (``ports.DestinationHandle``, ``subscription.SubscribedDestination``)."""

    kind = ""

    def __init__(
        self, parts: DestinationParts, name: str, policy: PolicyEntry, *, address: str = "", owner: int | None = None
    ) -> None:
        """``parts``: the broker's clock, timers, trace and usages, and the parts a
        destination calls (``ports.DestinationParts``)."""
        self.clock = parts.clock
        self.timers = parts.timers
        self.trace = parts.trace
        #: The broker's memory (the root of the usage tree) and the temp store's usage.
        self.root_memory = parts.memory
        self.temp_usage = parts.temp_usage
        #: What this destination tells the broker, asks of the store, and tells producer flow control.
        self.events = parts.hooks
        self.stored = parts.storehooks
        self.flow = parts.flow
        #: Physical name without prefix, e.g. ``orders.us``.
        self.name = name
        #: Full address, e.g. ``/queue/orders.us``.
        self.address = address or f"/{self.kind}/{name}"
        self.policy = policy
        #: For a temporary destination, the session that owns it.
        self.owner = owner
        #: True for a dead letter queue (nothing is dead-lettered out of one).
        self.is_dlq = False
        #: True for a tool's own reply queue: a temporary queue named as the reply-to of a
        #: statistics or admin request (stat's, the console's). Not a user destination:
        #: the statistics neither list nor count it, nor the traffic of the replies on it.
        self.tool_reply = False
        root = parts.memory
        #: This destination's memory: a child of the broker's (the starving consumers' heart).
        self.memory = Usage(self.address, policy.memory_limit or root.limit, parent=root)
        self.enqueued = 0
        self.dequeued = 0
        self.dispatched = 0
        self.expired = 0
        self.discarded = 0
        #: Messages its consumers refused (NACK, rollback) that it put back for another delivery.
        self.redelivered = 0

    # -- memory: a message is charged once, while anything here holds it
    def hold(self, message: Message) -> None:
        if message.refs == 0:
            self.memory.increase(message.size)
        message.refs += 1

    def hold_page(self, messages: list[Message], size: int) -> None:
        """``hold`` each of ``messages``, new here (a page-in), whose sizes sum to
        ``size``: the memory is charged in one change, not one per message."""
        for message in messages:
            if message.refs:
                raise ValueError(f"{message!r} is already held")
            message.refs = 1
        self.memory.increase(size)

    # -- overridden by Queue and Topic
    def add_subscription(self, sub: Subscription) -> None:
        raise NotImplementedError

    def accept(self, message: Message) -> list[Subscription] | None:
        """Take a newly sent message. A topic that producer flow control stopped
        part way returns the subscriptions still to serve; otherwise None."""
        raise NotImplementedError

    def _survivors(self, messages: list[Message], cause: str, count: Any) -> list[Message]:
        """Count one more delivery for each message; dead-letter those over the limit."""
        policy = self.policy
        limit = policy.maximum_redeliveries
        kept = []
        for m in sorted(messages, key=lambda m: m.seq):
            n = count(m)
            if cause == "reject":
                self.events.dead_letter(self, m, f"NACK with requeue:false (delivery {n})")
            elif cause == "nack" and policy.dead_letter_on_nack:
                self.events.dead_letter(self, m, f"NACK (delivery {n})")
            elif limit >= 0 and n > limit:
                self.events.dead_letter(
                    self, m, f"redelivered {n} times, more than maximum_redeliveries={limit} ({cause})"
                )
            else:
                kept.append(m)
        self.redelivered += len(kept)
        return kept

    def on_delivered(self, sub: Subscription, message: Message) -> None:
        """A MESSAGE frame for ``message`` was written to ``sub``'s consumer."""
        if self.trace.enabled:
            self.events.delivered(sub, message)
        if sub.browser:
            return
        self.dispatched += 1
        if not sub.auto and message.store_ref is not None:
            self.stored.mark_delivered(message)
        if sub.auto:
            self.dequeued += 1
            self.events.message_consumed(self, message)

    def size(self) -> int:
        """Messages held (pending plus delivered-unacknowledged)."""
        raise NotImplementedError

    def cursor_statistics(self) -> dict[str, Any]:
        """Where the pending messages are: cached in memory or only in the store."""
        return {"cachedCount": self.size(), "storeOnlyCount": 0}

    def release(self, message: Message) -> None:
        message.refs -= 1
        if message.refs == 0:
            self.memory.decrease(message.size)
            self.flow.space_freed()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.address}>"
