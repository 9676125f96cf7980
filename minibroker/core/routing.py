"""Routing a new message into its destination: a part the ``Broker`` holds (``broker.router``).

Frame handling routes each SEND (and each COMMIT's sends) through it, and
producer flow control each parked SEND it lets in. Untraced, a route is the
store hooks' ``admit`` (journal the message if persistent, then hand it to
the destination); traced, the recorder holds the send until it is routed, so
that its enqueue and dispatch events join it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from minibroker.destinations.destination import Destination
from minibroker.destinations.subscription import Subscription
from minibroker.protocol.message import Message

if TYPE_CHECKING:
    from minibroker.core.context import CoreContext
    from minibroker.core.storehooks import StoreHooks

__all__ = ["Router"]


class Router:
    """``route``: hand a new message to its destination."""

    def __init__(self, context: CoreContext, storehooks: StoreHooks) -> None:
        """The context's sessions name the sending connection in the trace;
        ``storehooks`` admits the message (journals it, then hands it over)."""
        self.trace = context.trace
        self.sessions = context.sessions
        self.session_tag = context.session_tag
        self.storehooks = storehooks
        #: Bound once: every SEND passes through it.
        self.admit = storehooks.admit

    def route(self, destination: Destination, message: Message) -> list[Subscription] | None:
        """Hand a new message to its destination; for a topic blocked at a full
        subscription, the subscriptions still to serve."""
        if not self.trace.enabled:
            return self.admit(destination, message)
        origin = self.sessions.get(message.origin)
        self.trace.send_received(
            origin.tag if origin is not None else self.session_tag(message.origin),
            destination.address,
            message.message_id,
            message.size,
            message.persistent,
            message.priority,
            self.storehooks.txid,
        )
        try:
            return self.admit(destination, message)
        finally:
            self.trace.send_routed()
