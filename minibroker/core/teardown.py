"""Tearing a connection down: one routine, every step taken.

A part the ``Broker`` holds (``broker.teardown``), given the core's context and
the parts whose state a connection leaves behind. However a connection ends (DISCONNECT, a protocol
error, a dropped socket, a heart-beat or write timeout, the broker stopping),
``tear_down`` releases everything it held, in this order:

1. its open transactions are rolled back: messages it acknowledged or
   rejected inside one become deliverable again (first, so that they go back
   through subscriptions that still exist);
2. each subscription is removed: a queue takes its unacknowledged messages
   back at the head, a topic drops (or, durable, keeps) what it held;
3. its temporary destinations go, with their messages (SENDs of other
   connections parked on their way to one get an ERROR);
4. what waited for it goes: SENDs parked by producer flow control, frames held
   while it was not read, RECEIPTs waiting for an fsync;
5. its client-id is free again.

Each step runs on its own: a step that raises (a bug) is logged with its
traceback and noted in ``Session.teardown_errors``, and the next step runs
all the same, so one failure never leaves subscriptions, transactions or
messages of the connection behind. ``invariants.py`` checks the result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from minibroker.core.common import log
from minibroker.destinations.queue import Queue

if TYPE_CHECKING:
    from minibroker.connection.session import Session
    from minibroker.core.context import CoreContext
    from minibroker.core.flow import ProducerFlowControl
    from minibroker.core.handlers import FrameHandlers
    from minibroker.core.storehooks import StoreHooks
    from minibroker.destinations.destination import Destination

__all__ = ["ConnectionTeardown"]


class ConnectionTeardown:
    """``tear_down``: release all a closed connection held. A part the broker holds
    (``broker.teardown``); it keeps no state of its own between closes."""

    def __init__(
        self,
        context: CoreContext,
        *,
        handlers: FrameHandlers,
        flow: ProducerFlowControl,
        storehooks: StoreHooks,
        client_ids: dict[str, Session],
    ) -> None:
        """The sibling parts it calls: ``handlers`` (transactions rolled back, subscriptions
        removed), ``flow`` (parked SENDs), ``storehooks`` (RECEIPTs waiting for an fsync);
        ``client_ids`` are the client-ids taken (the handshake's, shared); the context's
        registry holds the temporary destinations."""
        self.registry = context.registry
        self.flow = flow
        self.client_ids = client_ids
        self.storehooks = storehooks
        self._roll_back = handlers.transactions.roll_back
        self._remove_subscription = handlers.remove_subscription

    def tear_down(self, session: Session) -> None:
        """Release everything ``session`` holds (it is already CLOSED and unlisted)."""
        step = self._teardown_step
        for txid, ops in list(session.transactions.items()):
            step(session, f"rolling back transaction {txid!r}", self._roll_back, ops)
        session.transactions.clear()
        for sub in list(session.subscriptions.values()):
            step(
                session,
                f"removing subscription {sub.id!r} on {sub.destination.address}",
                self._remove_subscription,
                session,
                sub,
            )
        session.subscriptions.clear()
        for dest in self.registry.remove_temporaries(session.id):
            step(session, f"removing the temporary destination {dest.address}", self._drop_temporary, dest)
        step(session, "releasing what waited for it", self._release_waits, session)
        if session.client_id is not None and self.client_ids.get(session.client_id) is session:
            del self.client_ids[session.client_id]
        session.aborted.clear()

    def _teardown_step(self, session: Session, what: str, fn: Callable[..., Any], *args: Any) -> None:
        """Run one step of a close; a failure is logged and noted, and the close goes on."""
        try:
            fn(*args)
        except Exception:
            session.teardown_errors.append(what)
            log.exception("connection %d: closing it, %s failed (the rest of the close goes on)", session.id, what)

    def _drop_temporary(self, dest: Destination) -> None:
        """A temporary destination whose owner left: its consumers go, then its messages,
        and SENDs of other connections parked on their way to it get an ERROR."""
        for sub in list(dest.subscriptions):
            self._remove_subscription(cast("Session", sub.session), sub)  # a subscription's connection is a Session
        if isinstance(dest, Queue):
            dest.purge()
        for producer in list(self.flow.blocked):
            waiting = producer.producing.parked
            bound_here = [p for p in waiting if p.destination is dest]
            if not bound_here:
                continue
            kept = [p for p in waiting if p.destination is not dest]
            waiting.clear()  # in place: the broker may be walking this very queue
            waiting.extend(kept)
            for parked in bound_here:
                self.flow.refuse_send(
                    producer, parked.receipt, f"{dest.address} was deleted: the connection that owned it closed"
                )
            self.flow.retry = True  # the producer may have nothing left to wait for

    def _release_waits(self, session: Session) -> None:
        """Drop what waited on ``session``: parked SENDs, held frames, RECEIPTs owed after an fsync."""
        if session in self.flow.blocked:
            self.flow.blocked.remove(session)
        session.producing.close()  # its parked SENDs never entered a destination: nothing to release
        session.reading.close()  # its held frames go, and every reason it was not read
        self.storehooks.forget_session(session)
