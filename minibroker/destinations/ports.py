"""The broker as its destinations see it: the core's declared interfaces.

Theory of operation
-------------------
The core's imports run one way: ``broker.py`` at the top imports its parts
(frame handling, flow control, store hooks, destination hooks, statistics),
those import the destinations (``registry.py``, ``queue.py``, ``topic.py``,
their cursors), and those import the model (``subscription.py``,
``session.py``, ``destination.py``, ``message.py``). Nothing below imports
anything above it. When a lower part must call back up (a queue tells the
broker a message expired, a subscription writes to its connection), it does
so through a ``Protocol`` declared here, which the part above satisfies
without naming it: the ``Broker`` is a ``DestinationHost``, a ``Session`` is a
``Connection``.

This module imports nothing of the core above it. Where a call names a
destination, subscription or paged reference, the parameter is typed by one of
the aliases below, not by the class, whose module imports this one: to the type
checker these are ``Any``, so what such a call passes is checked where it is used.
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

__all__ = ["Connection", "DestinationHost", "Tracer", "DestinationRef", "SubscriptionRef", "DurableRef", "PagedRef"]

#: A ``destination.Destination`` (a queue or topic), named, not imported.
DestinationRef = Any
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


class DestinationHost(Protocol):
    """The broker, as a destination and its cursors see it (the ``Broker``
    implements it by binding the calls of its parts ``hooks.py`` and ``storehooks.py``): the
    clock and timers it is given, the memory it is charged to, and the events
    it reports back."""

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

    # -- delivery and its outcome
    def delivered(self, sub: SubscriptionRef, message: Message) -> None:
        """A MESSAGE frame went to ``sub``'s consumer (traced runs only)."""

    def mark_delivered(self, message: Message) -> None:
        """A stored message was delivered (its redelivery flag is journalled)."""

    def message_consumed(self, destination: DestinationRef, message: Message) -> None:
        """``message`` left ``destination`` acknowledged (or auto-acknowledged)."""

    def message_enqueued(self, queue: DestinationRef, message: Message, cached: bool) -> None: ...

    def redelivering(
        self, destination: DestinationRef, message: Message, sub: SubscriptionRef | None, reason: str
    ) -> None: ...

    def message_expired(self, destination: DestinationRef, message: Message) -> None: ...

    def dead_letter(self, destination: DestinationRef, message: Message, cause: str) -> None:
        """Move ``message`` to its dead letter queue, saying why."""

    def end_of_browse(self, sub: SubscriptionRef) -> None:
        """A browser has been given every message: tell it so."""

    def space_freed(self) -> None:
        """Memory was released: producers held by flow control may go on."""

    # -- queue cursors: paging stored messages in
    def max_page_size(self, destination: DestinationRef) -> int: ...

    def page_in_blocked(self, queue: DestinationRef) -> None:
        """``queue``'s cursor could not page in for lack of memory."""

    def paged_in(self, queue: DestinationRef, count: int) -> None: ...

    def load_message(self, destination: DestinationRef, paged: PagedRef, payload: bytes | None = None) -> Message: ...

    def load_run(self, destination: DestinationRef, run: PagedRef, budget: int | None) -> tuple[list[Message], int]: ...

    def read_ahead(self, refs: list[PagedRef]) -> list[bytes | None]: ...

    def took(self, paged: PagedRef) -> None:
        """A paged-in message is now held in memory (no longer store-only)."""

    def spill(self, queue: DestinationRef, message: Message) -> int:
        """Write a non-persistent ``message`` to the store so the cursor can drop it."""

    def discard_stored(self, ref: Any) -> None: ...

    def index_spill(self) -> SpillFile:
        """The scratch file for store cursors' lists of store-only messages."""

    # -- topics: slow consumers, durable subscriptions, file pending cursors
    def subscription_full(self, topic: DestinationRef, sub: SubscriptionRef) -> None: ...

    def slow_consumer(self, sub: SubscriptionRef, slow: bool) -> None: ...

    def live_subscription(self, sub: SubscriptionRef) -> bool: ...

    def discarded(self, topic: DestinationRef, sub: SubscriptionRef, message: Message, reason: str) -> None: ...

    def persist_durable(self, topic: DestinationRef, state: DurableRef, message: Message) -> None: ...

    def mark_durable_delivered(self, state: DurableRef, message: Message) -> None: ...

    def settle_durable(self, state: DurableRef, message: Message) -> None: ...

    def durables_changed(self) -> None: ...

    def temp_store(self) -> TempStore:
        """The temp store for file pending cursors, opened on first use."""

    def temp_changed(self) -> None: ...

    def swapped(self, topic: DestinationRef, sub: SubscriptionRef, event: str, count: int) -> None: ...

    def payload_of(self, message: Message) -> bytes: ...
