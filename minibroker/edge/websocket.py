"""STOMP over WebSocket: the browser's way in (stomp.js, ActiveMQ's ``ws`` transport).

Theory of operation
-------------------
Another thin edge in front of the same core: a ``WebSocketConnection`` is an
``EdgeConnection`` (``edge.py``) whose bytes pass through a sans-IO
``websockets.server.ServerProtocol`` on their way in and out. The library does
the HTTP upgrade (``Origin`` check, subprotocol choice, its own limits on the
request), the framing, masking, ping/pong and the closing handshake; this
module only moves bytes between it, the socket and the core.

- In: the payloads of every data frame read in one go are joined and handed
  to the core as one chunk of STOMP bytes. STOMP frames may therefore be split
  across WebSocket messages or batched in one, as stomp.js and RabbitMQ's
  Web-STOMP allow; a heart-beat is a message holding an EOL.
- Out: the core knows this session frames its output (``Session.framed``), so
  it hands over each STOMP frame on its own (``WriteFrames``); each becomes one
  WebSocket message, text when it is UTF-8 (what browsers expect) and binary
  otherwise (a body with arbitrary bytes).
- The session opens once the upgrade is done, so that whatever the core says
  first (a CONNECTED, or an ERROR such as max_connections' refusal) travels
  in a WebSocket message. Until then the library bounds the request (its line
  and header limits) and the transport's connect timeout bounds its time.
  From then on everything that bounds a TCP client (limits before and after
  login, the outbound buffer, producer flow control by not reading the
  socket, heart-beats, authentication) bounds this one the same way. One
  more bound comes first: the library takes a whole message before the core
  sees its STOMP bytes, so until the CONNECT is accepted the edge counts what
  arrives and fails the connection (close code 1009, message too big) past a
  CONNECT's worth (``max_connect_frame_size`` and the framing around it).
- A close from the core sends a WebSocket close frame after what was written
  (the ERROR frame), then the TCP connection ends as on TCP.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from websockets.frames import CloseCode, Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import OPEN
from websockets.server import ServerProtocol

from minibroker.config import TransportConfig
from minibroker.edge.connection import EdgeConnection, EdgeHost

__all__ = ["WebSocketConnection", "STOMP_SUBPROTOCOLS", "stomp_protocol"]

log = logging.getLogger("minibroker.websocket")
#: The library's own log (a line per opened connection at INFO): warnings only; the
#: broker logs each connection itself.
_protocol_log = logging.getLogger("minibroker.websocket.protocol")
_protocol_log.setLevel(logging.WARNING)

#: The STOMP subprotocols, most preferred first (RabbitMQ's and ActiveMQ's names).
STOMP_SUBPROTOCOLS = ("v12.stomp", "v11.stomp", "v10.stomp")
#: How long the upgrade request may take to arrive when the connect timeout is off.
_REQUEST_TIMEOUT_SECONDS = 30.0
#: Bytes of WebSocket framing allowed beside a CONNECT's worth of STOMP before login
#: (a frame header is at most 14 bytes; a CONNECT split in many messages pays it each time).
_FRAMING_ALLOWANCE = 4096
#: The frames that carry STOMP bytes (control frames are the library's business).
_DATA_OPCODES = (Opcode.TEXT, Opcode.BINARY, Opcode.CONT)


def _select_subprotocol(protocol: ServerProtocol, offered: Sequence[str]) -> str | None:
    """The highest STOMP subprotocol the client offers; none offered (or none known) is
    accepted too: the STOMP version is negotiated by CONNECT either way."""
    for name in STOMP_SUBPROTOCOLS:
        if name in offered:
            return name
    return None


def stomp_protocol(config: TransportConfig) -> ServerProtocol:
    """A sans-IO WebSocket server connection configured for STOMP."""
    # A client without an Origin header is not a browser, and the Origin check only
    # defends browsers against pages from elsewhere (cross-site WebSocket hijacking).
    origins = [*config.allowed_origins, None] if config.allowed_origins else None
    return ServerProtocol(
        origins=origins,  # type: ignore[arg-type]
        subprotocols=list(STOMP_SUBPROTOCOLS),  # type: ignore[arg-type]
        select_subprotocol=_select_subprotocol,  # type: ignore[arg-type]
        # One STOMP frame may span messages; a message never needs more than the largest frame.
        max_size=config.max_frame_size,
        logger=_protocol_log,
    )


class WebSocketConnection(EdgeConnection):
    """A STOMP session whose bytes travel in WebSocket messages."""

    protocol = "websocket"

    def __init__(self, server: EdgeHost) -> None:
        super().__init__(server)
        self.ws = stomp_protocol(server.broker.config.transport)
        self._request_timer: asyncio.TimerHandle | None = None
        #: Bytes received since the upgrade while the CONNECT is not accepted yet.
        self._before_login = 0
        self._failed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.attach(transport)  # the session opens with the upgrade (``handle_request``)
        timeout = self.server.broker.config.transport.connect_timeout / 1000 or _REQUEST_TIMEOUT_SECONDS
        self._request_timer = asyncio.get_running_loop().call_later(timeout, self._request_timed_out)

    def _request_timed_out(self) -> None:
        if not self.sid and self.transport is not None and not self.transport.is_closing():
            log.info("WebSocket connection from %s closed: no upgrade within the connect timeout", self.peer)
            self.transport.abort()

    def _request_arrived(self) -> None:
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._request_arrived()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        ws = self.ws
        if self._failed or (ws.state is OPEN and self._too_much_before_login(len(data))):
            return
        ws.receive_data(data)
        stomp = []
        for event in ws.events_received():
            if isinstance(event, Request):
                self.handle_request(event)
            elif isinstance(event, Frame) and event.opcode in _DATA_OPCODES:
                stomp.append(event.data)
        self._send_pending()
        if stomp:
            self.deliver(b"".join(stomp))

    def _too_much_before_login(self, size: int) -> bool:
        """Count ``size`` more bytes before login; past a CONNECT's worth, fail the connection."""
        session = self.server.broker.sessions.get(self.sid)
        if session is None or session.parser.handshake_complete:
            return False
        self._before_login += size
        limit = session.parser.frame_limit + _FRAMING_ALLOWANCE
        if self._before_login <= limit:
            return False
        log.warning(
            "WebSocket connection %d from %s: more than %d bytes before its CONNECT was accepted; closed",
            self.sid,
            self.peer,
            limit,
        )
        self._failed = True
        self.ws.fail(CloseCode.MESSAGE_TOO_BIG, f"more than {limit} bytes before the CONNECT is accepted")
        self._send_pending()
        return True

    def handle_request(self, request: Request) -> None:
        """The HTTP request that opens the connection: upgrade it (or refuse, saying why)."""
        self._request_arrived()
        self.upgrade(request)

    def upgrade(self, request: Request) -> None:
        """Answer the upgrade; once done, the connection is a broker session."""
        response = self.ws.accept(request)
        self.ws.send_response(response)
        if response.status_code == 101:
            self.open_session()
        else:
            log.info(
                "WebSocket upgrade from %s refused (%d): %s", self.peer, response.status_code, self.ws.handshake_exc
            )

    def eof_received(self) -> bool | None:
        self.ws.receive_eof()
        self._send_pending()
        return None

    def _send_pending(self) -> None:
        """Write what the protocol has for the socket in one write (a turn's frames, one
        WebSocket message each, leave together, as a TCP connection's do); its
        end-of-stream (an empty chunk, always last) closes it."""
        transport = self.transport
        assert transport is not None
        chunks = self.ws.data_to_send()
        if not chunks:
            return
        data = b"".join(chunks)
        if data:
            transport.write(data)
        if not chunks[-1] and not transport.is_closing():
            transport.close()
            self._abort_after_grace()

    # -- the core's actions
    def write_frames(self, frames: list[bytes]) -> None:
        ws = self.ws
        if ws.state is not OPEN:
            return  # closing: the close frame is on its way
        for frame in frames:
            try:
                frame.decode("utf-8")
            except UnicodeDecodeError:
                ws.send_binary(frame)
            else:
                ws.send_text(frame)
        self._send_pending()
        self._report_buffered()

    def write(self, data: bytes) -> None:
        self.write_frames([data])

    def close(self, abort: bool) -> None:
        transport = self.transport
        assert transport is not None
        if abort or self.ws.state is not OPEN:
            if abort:
                transport.abort()
            else:
                transport.close()
                self._abort_after_grace()
            return
        self.ws.send_close()  # after the frames already written; the client answers, then TCP ends
        self._send_pending()
        self._abort_after_grace()
