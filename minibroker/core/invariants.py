"""What must hold once a connection has ended: a checker for tests and benches.

Theory of operation
-------------------
Closing a connection (``Broker._close``, ``teardown.py``) must leave nothing
of it behind, whatever the connection did and however it ended (DISCONNECT,
a protocol error, a dropped socket, a timeout):

- no subscription of it in any destination (no ghost consumer), in the
  broker's ack-id index, or still active on a durable subscription;
- no open transaction, no SEND parked by producer flow control, no RECEIPT
  waiting for an fsync, no place among the blocked producers, no bytes of an
  incomplete frame (in its parser, or charged to the broker's total);
- no temporary destination it owned (nor another connection's SEND parked on
  its way to one), no client-id it held;
- every message it held unacknowledged (delivered, or acknowledged inside a
  transaction that never committed) is back on its queue: in the cache, in
  the store, or already delivered to another consumer. One that is in none
  of these must have left the queue the way messages do (consumed by an auto
  consumer in the same instant, expired); the checker allows as many as the
  queue's dequeue and expiry counts grew by.

``TeardownChecker`` is a close observer (``Broker.close_observer``): the
broker calls ``closing`` just before it tears a connection down and
``closed`` just after; the checker notes what the connection held, then
checks the list above and keeps what it found wrong in ``violations``.
``broker_leftovers`` checks the broker-wide half alone (every subscription a
destination lists belongs to an open connection that lists it too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from minibroker.core.common import SETTLING_OPS

if TYPE_CHECKING:
    from minibroker.connection.session import Session
    from minibroker.core.broker import Broker
    from minibroker.destinations.queue import Queue
    from minibroker.protocol.message import Message

__all__ = ["Departure", "TeardownChecker", "broker_leftovers", "departure_of", "leftovers_of"]


@dataclass
class Departure:
    """What a connection held just before its close (``departure_of``)."""

    session: "Session"
    #: queue -> the messages the connection held unacknowledged there.
    unacked: dict["Queue", list["Message"]] = field(default_factory=dict)
    #: queue -> its dequeue plus expiry count before the close.
    gone_before: dict["Queue", int] = field(default_factory=dict)
    #: The connection's temporary destinations (dropped with it, messages and all).
    temporaries: set[str] = field(default_factory=set)


def departure_of(broker: Broker, session: Session) -> Departure:
    """Note what ``session`` holds now, before its close."""
    from minibroker.destinations.queue import Queue

    departure = Departure(session)
    held: list[tuple[Any, list[Message]]] = [
        (sub.destination, list(sub.dispatched.values())) for sub in session.subscriptions.values() if not sub.browser
    ]
    for ops in session.transactions.values():
        held += [(sub.destination, list(messages)) for op, sub, messages in ops if op in SETTLING_OPS]
    for destination, messages in held:
        if isinstance(destination, Queue) and messages:
            departure.unacked.setdefault(destination, []).extend(messages)
            departure.gone_before[destination] = destination.dequeued + destination.expired
    departure.temporaries = {d.address for d in broker.destinations.values() if d.owner == session.id}
    return departure


def _not_on_queue(queue: Queue, messages: list[Message]) -> list[Message]:
    """Those of ``messages`` that are not on ``queue``: cached, store-only, or delivered to a consumer."""
    cached = {id(m) for m in queue.pending}
    missing = [
        m for m in messages if id(m) not in cached and not any(m.seq in sub.dispatched for sub in queue.consumers)
    ]
    if missing:
        stored = {ref.seq for ref in queue.cursor.store_only}
        missing = [m for m in missing if m.seq not in stored]
    return missing


def leftovers_of(broker: Broker, departure: Departure) -> list[str]:
    """What the closed connection of ``departure`` left behind (empty: nothing)."""
    session = departure.session
    sid = session.id
    found: list[str] = []
    if sid in broker.sessions:
        found.append(f"connection {sid} is still listed as open")
    found += [f"connection {sid}: its close failed at {step}" for step in session.teardown_errors]
    if session.subscriptions:
        found.append(f"connection {sid} still lists subscriptions {sorted(session.subscriptions)}")
    if session.transactions:
        found.append(f"connection {sid} still has open transactions {sorted(session.transactions)}")
    if session.partial_bytes or session.parser.buffered:
        found.append(
            f"connection {sid} still holds {session.parser.buffered} bytes of an incomplete frame "
            f"({session.partial_bytes} charged to the broker)"
        )
    if session.producing.parked:
        found.append(f"connection {sid} still has {len(session.producing.parked)} SENDs parked by flow control")
    if session in broker.flow.blocked:
        found.append(f"connection {sid} is still among the blocked producers")
    if any(s is session for _, s, _ in broker.storehooks.waiters):
        found.append(f"connection {sid} still has RECEIPTs waiting for an fsync")
    if any(s.session is session for s in broker.handlers.subs_by_key.values()):
        found.append(f"connection {sid} still has subscriptions in the ack-id index")
    if any(s is session for s in broker.client_ids.values()):
        found.append(f"connection {sid} still holds a client-id")
    owned = [d.address for d in broker.destinations.values() if d.owner == sid]
    if owned:
        found.append(f"connection {sid}'s temporary destinations are still there: {owned}")
    for destination in broker.destinations.values():
        ghosts = [s.id for s in destination.subscriptions if s.session is session]
        if ghosts:
            found.append(f"{destination.address} still lists subscriptions {ghosts} of connection {sid}")
        for state in getattr(destination, "durables", {}).values():
            if any(member.session is session for member in state.members()):
                found.append(
                    f"durable subscription {state.name!r} on {destination.address} is still active for connection {sid}"
                )
    waiting = [
        p.destination.address
        for s in broker.flow.blocked
        for p in s.producing.parked
        if p.destination.address in departure.temporaries
    ]
    if waiting:
        found.append(f"SENDs of other connections still wait for connection {sid}'s deleted {sorted(set(waiting))}")
    for queue, messages in departure.unacked.items():
        if queue.address in departure.temporaries:
            continue  # a temporary queue goes with its owner
        missing = _not_on_queue(queue, messages)
        left = queue.dequeued + queue.expired - departure.gone_before[queue]
        if len(missing) > left:
            found.append(
                f"{queue.address}: {len(missing) - left} of the messages connection {sid} held unacknowledged "
                f"are not back on the queue (e.g. {missing[0].message_id})"
            )
    return found


def broker_leftovers(broker: Broker) -> list[str]:
    """Broker-wide: every subscription a destination lists is one of an open connection's."""
    found = []
    for destination in broker.destinations.values():
        for sub in destination.subscriptions:
            session = sub.session
            owner = broker.sessions.get(session.id)
            if owner is None or owner is not session or owner.subscriptions.get(sub.id) is not sub:
                found.append(
                    f"{destination.address} lists subscription {sub.id!r} of connection {session.id}, "
                    "which no open connection has"
                )
    held = sum(s.partial_bytes for s in broker.sessions.values())
    if broker.partial_bytes != held:
        found.append(
            f"the broker counts {broker.partial_bytes} bytes of incomplete frames, its open connections {held}"
        )
    return found


class TeardownChecker:
    """A close observer that checks every connection's end (see the module docstring).

    Install with ``broker.close_observer = TeardownChecker()``; read ``violations``.
    A ``strict`` checker raises ``AssertionError`` at the close that left something
    behind, so that a test fails where the fault is.
    """

    def __init__(self, *, strict: bool = False) -> None:
        self.strict = strict
        self._departing: dict[int, Departure] = {}
        #: What was found wrong, one line each, in the order connections ended.
        self.violations: list[str] = []
        #: Connections whose end was checked.
        self.checked = 0

    def closing(self, broker: Broker, session: Session) -> None:
        """The broker is about to tear ``session`` down."""
        self._departing[session.id] = departure_of(broker, session)

    def closed(self, broker: Broker, session: Session) -> None:
        """The broker has torn ``session`` down."""
        departure = self._departing.pop(session.id, None) or Departure(session)
        self.checked += 1
        found = leftovers_of(broker, departure) + broker_leftovers(broker)
        self.violations += found
        if found and self.strict:
            raise AssertionError(f"the end of connection {session.id} left something behind: {found}")
