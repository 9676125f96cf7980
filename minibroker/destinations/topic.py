"""Topics: publish-subscribe, every current subscription gets every message.

Theory of operation
-------------------
A topic has no backlog of its own. ``accept`` hands a message to each current
subscription in turn (ActiveMQ's ``SimpleDispatchPolicy``): at once if the
consumer has capacity, otherwise into the subscription's pending cursor
(``pending.py``: ``vm`` or ``file``). When that cursor is *full* (memory at
100%, or for a file cursor the temp store full), dispatch stops at that
subscription and the producer is blocked: ``accept`` returns the
subscriptions still to serve, and the broker resumes there once space frees.
One slow subscriber thus stalls the producer and every later subscriber, as
in ActiveMQ, unless a policy says otherwise:

- ``pending_message_limit`` (ActiveMQ's ConstantPendingMessageLimitStrategy):
  beyond it, the oldest (or newest) pending message is discarded, counted;
  ``0`` drops what arrives for a full subscription;
- ``pending_cursor = "file"``: the subscription spools to the temp store;
- ``abort_slow_consumer``: subscriptions that stay slow are aborted.

A subscription is marked *slow* when more than its prefetch is pending, and
unmarked when it has caught up (nothing pending). Durable subscriptions keep
their messages while their consumer is away.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from minibroker.destinations.destination import Destination
from minibroker.destinations.pending import FilePending

if TYPE_CHECKING:
    from minibroker.config import PolicyEntry
    from minibroker.destinations.ports import DestinationParts
    from minibroker.destinations.subscription import Subscription
    from minibroker.durability.persistence import StoreRef
    from minibroker.protocol.message import Message

__all__ = ["Topic", "DurableState", "STRAIGHT_THROUGH"]

#: Deliver straight through where it applies (``Topic._straight_through``); the tests turn
#: it off to hold it to the general path.
STRAIGHT_THROUGH = True


class Topic(Destination):
    """Publish-subscribe: every current subscription gets every message."""

    kind = "topic"

    def __init__(
        self, parts: DestinationParts, name: str, policy: PolicyEntry, *, address: str = "", owner: int | None = None
    ) -> None:
        # The keywords named, not passed on as **kw (which the compiled build passes wrongly).
        super().__init__(parts, name, policy, address=address, owner=owner)
        self.subs: list[Subscription] = []
        #: Durable subscriptions by (client-id, subscription name), online or not.
        self.durables: dict[tuple[str, str], DurableState] = {}
        #: How many durable subscriptions have sharers (none: ``subscriptions`` is ``subs``).
        self.shared = 0

    @property
    def subscriptions(self) -> list[Subscription]:
        """Every consumer: the topic's list and the sharers of its durable subscriptions."""
        if not self.shared:
            return self.subs
        return self.subs + [s for d in self.durables.values() for s in d.sharers]

    def size(self) -> int:
        online = sum(len(s.pending) + len(s.dispatched) for s in self.subs)
        offline = sum(len(d.pending) for d in self.durables.values() if d.active is None)
        if self.shared:
            online += sum(len(s.dispatched) for d in self.durables.values() for s in d.sharers)
        return online + offline

    def add_sharer(self, state: DurableState, sub: Subscription) -> None:
        """``sub`` consumes durable subscription ``state`` beside its active consumer."""
        self.shared += not state.sharers
        state.sharers.append(sub)

    def add_subscription(self, sub: Subscription) -> None:
        if sub.durable is None and self.policy.pending_cursor == "file":
            sub.pending = FilePending(self, sub)  # type: ignore[assignment]
        self.subs.append(sub)

    def remove_subscription(self, sub: Subscription) -> None:
        """Detach ``sub``. A non-durable subscription's messages are dropped; a
        durable one keeps them (unacknowledged ones back at the head) for its
        next connection, or for the consumers that share it (one of them takes
        ``sub``'s place in the topic's list)."""
        state = sub.durable
        shared = state is not None and bool(state.sharers)
        if state is not None and sub in state.sharers:
            state.sharers.remove(sub)
        else:
            self.subs.remove(sub)
        returned = sub.take_all_dispatched()
        if state is not None:
            for m in returned:
                sub.redelivered[m.seq] = sub.redelivered.get(m.seq, 0) + 1
            sub.pending.extendleft(reversed(sorted(returned, key=lambda m: m.seq)))
            if state.active is sub:
                state.active = state.sharers.pop(0) if state.sharers else None
                if state.active is not None:
                    self.subs.append(state.active)
                else:
                    state.offline_since = self.clock.now()
            if shared and not state.sharers:
                self.shared -= 1
            for member in state.members():
                self.dispatch_to(member)
            return
        in_memory = list(sub.pending.memory) if isinstance(sub.pending, FilePending) else list(sub.pending)
        sub.pending.clear()  # a file cursor also releases what it holds on disk
        for m in in_memory + returned:
            self.events.message_consumed(self, m)

    def durable_state(
        self, client_id: str, name: str, selector_text: str | None, no_local: bool, owner: str | None = None
    ) -> DurableState:
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
            state = DurableState(client_id, name, selector_text, no_local, owner)
            self.durables[key] = state
            self.stored.durables_changed()
        return state

    def delete_durable(self, client_id: str, name: str) -> bool:
        """Remove a durable subscription and what it holds; False if unknown."""
        state = self.durables.pop((client_id, name), None)
        if state is None:
            return False
        for m in state.pending:
            self._settle(state, m)
            self.events.message_consumed(self, m)
        state.pending.clear()
        self.stored.durables_changed()
        return True

    def accept(self, message: Message, targets: list[Subscription] | None = None) -> list[Subscription] | None:
        """Hand ``message`` to each subscription in turn (ActiveMQ's SimpleDispatchPolicy).

        Returns None when done, or the subscriptions still to serve when one
        of them is full: the producer must wait (``targets`` resumes there).
        """
        if targets is None:
            self.enqueued += 1
            targets = self.subs
        else:  # resuming a held producer: skip subscriptions gone since (aborted, unsubscribed)
            live = self.events.live_subscription
            targets = [s for s in targets if live(s)]
        limit = self.policy.pending_message_limit
        passing = False  # a Usage.passes for this message's size said yes, and the usage has not moved since
        for i, sub in enumerate(targets):
            if (sub.selector is not None or sub.no_local) and not sub.accepts(message):
                continue
            direct = not sub.pending and sub.has_capacity()
            # Measured on the compiled core: 11% fewer instructions per message (docs/benchmarks.md).
            if direct and self._straight_through(sub, message, passing):
                passing = passing or not message.refs
                continue
            passing = False
            if not direct and self.cursor_full(sub):
                if limit == 0:
                    self._discard(sub, message, "subscription full, pending_message_limit is 0")
                    continue
                self.events.subscription_full(self, sub)
                return targets[i:]
            state = sub.durable
            if state is not None:
                self.stored.persist_durable(self, state, message)
            self.hold(message)  # one reference per subscription until it is done with it
            if direct:
                sub.deliver(message)
            else:
                sub.pending.append(message)
                if limit > 0 and len(sub.pending) > limit:
                    self._evict(sub)
                if not sub.slow and len(sub.pending) > sub.prefetch:
                    self.events.slow_consumer(sub, True)
                if state is not None and state.sharers:  # its other consumers take what sub cannot
                    for sharer in state.sharers:
                        self.dispatch_to(sharer)
        for state in self.durables.values():
            if state.active is None and state.accepts(message):
                self.stored.persist_durable(self, state, message)
                self.hold(message)
                state.pending.append(message)
        return None

    def _straight_through(self, sub: Subscription, message: Message, passing: bool) -> bool:
        """Deliver ``message`` to ``sub`` (which has room and nothing pending) without the
        hold and release the general path makes in the same call; False (nothing done)
        where the general path must run.

        Preconditions:

        - ``sub`` has no selector, noLocal or durable state, and acknowledges on
          delivery (auto);
        - the message is already held (by an earlier subscription), or ``passing``
          (an earlier delivery of this run passed), or a charge of its size moves no
          usage out of its percent band (``Usage.passes``, which raises the peaks as
          the charge would).

        Steps: the frame is written and counted, as the general path would; the usage
        stays where it was, so one ``passes`` answers for the deliveries that follow
        it until a subscription takes the general path; one ``space_freed`` (the
        release's) stands for the run's (it only flags a retry if producers or
        cursors wait, which nothing in the run changes).

        ``tests/core/test_core_fast_paths.py`` holds this path to the general one.
        """
        if not (
            STRAIGHT_THROUGH
            and sub.auto
            and sub.durable is None
            and (message.refs or passing or self.memory.passes(message.size))
        ):
            return False
        sub.write_message(message)
        if self.trace.enabled:
            self.events.delivered(sub, message)
        self.dispatched += 1
        self.dequeued += 1
        if not message.refs and not passing:  # (held by another subscription, the hold and release only count)
            self.flow.space_freed()  # as the release would (once a run: see above)
        return True

    # -- full subscriptions, eviction
    def cursor_full(self, sub: Subscription) -> bool:
        """Is ``sub``'s pending cursor full? (ActiveMQ ``PendingMessageCursor.isFull``)"""
        pending = sub.pending
        if isinstance(pending, FilePending):
            return pending.is_full()
        return self.memory.is_full()

    def _evict(self, sub: Subscription) -> None:
        """Over ``pending_message_limit``: discard the oldest (or newest) pending message."""
        pending = sub.pending
        if self.policy.message_eviction_strategy == "newest":
            victim = pending.pop()
        else:
            victim = pending.popleft()
        self._discard(
            sub,
            victim,
            f"pending_message_limit {self.policy.pending_message_limit} exceeded "
            f"({self.policy.message_eviction_strategy} evicted)",
            held=True,
        )

    def _discard(self, sub: Subscription, message: Message, reason: str, *, held: bool = False) -> None:
        sub.discarded += 1
        self.discarded += 1
        if held:
            self.events.message_consumed(self, message)
        self.events.discarded(self, sub, message, reason)

    def dispatch_to(self, sub: Subscription) -> None:
        pending = sub.pending
        now_ms = self.clock.wall_ms()
        while pending and sub.has_capacity():
            message = pending.popleft()
            if message.expires and message.is_expired(now_ms):
                self.expired += 1
                self._settle(sub.durable, message)
                self.events.message_expired(self, message)
                continue
            sub.deliver(message)
        if sub.slow and not pending:
            self.events.slow_consumer(sub, False)

    def acknowledge(self, sub: Subscription, messages: list[Message]) -> None:
        for m in messages:
            self.dequeued += 1
            sub.acked_count += 1
            sub.redelivered.pop(m.seq, None)
            self._settle(sub.durable, m)
            self.events.message_consumed(self, m)
        self.dispatch_to(sub)

    def on_delivered(self, sub: Subscription, message: Message) -> None:
        if sub.auto:
            self._settle(sub.durable, message)
        elif sub.durable is not None and not sub.browser:
            # Its stored copy is marked, so that after a restart it comes back redelivered.
            self.stored.mark_durable_delivered(sub.durable, message)
        super().on_delivered(sub, message)

    def _settle(self, state: DurableState | None, message: Message) -> None:
        """A durable subscription is done with ``message``: drop its stored copy."""
        if state is not None:
            self.stored.settle_durable(state, message)

    def redeliver(self, sub: Subscription, messages: list[Message], cause: str) -> None:
        def count(m: Message) -> int:
            sub.redelivered[m.seq] = sub.redelivered.get(m.seq, 0) + 1
            return sub.redelivered[m.seq]

        kept = self._survivors(messages, cause, count)
        for m in messages:
            if m not in kept:  # dead-lettered: the durable copy goes too
                self._settle(sub.durable, m)
            elif self.trace.enabled:
                self.events.redelivering(self, m, sub, cause)
        sub.pending.extendleft(reversed(kept))
        self.dispatch_to(sub)


