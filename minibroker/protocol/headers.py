"""Header values: integers within bounds, message ids' sequence numbers, and text
quoted or made fit for an ERROR frame's headers."""

from __future__ import annotations

from typing import Any

from minibroker.digits import parse_decimal
from minibroker.errors import ProtocolError

__all__ = ["int_header", "seq_of", "shown", "header_text"]


def int_header(headers: Any, name: str, default: int, low: int, high: int | None, *, clamp: bool) -> int:
    """Header ``name`` as an integer within [low, high] (clamped, or a ProtocolError)."""
    text = headers.get(name)
    if text is None:
        return default
    try:
        value = parse_decimal(text, signed=True)
    except ValueError as exc:
        raise ProtocolError(f"header {name} must be an integer, not {shown(text)} ({exc})") from None
    if clamp:
        value = max(low, value if high is None else min(high, value))
    elif value < low or (high is not None and value > high):
        bounds = f"from {low} to {high}" if high is not None else f"of {low} or more"
        raise ProtocolError(f"header {name} must be an integer {bounds}, not {shown(text)}")
    return value


def seq_of(message_id: str) -> int | None:
    """The broker sequence number at the end of one of our message ids."""
    try:
        return parse_decimal(message_id.rpartition("-")[2])
    except ValueError:
        return None


def shown(text: str, limit: int = 40) -> str:
    """``text`` quoted for an error message, cut to ``limit`` characters (a client's value may be huge)."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


def header_text(text: str) -> str:
    """``text`` made fit for a header value in every STOMP version: an ERROR's
    ``message`` may quote what a client sent, and a CR or LF there cannot be
    sent in STOMP 1.0 or in answer to CONNECT (nothing is escaped there)."""
    if "\r" in text or "\n" in text:
        text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text
