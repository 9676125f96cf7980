"""Names the core's modules share: the deferred-RECEIPT sentinel, the settling
operations, a parked SEND, the core's logger."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from minibroker.destinations.destination import Destination
    from minibroker.protocol.message import Message

__all__ = ["DEFERRED", "SETTLING_OPS", "ParkedSend", "Ignored", "log"]

log = logging.getLogger("minibroker.broker")

#: A handler's return value meaning "I will send (or have sent) the RECEIPT myself".
DEFERRED = object()

#: A transaction's operations that settle delivered messages (the rest are sends);
#: "reject" is a NACK with RabbitMQ's ``requeue:false``.
SETTLING_OPS = ("ack", "nack", "reject")


class Ignored(Exception):
    """A frame the broker drops without complaint (an ACK for an aborted subscription)."""


class ParkedSend(NamedTuple):
    """A SEND held back by producer flow control."""

    destination: "Destination"
    message: "Message"
    receipt: str | None
    deadline: float | None
    #: For a topic blocked mid-dispatch: the subscriptions still to serve.
    resume: list[Any] | None = None
