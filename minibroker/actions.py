"""What the broker core asks its edge to do.

The core never touches a socket. After every event it has handled, the edge
calls ``Broker.take_actions()`` and carries these out, in order: writes first
(one joined buffer per connection, or its frames one by one for an edge that
frames them, such as WebSocket), then closes and reading pauses.
"""
from __future__ import annotations

from typing import NamedTuple, Union

__all__ = ["Write", "WriteFrames", "Close", "PauseReading", "ResumeReading", "Action"]


class Write(NamedTuple):
    """Write ``data`` to connection ``session``'s socket."""

    session: int
    data: bytes


class WriteFrames(NamedTuple):
    """Write ``frames`` to connection ``session``, each STOMP frame (or heart-beat
    EOL) on its own: for an edge that frames them (one WebSocket message each)."""

    session: int
    frames: list[bytes]


class Close(NamedTuple):
    """Close the connection once what was written before is flushed; with
    ``abort``, at once, dropping what is buffered (a socket that does not drain)."""

    session: int
    reason: str
    abort: bool = False


class PauseReading(NamedTuple):
    """Stop reading the socket (producer flow control: TCP backpressure)."""

    session: int


class ResumeReading(NamedTuple):
    """Read the socket again."""

    session: int


Action = Union[Write, WriteFrames, Close, PauseReading, ResumeReading]
