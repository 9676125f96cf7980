"""Pausing and resuming the reading of a connection, for a set of reasons.

A part the ``Broker`` holds (``broker.reading``). A socket is not read while
any reason holds (producer flow control, a login check, a busy store):

1. ``stop(session, reason)``: the first reason pauses the socket (``PauseReading``:
   TCP backpressure on the peer); frames already read wait in the session.
2. ``start(session, reason)``: once the last reason is over, the socket is read
   again (``ResumeReading``) and the frames held are handled, in order, until
   done or paused again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from minibroker.connection.session import Session
from minibroker.connection.states import ReadState
from minibroker.core.actions import Action, PauseReading, ResumeReading
from minibroker.errors import ProtocolError
from minibroker.frames import Frame

if TYPE_CHECKING:
    from minibroker.core.context import CoreContext

__all__ = ["ReadingControl"]


class ReadingControl:
    """Pause and resume a connection's reading; replay the frames held meanwhile."""

    def __init__(
        self,
        context: CoreContext,
        control: list[Action],
        handle: Callable[[Session, Frame], None],
        fail: Callable[[Session, ProtocolError, Frame | None], None],
    ) -> None:
        """The context's clock times a pause; ``control`` is the broker's list of control
        actions for the edge; ``handle`` handles a frame and ``fail`` answers a protocol
        error and closes (the broker's)."""
        self._now = context.clock.now
        self._control = control
        self._handle = handle
        self._fail = fail

    def stop(self, session: Session, reason: str) -> None:
        """Stop reading ``session``'s socket for ``reason`` (TCP backpressure on the peer)."""
        if session.reading.pause(reason):
            self._control.append(PauseReading(session.id))

    def start(self, session: Session, reason: str) -> None:
        """``reason`` is over; read again (and handle what was held) once no reason is left."""
        if session.reading.resume(reason, self._now()) and session.is_open:
            self._control.append(ResumeReading(session.id))
            self._replay_held(session)

    def _replay_held(self, session: Session) -> None:
        """Handle the frames held while the socket was not read, until done or paused again."""
        reading = session.reading
        held = reading.held
        while held and session.is_open and reading.state is ReadState.REPLAYING:
            self._handle(session, held.popleft())
        if session.is_open and reading.state is ReadState.REPLAYING:
            error = reading.drained()
            if error is not None:
                self._fail(session, error, None)
