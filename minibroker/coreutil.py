"""Small pieces the broker core's modules share."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NamedTuple

from .errors import ProtocolError

if TYPE_CHECKING:
    from .destination import Destination
    from .message import Message

__all__ = ["DEFERRED", "ParkedSend", "Ignored", "int_header", "seq_of", "log"]

log = logging.getLogger("minibroker.broker")

#: A handler's return value meaning "I will send (or have sent) the RECEIPT myself".
DEFERRED = object()


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


def int_header(headers: Any, name: str, default: int, low: int, high: int | None, *, clamp: bool) -> int:
    """Header ``name`` as an integer within [low, high] (clamped, or a ProtocolError)."""
    text = headers.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ProtocolError(f"header {name} must be an integer, not {text!r}") from None
    if clamp:
        value = max(low, value if high is None else min(high, value))
    elif value < low or (high is not None and value > high):
        bounds = f"from {low} to {high}" if high is not None else f"of {low} or more"
        raise ProtocolError(f"header {name} must be an integer {bounds}, not {text!r}")
    return value


def seq_of(message_id: str) -> int | None:
    """The broker sequence number at the end of one of our message ids."""
    tail = message_id.rpartition("-")[2]
    return int(tail) if tail.isdigit() else None
