"""The broker as its destinations see it: the core's declared interfaces.

Theory of operation:

- Imports run one way: the core (``core/``) imports the destinations, and the
  destinations import the model (``subscription.py``, ``session.py``,
  ``message.py``). Nothing below imports anything above it.
- Where a lower part must call back up, it calls through a base class declared
  here, which the part above derives from (a base class, not a ``Protocol``: the
  compiled build calls a base class's methods directly, a ``Protocol``'s by name):

  - ``DestinationEvents``: what a destination tells the broker (a message
    consumed, expired, dead-lettered; a cursor that could not page in ...):
    ``core.hooks.DestinationHooks``;
  - ``DestinationStore``: what a destination asks of the store (load a stored
    message, spill one, journal a durable subscription's copy ...):
    ``core.storehooks.StoreHooks``;
  - ``SpaceListener``: memory was released (producers held by flow control may
    go on): ``core.flow.ProducerFlowControl``;
  - ``DestinationParts`` (a ``Protocol``, read once per destination): what a new
    destination is given: the clock, timers, trace and memory, and the three
    parts above (the ``Broker`` holds them);
  - ``Connection``: a session as its subscriptions write to it, the base class
    of ``Session``, declared on the connection's floor (``connection/outlet.py``);
  - ``SubscribedDestination``: the destination as a subscription's holders use
    it, declared in ``subscription.py``, and ``DestinationHandle`` (here): the
    destination as the broker settles its messages; ``destination.Destination``
    derives from the second, which derives from the first.

- Where a signature names a destination, its type is what the broker's side
  reads of it: ``DestinationHandle``, or the ``Protocol`` ``DestinationView``
  (its address, policy and memory), and a durable subscription's stored copies
  are ``DurableCopies``: the classes' modules import this one, and the project
  has no import circle, not even for the type checker. A subscription (``subscription.py``) and a store-only message
  (``paged.py``) are named by their classes: those modules import nothing of
  the destinations.
"""

from __future__ import annotations

from typing import Protocol

from minibroker.config import PolicyEntry
from minibroker.connection.clock import Clock
from minibroker.connection.timers import Timers
from minibroker.destinations.paged import PagedRef, StoreRun
from minibroker.destinations.subscription import Connection, SubscribedDestination, Subscription
from minibroker.destinations.usage import Usage
from minibroker.durability.persistence import StoreRef
from minibroker.protocol.message import Message
from storage import TempStore
from storage.spill import SpillFile

__all__ = [
    "Connection",
    "DestinationEvents",
    "DestinationHandle",
    "DestinationParts",
    "DestinationStore",
    "DestinationView",
    "DurableCopies",
    "SpaceListener",
    "Tracer",
]


class DestinationView(Protocol):
    """A queue or topic (``destination.Destination``) as a trace event, a page-in or a
    store write names it: its address, its policy and its memory."""

    @property
    def address(self) -> str: ...

    @property
    def policy(self) -> PolicyEntry: ...

    @property
    def memory(self) -> Usage: ...


class DestinationHandle(SubscribedDestination):
    """A queue or topic as the broker settles its messages: the base class of
    ``destination.Destination``. What ``DestinationView`` reads, its kind and name
    (a dead letter queue's name is made of them), whether it is a dead letter queue
    (the broker marks it so when it is made), and the release of a message it held;
    what its subscriptions call, from its own base class."""

    #: The kind: "queue" or "topic".
    kind: str
    name: str
    memory: Usage
    is_dlq: bool

    def release(self, message: Message) -> None:
        """``message`` is no longer held here: its memory is freed when nothing else holds it."""
        raise NotImplementedError


