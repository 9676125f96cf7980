"""Producer flow control: ActiveMQ's two ways of holding a producer back.

``ProducerFlowControl`` is a part the ``Broker`` holds (``broker.flow``). When
a destination's memory is full (its own limit, or the broker's), or the store
is full for a persistent message, a SEND is *parked* instead of entering the
destination: a producer that asked for a RECEIPT does not get it until there
is room (the connection keeps being read); one that asked for none stops being
read (TCP backpressure), so anything else it sends (ACKs included) waits too.
With ``send_fail_if_no_space`` the producer gets an ERROR instead, at once or
after ``send_fail_if_no_space_after_timeout``; as in ActiveMQ the connection
stays open. Parked sends enter, in order, as soon as space is freed.

A full disk (``disk_full``, set by the store hooks while a write found no
space) holds persistent messages back the same way as a full store limit:
their producers wait, or with ``send_fail_if_no_space`` get an ERROR that
names the store and "no space".

Its own state: the sessions with parked sends (``blocked``, in blocking order),
whether freed space should let them retry (``retry``, acted on at the end of
the broker's event), the queues whose cursor waits for memory
(``blocked_cursors``), the disk-full gate, and when each destination last warned
of a blocked producer. What it is given:

- the core's context (``context.CoreContext``): the usages, the store, the clock, the trace;
- the reading control (``reading.py``), to pause and resume a producer's socket;
- when it releases parked sends (``unblock_producers``): the route and the store
  hooks, for their RECEIPTs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from minibroker.connection.session import Session
from minibroker.core.common import DEFERRED, ParkedSend, log
from minibroker.destinations.destination import Destination
from minibroker.destinations.ports import SpaceListener
from minibroker.errors import NoSpaceError, ResourceLimitError
from minibroker.frames import Frame
from minibroker.protocol.codec import encode
from minibroker.protocol.headers import header_text
from minibroker.protocol.message import Message

if TYPE_CHECKING:
    from minibroker.core.context import CoreContext
    from minibroker.core.reading import ReadingControl
    from minibroker.destinations.queue import Queue

__all__ = ["ProducerFlowControl", "Receipts"]


class Receipts(Protocol):
    """The store hooks, as flow control answers a released SEND's RECEIPT
    (``storehooks.StoreHooks``: a RECEIPT waits for the fsync of what was written)."""

    def write_mark(self) -> Any:
        """Where the journal's writes stand now."""

    def receipt(self, session: Session, receipt: str, mark: Any) -> None:
        """The RECEIPT of a frame handled since ``write_mark`` gave ``mark``."""


