"""What no client may exceed, before or after it logs in: connections, incomplete frames.

A part the ``Broker`` holds (``broker.limits``). No client can hurt another:

- at most ``max_connections`` connections;
- at most ``max_unauthenticated_per_address`` from one address before they log
  in, once more than half the slots are taken (sockets held open without a
  CONNECT cannot take every slot, and a burst of honest clients from one host
  still gets in);
- until its CONNECT is accepted, a connection's frames are held to
  ``max_connect_frame_size`` (the parser's handshake limit, set by the Broker);
- the bytes of incomplete frames are charged to one broker-wide total
  (``partial_bytes``) that ``partial_frame_memory_limit`` caps;
- a frame must arrive within ``partial_frame_timeout`` of its first byte (time
  the broker spent not reading the socket does not count).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from minibroker.connection.logins import host_of
from minibroker.connection.session import Session, State
from minibroker.core.common import log
from minibroker.errors import ProtocolError
from minibroker.frames import Frame

if TYPE_CHECKING:
    from minibroker.core.context import CoreContext

__all__ = ["ConnectionLimits"]


class ConnectionLimits:
    """The connection caps and the accounting of incomplete frames."""

    def __init__(
        self,
        context: CoreContext,
        *,
        fail: Callable[[Session, ProtocolError, Frame | None], None],
    ) -> None:
        """The context's sessions are the connections counted; ``fail`` answers a
        protocol error and closes (a frame incomplete for too long)."""
        self.config = context.config
        self.clock = context.clock
        self.timers = context.timers
        self.sessions = context.sessions
        self._fail = fail
        #: Bytes all parsers hold of frames not yet complete (``partial_frame_memory_limit``).
        self.partial_bytes = 0

    def refusal(self, session: Session) -> ProtocolError | None:
        """Why the new connection ``session`` (already listed) is refused, or None."""
        t = self.config.transport
        peer = session.peer
        if t.max_connections and len(self.sessions) > t.max_connections:
            log.warning(
                "connection %d from %s refused: %d connections is the limit", session.id, peer or "?", t.max_connections
            )
            return ProtocolError(
                f"the broker has reached its limit of {t.max_connections} connections "
                "(transport.max_connections): connection refused, try again later"
            )
        # The cap per address bites only once the connections take more than half of
        # max_connections: a burst of honest clients from one host (a load test, a NAT)
        # still gets in, and sockets one address holds open leave half the slots free.
        waiting = (
            self._unauthenticated_from(peer)
            if t.max_unauthenticated_per_address and 2 * len(self.sessions) > t.max_connections
            else 0
        )
        if t.max_unauthenticated_per_address and waiting > t.max_unauthenticated_per_address:
            log.warning(
                "connection %d from %s refused: %d connections from that address have not logged in",
                session.id,
                peer or "?",
                waiting - 1,
            )
            return ProtocolError(
                f"{host_of(peer) or 'this address'} already holds {waiting - 1} connections that have not "
                "logged in (transport.max_unauthenticated_per_address): connection refused, try again later"
            )
        return None

    def _unauthenticated_from(self, peer: str) -> int:
        """Open connections from ``peer``'s address whose CONNECT is not accepted yet (a new one included)."""
        host = host_of(peer)
        return sum(
            1
            for s in self.sessions.values()
            if s.state is State.CONNECTING or s.state is State.AUTHENTICATING
            if host_of(s.peer) == host
        )

    def charge_partial(self, session: Session, completed: bool) -> ProtocolError | None:
        """Charge what the parser holds of an incomplete frame to the broker's total;
        the error to answer with when the total is over its limit."""
        held = session.parser.buffered
        self.partial_bytes += held - session.partial_bytes
        session.partial_bytes = held
        if not held:
            session.partial_since = None
            return None
        t = self.config.transport
        if completed or session.partial_since is None:  # a new frame started arriving
            now = self.clock.now()
            session.partial_since = now
            if t.partial_frame_timeout:
                self.timers.call_at(now + t.partial_frame_timeout / 1000, self._check_partial_frame, session, now)
        if self.partial_bytes > t.partial_frame_memory_limit:
            log.warning(
                "connection %d (%s): incomplete frames hold %d bytes, over the limit of %d",
                session.id,
                session.peer,
                self.partial_bytes,
                t.partial_frame_memory_limit,
            )
            return ProtocolError(
                f"the broker holds {self.partial_bytes} bytes of incomplete frames, over its limit of "
                f"{t.partial_frame_memory_limit} (transport.partial_frame_memory_limit): "
                f"this connection's incomplete frame of {held} bytes is refused"
            )
        return None

    def _check_partial_frame(self, session: Session, since: float) -> None:
        """``partial_frame_timeout``: a frame started at ``since`` must be whole by now
        (time the broker spent not reading the socket does not count)."""
        if not session.is_open or session.partial_since != since or not session.parser.buffered:
            return
        limit = self.config.transport.partial_frame_timeout / 1000
        started = max(since, session.reading.resumed_at)
        now = self.clock.now()
        if session.reading.paused or now - started < limit * 0.999:
            self.timers.call_at(
                (now if session.reading.paused else started) + limit, self._check_partial_frame, session, since
            )
            return
        self._fail(
            session,
            ProtocolError(
                f"incomplete frame: {session.parser.buffered} bytes received, the rest not within "
                f"{self.config.transport.partial_frame_timeout} ms (transport.partial_frame_timeout)"
            ),
            None,
        )

    def release_partial(self, session: Session) -> None:
        """``session`` closed: what it held of a frame is let go."""
        self.partial_bytes -= session.partial_bytes
        session.partial_bytes = 0
