"""Producer flow control: ActiveMQ's two ways of holding a producer back.

A mixin of ``Broker``. When a destination's memory is full (its own limit, or
the broker's), or the store is full for a persistent message, a SEND is
*parked* instead of entering the destination: a producer that asked for a
RECEIPT does not get it until there is room (the connection keeps being
read); one that asked for none stops being read (TCP backpressure), so
anything else it sends (ACKs included) waits too. With
``send_fail_if_no_space`` the producer gets an ERROR instead, at once or
after ``send_fail_if_no_space_after_timeout``; as in ActiveMQ the connection
stays open. Parked sends enter, in order, as soon as space is freed.

A full disk (the store marked full: ``_no_space``) holds persistent messages back
the same way as a full store limit: their producers wait, or with
``send_fail_if_no_space`` get an ERROR that names the store and "no space".
"""

from __future__ import annotations

from typing import Any

from .actions import PauseReading, ResumeReading
from .codec import encode
from .coreutil import DEFERRED, ParkedSend, header_text, log
from .destination import Destination
from .errors import NoSpaceError, ResourceLimitError
from .frames import Frame
from .message import Message
from .session import Session

__all__ = ["ProducerFlowControl"]


class ProducerFlowControl:
    """Parking and releasing SENDs."""

    def _has_room(self, destination: Destination, message: Message) -> bool:
        """May ``message`` enter ``destination`` now? (ActiveMQ ``Queue.send``'s checks)"""
        if not destination.policy.producer_flow_control and not destination.policy.send_fail_if_no_space:
            return True
        if message.persistent and self.store is not None and (self.store_usage.is_full() or self._no_space):
            return False
        if not message.persistent and self.temp_usage.is_full():
            return False  # ActiveMQ Queue.checkUsage / Topic.send: "Temp Store is Full"
        if destination.kind == "topic":
            return True  # each subscription's pending cursor decides (Topic.accept), as TopicSubscription.add
        return not destination.memory.is_full()

    def _park(
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
        if message.persistent and self.store is not None and self._no_space and self.store_full:
            text = (
                f"{self.store_full}. Persistent store is full (no space left on the disk). "
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
                f"temp usage ({self.temp_usage.percent}%) or memory usage ({self.memory.percent}%) limit reached, "
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
                f"Memory {usage.percent}% of {usage.limit} bytes, broker {self.memory.percent}%."
            )
        if policy.send_fail_if_no_space and not policy.send_fail_if_no_space_after_timeout:
            self._refuse_send(session, receipt, text)
            return DEFERRED
        deadline = None
        if policy.send_fail_if_no_space_after_timeout:
            deadline = self.clock.now() + policy.send_fail_if_no_space_after_timeout / 1000
            self.timers.call_at(deadline, self._park_timeout, session, message)
        session.parked.append(ParkedSend(destination, message, receipt, deadline, resume))
        if len(session.parked) == 1:
            self._blocked.append(session)
            self._warn_blocked(session, destination, text)
            session.blocked_since = self.clock.now()
            if self.trace.enabled:
                kind, pct = self._holding_usage(text, resume, usage)
                session.blocked_usage = kind
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
        now = self.clock.now()
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

    def _refuse_send(self, session: Session, receipt: str | None, text: str) -> None:
        """An ERROR for one SEND; the connection stays open, as in ActiveMQ."""
        headers = {"message": header_text(text)}
        if receipt is not None:
            headers["receipt-id"] = receipt
        session.write(encode(Frame("ERROR", headers, b""), session.version))
        if self.trace.enabled:
            code = "enqueue_threshold" if "Enqueue capacity threshold" in text else "resource_full"
            self._emit("error", session=session.tag, client_id=session.client_id, message=text, code=code, fatal=False)

    def _park_timeout(self, session: Session, message: Message) -> None:
        for i, parked in enumerate(session.parked):
            if parked.message is message:
                del session.parked[i]
                dest = parked.destination
                self._refuse_send(
                    session,
                    parked.receipt,
                    f"Usage Manager Memory Limit Wait Timeout. Stopping producer (session {session.id}) to prevent flooding "
                    f"{dest.kind}://{dest.name} (waited {dest.policy.send_fail_if_no_space_after_timeout} ms).",
                )
                self._retry_blocked = True
                return

    def space_freed(self) -> None:
        """Memory or store space was released: blocked producers and cursors may go on."""
        if self._blocked or self._blocked_cursors:
            self._retry_blocked = True

    def _unblock_producers(self) -> None:
        """Let parked sends in, in order, while there is room."""
        for session in list(self._blocked):
            parked_dest = session.parked[0].destination.address if session.parked else ""
            while session.parked:
                parked = session.parked[0]
                if parked.resume is not None:
                    # A topic dispatch stopped at a full subscription: go on from there.
                    remaining = parked.destination.accept(parked.message, parked.resume)  # type: ignore[call-arg]
                    if remaining is not None:
                        session.parked[0] = parked._replace(resume=remaining)
                        break
                    session.parked.popleft()
                elif not self._has_room(parked.destination, parked.message):
                    break
                else:
                    session.parked.popleft()
                    try:
                        remaining = self._route(parked.destination, parked.message)
                    except NoSpaceError:  # the disk is still full: wait on (at the head)
                        session.parked.appendleft(parked)
                        break
                    except ResourceLimitError as exc:
                        self._refuse_send(session, parked.receipt, exc.message)
                        continue
                    if remaining is not None:
                        session.parked.appendleft(parked._replace(resume=remaining))
                        break
                if (
                    parked.receipt is not None
                    and self._after_write(session, parked.receipt, parked.message.store_ref is not None) is None
                ):
                    self._send_receipt(session, parked.receipt)
            if session.parked:
                continue
            self._blocked.remove(session)
            if self.trace.enabled:
                usage = session.blocked_usage
                pct = {"store": self.store_usage, "temp": self.temp_usage}.get(usage, self.memory).percent
                self._emit(
                    "flow_unblock",
                    session=session.tag,
                    dest=parked_dest,
                    usage=usage,
                    waited=round(self.clock.now() - session.blocked_since, 6),
                    pct=pct,
                )
            self._start_reading(session, "flow")

    def _stop_reading(self, session: Session, reason: str) -> None:
        """Stop reading ``session``'s socket for ``reason`` (TCP backpressure on the peer)."""
        if not session.pause_reasons:
            self._control.append(PauseReading(session.id))
        session.pause_reasons.add(reason)

    def _start_reading(self, session: Session, reason: str) -> None:
        """``reason`` is over; read again (and handle what was held) once no reason is left."""
        if reason not in session.pause_reasons:
            return
        session.pause_reasons.discard(reason)
        if not session.pause_reasons and session.is_open:
            session.read_resumed_at = self.clock.now()
            self._control.append(ResumeReading(session.id))
            self._replay_held(session)

    def _replay_held(self, session: Session) -> None:
        held = session.held_frames
        while held and session.is_open and not session.reading_paused:
            self._handle(session, held.popleft())
        if not held and session.held_error is not None and session.is_open and not session.reading_paused:
            error, session.held_error = session.held_error, None
            self._fail(session, error, None)
