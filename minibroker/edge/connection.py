"""What every edge does with one client socket: open a core session, feed it
bytes, carry out its actions on the socket.

``BrokerServer`` (``server.py``) owns the listeners and the loop over the core's
actions; an ``EdgeConnection`` is one accepted socket. ``TcpConnection`` is STOMP
straight over TCP; ``websocket.WebSocketConnection`` is STOMP in WebSocket
messages. Both reach the same core the same way, so sessions, limits,
heart-beats, authentication and flow control are the same on both.

Backpressure: the transport's high-water mark is half the connection's
``write_buffer_limit``; crossing it calls ``pause_writing``, which tells the
core the connection is not writable (dispatch to it stops); ``resume_writing``
lets it go on. A close flushes what was written (the ERROR frame) first, and
aborts the socket after a grace period if the peer never reads.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING, Protocol, cast

if TYPE_CHECKING:
    from minibroker.core.broker import Broker

__all__ = ["EdgeConnection", "EdgeHost", "TcpConnection"]

#: How long a closing connection may take to drain its last frames before it is aborted.
_CLOSE_GRACE_SECONDS = 5.0

log = logging.getLogger("minibroker.server")


class EdgeHost(Protocol):
    """The server, as its connections see it (``server.BrokerServer`` satisfies it):
    the core they feed, the open connections by session id, and the loop over the
    core's actions to run after each event."""

    @property
    def broker(self) -> Broker: ...

    @property
    def connections(self) -> dict[int, EdgeConnection]: ...

    def flush(self) -> None:
        """Carry out every action the core has now."""


class EdgeConnection(asyncio.Protocol):
    """One client socket feeding one core session: what every edge shares.

    A subclass says how bytes arrive (``data_received`` hands the STOMP bytes
    to ``deliver``) and how the core's output leaves (``write``, ``write_frames``,
    ``close``); sessions, limits, heart-beats, flow control and the outbound
    buffer's accounting are the same for every edge.
    """

    #: The listener's protocol as statistics name it.
    protocol = "tcp"

    def __init__(self, server: EdgeHost) -> None:
        self.server = server
        self.sid = 0
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.lost = False
        #: The transport's buffered bytes as last reported to the core.
        self.reported_buffered = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.attach(transport)
        self.open_session()

    def attach(self, transport: asyncio.BaseTransport) -> None:
        """Take the accepted socket: no delay, the write buffer's limits, the peer's name."""
        # A read-write transport: asyncio's own subclass asyncio.Transport; uvloop's implement
        # the same methods without subclassing it, so this is a cast, not an isinstance check.
        self.transport = transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # The core's outbox and the transport's buffer each take half of the
        # connection's write_buffer_limit, so together they never exceed it
        # by more than one frame.
        half = self.server.broker.config.transport.write_buffer_limit // 2
        transport.set_write_buffer_limits(high=half, low=half // 4)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "")

    def open_session(self) -> None:
        """Start the core's session for this connection."""
        self.sid = self.server.broker.open_session(self.peer, self.protocol)
        self.server.connections[self.sid] = self
        self.server.flush()

    def deliver(self, data: bytes) -> None:
        """STOMP bytes from the client: to the core, then carry out what it says."""
        try:
            self.server.broker.receive_data(self.sid, data)
        except Exception:  # a bug in the core: this connection ends with an ERROR; the others go on
            log.exception("connection %d: internal error while handling what it sent", self.sid)
            self.server.broker.internal_error(self.sid)
        self.server.flush()

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def pause_writing(self) -> None:
        self.server.broker.set_writable(self.sid, False)

    def resume_writing(self) -> None:
        if self.transport is not None:
            self.reported_buffered = self.transport.get_write_buffer_size()
            self.server.broker.report_buffered(self.sid, self.reported_buffered)
        self.server.broker.set_writable(self.sid, True)
        self.server.flush()

    # -- the core's actions, carried out (``BrokerServer.flush``)
    def write(self, data: bytes) -> None:
        """Send the core's output (``Write``)."""
        transport = self.transport
        assert transport is not None
        transport.write(data)
        # ``_report_buffered``, written out: once per write. The usual write leaves nothing.
        buffered = transport.get_write_buffer_size()
        if buffered or self.reported_buffered:
            self.reported_buffered = buffered
            self.server.broker.report_buffered(self.sid, buffered)

    def write_frames(self, frames: list[bytes]) -> None:
        """Send the core's output frame by frame (``WriteFrames``): a framing edge's."""
        self.write(b"".join(frames))

    def _report_buffered(self) -> None:
        buffered = self.transport.get_write_buffer_size()  # type: ignore[union-attr]
        if buffered or self.reported_buffered:  # the usual write leaves nothing: nothing new to say
            self.reported_buffered = buffered
            self.server.broker.report_buffered(self.sid, buffered)

    def close(self, abort: bool) -> None:
        """End the connection (``Close``): at once, or once what was written is flushed."""
        assert self.transport is not None
        if abort:
            self.transport.abort()
            return
        self.transport.close()  # flushes what was written (the ERROR frame) first ...
        self._abort_after_grace()

    def _abort_after_grace(self) -> None:
        # ... unless the peer never reads: then the socket goes anyway.
        grace = self.server.broker.config.transport.so_write_timeout / 1000 or _CLOSE_GRACE_SECONDS
        asyncio.get_running_loop().call_later(grace, self.abort_if_open)

    def abort_if_open(self) -> None:
        """Closed, but still flushing to a peer that does not read: drop the socket."""
        if not self.lost and self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if not self.sid:
            return  # never had a session (a console page's plain HTTP request)
        self.server.connections.pop(self.sid, None)
        self.server.broker.connection_lost(self.sid)
        self.server.flush()


class TcpConnection(EdgeConnection):
    """STOMP straight over TCP: every byte read is STOMP."""

    #: Every byte read goes to the core as it is (``deliver`` itself: no call between).
    data_received = EdgeConnection.deliver
