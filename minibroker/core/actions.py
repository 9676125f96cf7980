"""What the broker core asks its edge to do.

The core never touches a socket. The events it handles leave these in its
outbox; the edge drains it (``Broker.take_actions()``) and carries them out, in
order: writes first (one joined buffer per connection, or its frames one by
one for an edge that frames them, such as WebSocket), then closes and reading
pauses; then it says so (``Broker.actions_done()``, which tells whether the
outbox has more) and drains again until nothing is left.

Two actions are about the broker, not a connection (their ``session`` is 0,
which no connection has, so an edge that skips unknown sessions skips them):
``Sync`` asks for an fsync of the store, whose outcome the edge reports back
(``Broker.store_synced`` or ``Broker.store_failed``), and ``Shutdown`` asks the
edge to stop the broker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, NamedTuple, final

__all__ = ["Write", "WriteFrames", "Close", "PauseReading", "ResumeReading", "Sync", "Shutdown", "CheckLogin", "Action"]


@final
class Write:
    """Write ``data`` to connection ``session``'s socket.

    A small class of its own where the other actions are named tuples: one is
    made for each connection with output at each event's end, and the compiled
    build makes a class instance without a Python call (a named tuple's
    constructor is Python code in either build). Its fields are ``Final``: read-only
    to mypy, and to the compiled build at run time."""

    __slots__ = ("session", "data")

    def __init__(self, session: int, data: bytes) -> None:
        self.session: Final = session
        self.data: Final = data

    def __eq__(self, other: object) -> bool:
        return type(other) is Write and other.session == self.session and other.data == self.data

    def __hash__(self) -> int:
        return hash((self.session, self.data))

    def __repr__(self) -> str:
        return f"Write(session={self.session!r}, data={self.data!r})"


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


class Sync(NamedTuple):
    """fsync the store (off the event loop, if the edge likes), then report
    ``store_synced(generation)``, or ``store_failed(error)`` if it raised."""

    session: int = 0


class Shutdown(NamedTuple):
    """Stop the broker: close every connection and exit with ``exit_status``
    (not 0: the broker could not go on, and ``reason`` says why)."""

    reason: str
    exit_status: int
    session: int = 0


class CheckLogin(NamedTuple):
    """Run ``check()`` (a password hash: slow on purpose) off the event loop, then
    tell the core what it returned: ``Broker.login_checked(session, result)``.
    The connection is not read meanwhile."""

    session: int
    check: Callable[[], Any]


Action = Write | WriteFrames | Close | PauseReading | ResumeReading | Sync | Shutdown | CheckLogin
