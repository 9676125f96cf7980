"""Topics: publish-subscribe, every current subscription gets every message.

Theory of operation
-------------------
A topic has no backlog of its own. ``accept`` hands a message to each current
subscription in turn (ActiveMQ's ``SimpleDispatchPolicy``): at once if the
consumer has capacity, otherwise into the subscription's pending cursor
(``pending.py``: ``vm`` or ``file``). Durable subscriptions keep their
messages while their consumer is away.
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from .destination import Destination

if TYPE_CHECKING:
    from .broker import Broker
    from .config import PolicyEntry
    from .message import Message
    from .subscription import Subscription

__all__ = ["Topic", "DurableState"]


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
