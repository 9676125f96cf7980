"""Subscriptions: one consumer's view of a destination.

Theory of operation
-------------------
A subscription belongs to one session and one destination. It decides two
things for the dispatcher:

- *capacity* (``has_capacity``): can this consumer take another message now?
  Its session's outbound buffer must have room (the core never queues more
  than ``write_buffer_limit`` bytes for a socket that has not drained), and in
  the client ack modes the messages delivered but not yet acknowledged must be
  fewer than the prefetch (``activemq.prefetchSize``). In ``auto`` mode the
  broker treats a message as acknowledged when it is handed to the socket
  writer, as ActiveMQ does, so only the buffer bounds it.
- *acceptance* (``accepts``): does its selector (and ``noLocal``) let this
  message through?

``deliver`` writes the MESSAGE frame: a per-delivery head built here
(``subscription``, ``message-id``, ``ack``, ``redelivered``) and the
message's cached tail. Delivered-but-unacknowledged messages are kept in
``dispatched`` in delivery order, so a cumulative ``client`` ACK pops from the
front and a disconnect returns them to the queue in order.

Topic subscriptions also own ``pending``: messages matched while the consumer
had no capacity wait there, in order (ActiveMQ's ``matched`` list, a VM
pending cursor).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from minibroker.connection.outlet import Connection
from minibroker.protocol.codec import escape

if TYPE_CHECKING:
    from minibroker.config import PolicyEntry
    from minibroker.protocol.message import Message

__all__ = ["Subscription", "ACK_MODES", "Connection", "SubscribedDestination"]

ACK_MODES = ("auto", "client", "client-individual")


class SubscribedDestination:
    """The destination a subscription consumes, as the subscription and those who
    hold one use it: the base class of ``destination.Destination`` (a queue or a
    topic), which ``Queue`` and ``Topic`` complete.

    Declared here: ``destination.py`` names ``Subscription`` in its signatures, so
    this module does not import it back. A base class, not a ``Protocol``: the
    compiled build calls a base class's methods directly, a ``Protocol``'s by name."""

    #: Full address, e.g. ``/queue/orders.us``.
    address: str
    policy: PolicyEntry
    #: A tool's own reply queue (the statistics leave it out).
    tool_reply: bool

    def on_delivered(self, sub: Subscription, message: Message) -> None:
        """A MESSAGE frame for ``message`` was written to ``sub``'s consumer."""
        raise NotImplementedError

    def dispatch_to(self, sub: Subscription) -> None:
        """``sub`` has capacity again: give it what it can take."""
        raise NotImplementedError

    def acknowledge(self, sub: Subscription, messages: list[Message]) -> None:
        """``sub``'s consumer acknowledged ``messages``."""
        raise NotImplementedError

    def redeliver(self, sub: Subscription, messages: list[Message], cause: str) -> None:
        """``sub``'s consumer refused ``messages`` (``cause``: "nack" or
        "rollback"): deliver them again, or dead-letter those that have had
        too many deliveries; "reject" (a NACK with ``requeue:false``): dead-letter
        them (or drop them, as the dead letter policy says)."""
        raise NotImplementedError

    def remove_subscription(self, sub: Subscription) -> None:
        """Detach ``sub`` (unsubscribed, aborted, or its session closed)."""
        raise NotImplementedError

    @property
    def subscriptions(self) -> list[Subscription]:
        """Every consumer (the slow consumer checks go through them)."""
        raise NotImplementedError


