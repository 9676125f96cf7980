"""The broker as its destinations see it: the core's declared interfaces.

Theory of operation:

- Imports run one way: the core (``core/``) imports the destinations, and the
  destinations import the model (``subscription.py``, ``session.py``,
  ``message.py``). Nothing below imports anything above it.
- Where a lower part must call back up, it calls through a ``Protocol`` declared
  here, which the part above satisfies without naming it:

  - ``DestinationEvents``: what a destination tells the broker (a message
    consumed, expired, dead-lettered; a cursor that could not page in ...):
    ``core.hooks.DestinationHooks``;
  - ``DestinationStore``: what a destination asks of the store (load a stored
    message, spill one, journal a durable subscription's copy ...):
    ``core.storehooks.StoreHooks``;
  - ``SpaceListener``: memory was released (producers held by flow control may
    go on): ``core.flow.ProducerFlowControl``;
  - ``DestinationParts``: what a new destination is given: the clock, timers,
    trace and memory, and the three parts above (the ``Broker`` holds them);
  - ``Connection``: a session as its subscriptions write to it (``Session``).

- Where a signature names a destination, subscription or paged reference, its
  type is one of the aliases below, not the class: the class's module imports
  this one, and the project has no import circle, not even for the type
  checker. To mypy these are ``Any``: what such a call passes is checked where
  it is used.
"""

from __future__ import annotations

from typing import Any, Protocol

from minibroker.connection.clock import Clock
from minibroker.connection.security import Principal
from minibroker.connection.states import Writing
from minibroker.connection.timers import Timers
from minibroker.destinations.usage import Usage
from minibroker.protocol.message import Message
from storage import TempStore
from storage.spill import SpillFile

__all__ = [
    "Connection",
    "DestinationEvents",
    "DestinationParts",
    "DestinationStore",
    "SpaceListener",
    "Tracer",
    "DestinationRef",
    "QueueRef",
    "TopicRef",
    "SubscriptionRef",
    "DurableRef",
    "PagedRef",
]

#: A ``destination.Destination`` (a queue or topic), named, not imported.
DestinationRef = Any
#: A ``queue.Queue``, named, not imported.
QueueRef = Any
#: A ``topic.Topic``, named, not imported.
TopicRef = Any
#: A ``subscription.Subscription``, named, not imported.
SubscriptionRef = Any
#: A ``topic.DurableState`` (a durable subscription's stored state), named, not imported.
DurableRef = Any
#: A ``cursor.PagedRef`` or ``cursor.StoreRun`` (a stored message a queue cursor pages in).
PagedRef = Any


class Tracer(Protocol):
    """The trace recorder, as far as the core asks: is it on."""

    @property
    def enabled(self) -> bool: ...


class Connection(Protocol):
    """A session (``session.Session``), as its subscriptions see it: where a
    MESSAGE frame is written, and whether it may be now."""

    @property
    def id(self) -> int: ...

    @property
    def tag(self) -> str:
        """The session as the trace names it."""

    @property
    def version(self) -> str:
        """The STOMP version negotiated ("1.0", "1.1", "1.2")."""

    @property
    def client_id(self) -> str | None: ...

    @property
    def principal(self) -> Principal:
        """Who logged in on it."""

    @property
    def writing(self) -> Writing:
        """May output be added now (``writing.can_write``: the outbound buffer has
        room, the socket is not full, the connection is open)."""

    @property
    def leaving(self) -> bool:
        """A DISCONNECT was read: nothing more is dispatched to it."""

    def write(self, data: bytes) -> None:
        """Queue ``data`` (one encoded frame) for the socket."""


