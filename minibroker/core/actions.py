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
from typing import Any, NamedTuple

__all__ = ["Write", "WriteFrames", "Close", "PauseReading", "ResumeReading", "Sync", "Shutdown", "CheckLogin", "Action"]


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