class DurableState:
    """A durable topic subscription, kept while its consumer is away."""

    __slots__ = (
        "client_id",
        "name",
        "selector_text",
        "selector",
        "no_local",
        "pending",
        "redelivered",
        "active",
        "offline_since",
        "refs",
        "owner",
        "sharers",
        "auto_delete",
    )

    def __init__(
        self, client_id: str, name: str, selector_text: str | None, no_local: bool, owner: str | None = None
    ) -> None:
        self.client_id = client_id
        #: The user who made it (None: made with no users configured); only that user may
        #: consume from it or remove it, whatever client-id another connection claims.
        self.owner = owner
        self.name = name
        self.selector_text = selector_text
        #: Set by the broker: a compiled selector, or None.
        self.selector: Any = None
        self.no_local = no_local
        self.pending: deque[Message] = deque()
        #: message seq -> deliveries after the first.
        self.redelivered: dict[int, int] = {}
        #: The subscription consuming it now, or None while offline.
        self.active: Subscription | None = None
        #: Since when it is offline (broker clock), or None: online, or not seen offline yet.
        self.offline_since: float | None = None
        #: message seq -> its stored copy for this subscription (persistent messages).
        self.refs: dict[int, StoreRef] = {}
        #: More consumers of it besides ``active`` (RabbitMQ's durable subscriptions: one
        #: queue, its consumers share its messages). Only ``active`` is in the topic's list;
        #: the others share its pending messages and take what it has no room for.
        self.sharers: list[Subscription] = []
        #: Removed when its last consumer leaves (RabbitMQ's ``auto-delete``, not kept over a restart).
        self.auto_delete = False

    def members(self) -> list[Subscription]:
        """The consumers of it now: ``active`` and its sharers."""
        return ([self.active] if self.active is not None else []) + self.sharers

    def accepts(self, message: Message) -> bool:
        if self.selector is None:
            return True
        return bool(self.selector.matches(message.header_view()))