class DestinationEvents(Protocol):
    """What a destination and its cursors tell the broker (``core.hooks.DestinationHooks``)."""

    # -- delivery and its outcome
    def delivered(self, sub: SubscriptionRef, message: Message) -> None:
        """A MESSAGE frame went to ``sub``'s consumer (traced runs only)."""

    def message_consumed(self, destination: DestinationRef, message: Message) -> None:
        """``message`` left ``destination`` acknowledged (or auto-acknowledged)."""

    def message_enqueued(self, queue: QueueRef, message: Message, cached: bool) -> None: ...

    def redelivering(
        self, destination: DestinationRef, message: Message, sub: SubscriptionRef | None, reason: str
    ) -> None: ...

    def message_expired(self, destination: DestinationRef, message: Message) -> None: ...

    def dead_letter(self, destination: DestinationRef, message: Message, cause: str) -> None:
        """Move ``message`` to its dead letter queue, saying why."""

    def end_of_browse(self, sub: SubscriptionRef) -> None:
        """A browser has been given every message: tell it so."""

    def destination_created(self, destination: DestinationRef) -> None: ...

    # -- queue cursors: paging stored messages in
    def max_page_size(self, destination: QueueRef) -> int: ...

    def page_in_blocked(self, queue: QueueRef) -> None:
        """``queue``'s cursor could not page in for lack of memory."""

    def paged_in(self, queue: QueueRef, count: int) -> None: ...

    # -- topics: slow consumers, file pending cursors
    def subscription_full(self, topic: TopicRef, sub: SubscriptionRef) -> None: ...

    def slow_consumer(self, sub: SubscriptionRef, slow: bool) -> None: ...

    def live_subscription(self, sub: SubscriptionRef) -> bool: ...

    def discarded(self, topic: TopicRef, sub: SubscriptionRef, message: Message, reason: str) -> None: ...

    def swapped(self, topic: TopicRef, sub: SubscriptionRef, event: str, count: int) -> None: ...


class DestinationStore(Protocol):
    """What a destination and its cursors ask of the store (``core.storehooks.StoreHooks``)."""

    # -- queue cursors: stored messages paged in, non-persistent ones spilled
    def mark_delivered(self, message: Message) -> None:
        """A stored message was delivered (its redelivery flag is journalled)."""

    def load_message(self, destination: DestinationRef, paged: PagedRef, payload: bytes | None = None) -> Message: ...

    def load_run(self, destination: DestinationRef, run: PagedRef, budget: int | None) -> tuple[list[Message], int]: ...

    def read_ahead(self, refs: list[PagedRef]) -> list[bytes | None]: ...

    def took(self, paged: PagedRef) -> None:
        """A paged-in message is now held in memory (no longer store-only)."""

    def spill(self, queue: QueueRef, message: Message) -> int:
        """Write a non-persistent ``message`` to the store so the cursor can drop it."""

    def discard_stored(self, ref: object) -> None: ...

    def index_spill(self) -> SpillFile:
        """The scratch file for store cursors' lists of store-only messages."""

    # -- durable subscriptions
    def persist_durable(self, topic: TopicRef, state: DurableRef, message: Message) -> None: ...

    def mark_durable_delivered(self, state: DurableRef, message: Message) -> None: ...

    def settle_durable(self, state: DurableRef, message: Message) -> None: ...

    def durables_changed(self) -> None: ...

    # -- file pending cursors
    def temp_store(self) -> TempStore:
        """The temp store for file pending cursors, opened on first use."""

    def temp_changed(self) -> None: ...

    def payload_of(self, message: Message) -> bytes: ...


class SpaceListener(Protocol):
    """Who waits for memory (``core.flow.ProducerFlowControl``)."""

    def space_freed(self) -> None:
        """Memory was released: producers held by flow control may go on."""


class DestinationParts(Protocol):
    """What a new destination is given: the clock and timers, the trace, the
    broker's memory and the temp store's usage, and the parts it calls."""

    @property
    def clock(self) -> Clock: ...

    @property
    def timers(self) -> Timers: ...

    @property
    def trace(self) -> Tracer: ...

    @property
    def memory(self) -> Usage:
        """The broker's memory, the parent of each destination's."""

    @property
    def temp_usage(self) -> Usage:
        """The temp store's usage (file pending cursors)."""

    @property
    def hooks(self) -> DestinationEvents: ...

    @property
    def storehooks(self) -> DestinationStore: ...

    @property
    def flow(self) -> SpaceListener: ...