class DurableCopies(Protocol):
    """A durable topic subscription (``topic.DurableState``) as the store keeps its copies:
    its name and client id (its journal key), and its stored copy of each persistent message."""

    @property
    def client_id(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def refs(self) -> dict[int, StoreRef]:
        """message seq -> its stored copy for this subscription."""


class Tracer(Protocol):
    """The trace recorder, as far as the core asks: is it on."""

    @property
    def enabled(self) -> bool: ...


class DestinationEvents:
    """What a destination and its cursors tell the broker (``core.hooks.DestinationHooks``)."""

    # -- delivery and its outcome
    def delivered(self, sub: Subscription, message: Message) -> None:
        """A MESSAGE frame went to ``sub``'s consumer (traced runs only)."""
        raise NotImplementedError

    def message_consumed(self, destination: DestinationHandle, message: Message) -> None:
        """``message`` left ``destination`` acknowledged (or auto-acknowledged)."""
        raise NotImplementedError

    def message_enqueued(self, queue: DestinationView, message: Message, cached: bool) -> None:
        raise NotImplementedError

    def redelivering(
        self, destination: DestinationHandle, message: Message, sub: Subscription | None, reason: str
    ) -> None:
        raise NotImplementedError

    def message_expired(self, destination: DestinationHandle, message: Message) -> None:
        raise NotImplementedError

    def dead_letter(self, destination: DestinationHandle, message: Message, cause: str) -> None:
        """Move ``message`` to its dead letter queue, saying why."""
        raise NotImplementedError

    def end_of_browse(self, sub: Subscription) -> None:
        """A browser has been given every message: tell it so."""
        raise NotImplementedError

    def destination_created(self, destination: DestinationHandle) -> None:
        raise NotImplementedError

    # -- queue cursors: paging stored messages in
    def max_page_size(self, destination: DestinationView) -> int:
        raise NotImplementedError

    def page_in_blocked(self, queue: DestinationView) -> None:
        """``queue``'s cursor could not page in for lack of memory."""
        raise NotImplementedError

    def paged_in(self, queue: DestinationView, count: int) -> None:
        raise NotImplementedError

    # -- topics: slow consumers, file pending cursors
    def subscription_full(self, topic: DestinationView, sub: Subscription) -> None:
        raise NotImplementedError

    def slow_consumer(self, sub: Subscription, slow: bool) -> None:
        raise NotImplementedError

    def live_subscription(self, sub: Subscription) -> bool:
        raise NotImplementedError

    def discarded(self, topic: DestinationView, sub: Subscription, message: Message, reason: str) -> None:
        raise NotImplementedError

    def swapped(self, topic: DestinationView, sub: Subscription, event: str, count: int) -> None:
        raise NotImplementedError


class DestinationStore:
    """What a destination and its cursors ask of the store (``core.storehooks.StoreHooks``)."""

    # -- queue cursors: stored messages paged in, non-persistent ones spilled
    def mark_delivered(self, message: Message) -> None:
        """A stored message was delivered (its redelivery flag is journalled)."""
        raise NotImplementedError

    def load_message(self, destination: DestinationView, paged: PagedRef, payload: bytes | None = None) -> Message:
        raise NotImplementedError

    def load_run(self, destination: DestinationView, run: StoreRun, budget: int | None) -> tuple[list[Message], int]:
        raise NotImplementedError

    def read_ahead(self, refs: list[PagedRef]) -> list[bytes | None]:
        raise NotImplementedError

    def took(self, paged: PagedRef) -> None:
        """A paged-in message is now held in memory (no longer store-only)."""
        raise NotImplementedError

    def spill(self, queue: DestinationView, message: Message) -> int:
        """Write a non-persistent ``message`` to the store so the cursor can drop it."""
        raise NotImplementedError

    def discard_stored(self, ref: object) -> None:
        raise NotImplementedError

    def index_spill(self) -> SpillFile:
        """The scratch file for store cursors' lists of store-only messages."""
        raise NotImplementedError

    # -- durable subscriptions
    def persist_durable(self, topic: DestinationView, state: DurableCopies, message: Message) -> None:
        raise NotImplementedError

    def mark_durable_delivered(self, state: DurableCopies, message: Message) -> None:
        raise NotImplementedError

    def settle_durable(self, state: DurableCopies, message: Message) -> None:
        raise NotImplementedError

    def durables_changed(self) -> None:
        raise NotImplementedError

    # -- file pending cursors
    def temp_store(self) -> TempStore:
        """The temp store for file pending cursors, opened on first use."""
        raise NotImplementedError

    def temp_changed(self) -> None:
        raise NotImplementedError

    def payload_of(self, message: Message) -> bytes:
        raise NotImplementedError


class SpaceListener:
    """Who waits for memory (``core.flow.ProducerFlowControl``)."""

    def space_freed(self) -> None:
        """Memory was released: producers held by flow control may go on."""
        raise NotImplementedError


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