class Subscription:
    """One SUBSCRIBE: a consumer of a destination."""

    __slots__ = (
        "key",
        "id",
        "session",
        "destination",
        "ack_mode",
        "auto",
        "prefetch",
        "selector",
        "priority",
        "exclusive",
        "no_local",
        "dispatched",
        "pending",
        "redelivered",
        "delivered_count",
        "acked_count",
        "durable",
        "slow",
        "slow_checks",
        "discarded",
        "browser",
        "browse_done",
        "_head",
        "_head_version",
        "trace_ids",
    )

    def __init__(
        self,
        key: int,
        sub_id: str,
        session: Connection,
        destination: SubscribedDestination,
        *,
        ack_mode: str = "auto",
        prefetch: int = 1000,
        selector: Any = None,
        priority: int = 0,
        exclusive: bool = False,
        no_local: bool = False,
        browser: bool = False,
    ) -> None:
        #: Broker-unique number; also the first half of every ack id.
        self.key = key
        #: The id the client chose (the ``id`` header).
        self.id = sub_id
        self.session = session
        self.destination = destination
        self.ack_mode = ack_mode
        self.auto = ack_mode == "auto"
        self.prefetch = prefetch
        #: A compiled selector with ``matches(headers)``, or None.
        self.selector = selector
        self.priority = priority
        self.exclusive = exclusive
        self.no_local = no_local
        #: The durable subscription this consumes (topics), or None.
        self.durable: Any = None
        #: Marked slow by the detector (more than its prefetch pending).
        self.slow = False
        #: Abort-strategy checks that found it slow in a row.
        self.slow_checks = 0
        #: Messages discarded for it (pending_message_limit).
        self.discarded = 0
        #: A queue browser: sees a snapshot, consumes nothing.
        self.browser = browser
        self.browse_done = False
        #: message seq -> message, delivered and awaiting ACK, in delivery order.
        self.dispatched: dict[int, Message] = {}
        #: Topic subscriptions and browsers: messages waiting for capacity.
        self.pending: deque[Message] = deque()
        #: Topic subscriptions: message seq -> deliveries after the first.
        self.redelivered: dict[int, int] = {}
        self.delivered_count = 0
        self.acked_count = 0
        self._head = b""
        self._head_version = ""
        #: (session, sub, dest) as the trace names them: one tuple shared by every dispatch record.
        self.trace_ids = (session.tag, sub_id, destination.address)

    # -- the dispatcher's questions
    def has_capacity(self) -> bool:
        """Can this consumer take one more message right now?"""
        session = self.session
        if not session.writing.can_write or session.leaving:
            return False
        return self.auto or len(self.dispatched) < self.prefetch

    def accepts(self, message: Message) -> bool:
        """Does the selector (and noLocal) let ``message`` through?"""
        if self.no_local and message.origin == self.session.id:
            return False
        if self.selector is None:
            return True
        return bool(self.selector.matches(message.header_view()))

    # -- delivery
    def deliver(self, message: Message) -> None:
        """Write ``message`` to the consumer as a MESSAGE frame, then let the destination
        account for it (``on_delivered``)."""
        self.write_message(message)
        self.destination.on_delivered(self, message)

    def write_message(self, message: Message) -> None:
        """``message``'s MESSAGE frame to the consumer, counted as delivered: ``deliver``
        without the destination's accounting (a destination's straight-through path
        does its own)."""
        session = self.session
        version = session.version
        if self._head_version != version:
            self._head = b"MESSAGE\nsubscription:" + escape(self.id, version).encode("utf-8") + b"\nmessage-id:"
            self._head_version = version
        if self.auto and not message.redeliveries and message.seq not in self.redelivered:
            session.write(self._head + message.rest(version))  # nothing of this delivery's own after the head
            self.delivered_count += 1
            return
        parts = [self._head, message.message_id_wire(version)]
        if not self.auto:
            if version == "1.2":
                parts.append(b"\nack:%d-%d" % (self.key, message.seq))
            self.dispatched[message.seq] = message
        if message.redeliveries or message.seq in self.redelivered:
            parts.append(b"\nredelivered:true")
        parts.append(b"\n")
        parts.append(message.tail(version))
        session.write(b"".join(parts))
        self.delivered_count += 1

    # -- acknowledgement
    def ack_id_of(self, message: Message) -> str:
        """The ``ack`` header value a 1.2 client echoes back for ``message``."""
        return f"{self.key}-{message.seq}"

    def take_acked(self, seq: int, cumulative: bool) -> list[Message]:
        """Remove and return the messages an ACK/NACK of ``seq`` settles.

        ``cumulative`` (client mode) settles every message delivered up to and
        including ``seq``; otherwise only ``seq``. Returns [] if ``seq`` is not
        awaiting acknowledgement.
        """
        if seq not in self.dispatched:
            return []
        if not cumulative:
            return [self.dispatched.pop(seq)]
        settled = []
        for s in list(self.dispatched):
            settled.append(self.dispatched.pop(s))
            if s == seq:
                break
        return settled

    def take_all_dispatched(self) -> list[Message]:
        """Remove and return every unacknowledged message, in delivery order."""
        messages = list(self.dispatched.values())
        self.dispatched.clear()
        return messages

    def describe(self) -> dict[str, Any]:
        """Statistics for ``stat`` and the trace."""
        return {
            "id": self.id,
            "session": self.session.id,
            "destination": self.destination.address,
            "ack": self.ack_mode,
            "prefetch": self.prefetch,
            "in_flight": len(self.dispatched),
            "pending": len(self.pending),
            "delivered": self.delivered_count,
            "acked": self.acked_count,
        }

    def __repr__(self) -> str:
        return f"<Subscription {self.id!r} key={self.key} on {self.destination.address} session={self.session.id}>"


def sorted_by_seq(messages: Iterable[Message]) -> list[Message]:
    """``messages`` in arrival order."""
    return sorted(messages, key=lambda m: m.seq)