class ProducerFlowControl(SpaceListener):
    """Parking and releasing SENDs: the broker's producer flow control."""

    def __init__(self, context: CoreContext, *, reading: ReadingControl) -> None:
        """``reading`` pauses a producer's socket while its SEND is parked without a RECEIPT."""
        self.context = context
        # Bound once: ``has_room`` runs for every SEND and reads these without a hop
        # through the context (parking and releasing read the rest through it).
        self.store = context.store
        self.store_usage = context.store_usage
        self.temp_usage = context.temp_usage
        self._emit = context.trace.event
        self._stop_reading = reading.stop
        self._start_reading = reading.start
        #: Sessions with producers parked by flow control, in blocking order.
        self.blocked: list[Session] = []
        #: Queues whose cursor could not page in for lack of memory, in the order they
        #: blocked (a dict used as an ordered set: retries are first come, first served).
        self.blocked_cursors: dict[Queue, None] = {}
        #: Space was freed (or a parked send went): ``unblock_producers`` should run.
        self.retry = False
        #: While the disk is full, why (set by the store hooks): persistent messages
        #: wait (or are refused) without trying it. None: the disk is tried.
        self.disk_full: str | None = None
        #: destination address -> when its "producer blocked" warning was last logged.
        self._last_block_warning: dict[str, float] = {}

    def has_room(self, destination: Destination, message: Message) -> bool:
        """May ``message`` enter ``destination`` now? (ActiveMQ ``Queue.send``'s checks)"""
        policy = destination.policy
        if not policy.producer_flow_control and not policy.send_fail_if_no_space:
            return True
        if message.persistent:
            if self.store is not None and (self.store_usage.is_full() or self.disk_full is not None):
                return False
        elif self.temp_usage.is_full():
            return False  # ActiveMQ Queue.checkUsage / Topic.send: "Temp Store is Full"
        if destination.kind == "topic":
            return True  # each subscription's pending cursor decides (Topic.accept), as TopicSubscription.add
        return not destination.memory.is_full()

    def park(
        self,
        session: Session,
        destination: Destination,
        message: Message,
        receipt: str | None,
        resume: list[Any] | None = None,
    ) -> Any:
        """Block a producer: withhold its RECEIPT, or stop reading it (ActiveMQ's two ways)."""
        policy = destination.policy
        usage = destination.memory
        if message.persistent and self.store is not None and self.disk_full is not None:
            text = (
                f"{self.disk_full}. Persistent store is full (no space left on the disk). "
                f"Stopping producer (session {session.id}) to prevent flooding {destination.kind}://{destination.name}."
            )
        elif message.persistent and self.store is not None and self.store_usage.is_full():
            store = self.store_usage
            text = (
                f"Persistent store is Full, {store.percent}% of {store.limit}. "
                f"Stopping producer (session {session.id}) to prevent flooding {destination.kind}://{destination.name}."
            )
            rings = self.store.ring_reservation()
            if rings is not None:
                text += " " + rings.explain()
        elif resume is not None:
            text = (
                f"Pending message cursor of a subscription of {destination.kind}://{destination.name} is full, "
                f"temp usage ({self.temp_usage.percent}%) or memory usage ({self.context.memory.percent}%) limit reached, "
                "blocking message add() pending the release of resources."
            )
        elif not message.persistent and self.temp_usage.is_full():
            temp = self.temp_usage
            text = (
                f"Temp Store is Full ({temp.percent}% of {temp.limit}). "
                f"Stopping producer (session {session.id}) to prevent flooding {destination.kind}://{destination.name}."
            )
        else:
            text = (
                f"Usage Manager Memory Limit reached on {destination.kind}://{destination.name}. "
                f"Memory {usage.percent}% of {usage.limit} bytes, broker {self.context.memory.percent}%."
            )
        if policy.send_fail_if_no_space and not policy.send_fail_if_no_space_after_timeout:
            self.refuse_send(session, receipt, text)
            return DEFERRED
        deadline = None
        if policy.send_fail_if_no_space_after_timeout:
            deadline = self.context.clock.now() + policy.send_fail_if_no_space_after_timeout / 1000
            self.context.timers.call_at(deadline, self._park_timeout, session, message)
        if session.producing.park(
            ParkedSend(destination, message, receipt, deadline, resume), self.context.clock.now()
        ):
            self.blocked.append(session)
            self._warn_blocked(session, destination, text)
            if self.context.trace.enabled:
                kind, pct = self._holding_usage(text, resume, usage)
                session.producing.usage = kind
                self._emit(
                    "flow_block",
                    session=session.tag,
                    dest=destination.address,
                    usage=kind,
                    pct=pct,
                    msg=message.message_id,
                )
        if receipt is None:
            self._stop_reading(session, "flow")
        return DEFERRED

    def _holding_usage(self, text: str, resume: Any, usage: Any) -> tuple[str, int]:
        """Which usage holds a producer (the trace's ``usage``), and its percent."""
        if text.startswith("Persistent store") or "Persistent store is full" in text:
            return "store", self.store_usage.percent
        if text.startswith("Temp Store") or (resume is not None and self.temp_usage.is_full()):
            return "temp", self.temp_usage.percent
        return "memory", usage.percent

    def _warn_blocked(self, session: Session, destination: Destination, text: str) -> None:
        interval = destination.policy.blocked_producer_warning_interval / 1000
        now = self.context.clock.now()
        last = self._last_block_warning.get(destination.address)
        if last is None or now - last >= interval:
            self._last_block_warning[destination.address] = now
            log.warning(
                "%s Producer (session %d, %s) stopped to prevent flooding %s.",
                text,
                session.id,
                session.peer,
                destination.address,
            )

    def refuse_send(self, session: Session, receipt: str | None, text: str) -> None:
        """An ERROR for one SEND; the connection stays open, as in ActiveMQ."""
        headers = {"message": header_text(text)}
        if receipt is not None:
            headers["receipt-id"] = receipt
        session.write(encode(Frame("ERROR", headers, b""), session.version))
        if self.context.trace.enabled:
            code = "enqueue_threshold" if "Enqueue capacity threshold" in text else "resource_full"
            self._emit("error", session=session.tag, client_id=session.client_id, message=text, code=code, fatal=False)

    def _park_timeout(self, session: Session, message: Message) -> None:
        for i, parked in enumerate(session.producing.parked):
            if parked.message is message:
                del session.producing.parked[i]
                dest = parked.destination
                self.refuse_send(
                    session,
                    parked.receipt,
                    f"Usage Manager Memory Limit Wait Timeout. Stopping producer (session {session.id}) to prevent flooding "
                    f"{dest.kind}://{dest.name} (waited {dest.policy.send_fail_if_no_space_after_timeout} ms).",
                )
                self.retry = True
                return

    def space_freed(self) -> None:
        """Memory or store space was released: blocked producers and cursors may go on."""
        if self.blocked or self.blocked_cursors:
            self.retry = True

    def unblock_producers(self, route: Callable[[Destination, Message], list[Any] | None], receipts: Receipts) -> None:
        """Let parked sends in, in order, while there is room.

        - Each goes in through ``route`` (``routing.Router``), and its RECEIPT out
          through ``receipts`` (the store hooks).
        - Both come with the call, not when this part is made: the store hooks are
          made after flow control, for they refuse its parked SENDs when the store fails.
        """
        for session in list(self.blocked):
            waiting = session.producing.parked
            parked_dest = waiting[0].destination.address if waiting else ""
            while waiting:
                parked = waiting[0]
                if parked.resume is not None:
                    # A topic dispatch stopped at a full subscription: go on from there.
                    remaining = parked.destination.accept(parked.message, parked.resume)  # type: ignore[call-arg]
                    if remaining is not None:
                        waiting[0] = parked._replace(resume=remaining)
                        break
                    waiting.popleft()
                elif not self.has_room(parked.destination, parked.message):
                    break
                else:
                    waiting.popleft()
                    try:
                        remaining = route(parked.destination, parked.message)
                    except NoSpaceError:  # the disk is still full: wait on (at the head)
                        waiting.appendleft(parked)
                        break
                    except ResourceLimitError as exc:
                        self.refuse_send(session, parked.receipt, exc.message)
                        continue
                    if remaining is not None:
                        waiting.appendleft(parked._replace(resume=remaining))
                        break
                if parked.receipt is not None:
                    # Parts of a parked message may have been written in earlier turns (a
                    # topic's durable copies before it parked): a persistent one waits for an fsync.
                    mark = None if parked.message.persistent else receipts.write_mark()
                    receipts.receipt(session, parked.receipt, mark)
            if waiting:
                continue
            self.blocked.remove(session)
            session.producing.unblock()
            if self.context.trace.enabled:
                usage = session.producing.usage
                pct = {"store": self.store_usage, "temp": self.temp_usage}.get(usage, self.context.memory).percent
                self._emit(
                    "flow_unblock",
                    session=session.tag,
                    dest=parked_dest,
                    usage=usage,
                    waited=round(self.context.clock.now() - session.producing.blocked_since, 6),
                    pct=pct,
                )
            self._start_reading(session, "flow")
