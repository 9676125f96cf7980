"""STOMP over WebSocket under a ``StompClient`` (``ws://HOST:PORT/PATH``).

Theory of operation
-------------------
The client's wire (an ``asyncio.Protocol``) sees a transport it writes STOMP
bytes to and a ``data_received`` of STOMP bytes, whatever is below. For a
WebSocket, ``WebSocketWire`` sits between that wire and the TCP connection:

- it is the TCP connection's protocol and runs the websockets library's
  sans-IO ``ClientProtocol``: the upgrade request goes out when TCP connects,
  with the STOMP subprotocols offered (``v12.stomp``, ``v11.stomp``, ``v10.stomp``);
- it is the wire's transport from the start: what the client writes before the
  upgrade is answered (its CONNECT) waits, then goes out as one binary message
  per write (the broker reads a message as a piece of its byte stream);
- each data message received is handed up as STOMP bytes; a refused upgrade or
  a closed connection is the wire's ``connection_lost``.

Flow control passes through: pausing reads pauses the TCP socket's, and the
TCP transport's pause/resume of writing is the wire's.
"""

from __future__ import annotations

import asyncio
from typing import Any

from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.protocol import State
from websockets.typing import Subprotocol
from websockets.uri import parse_uri

__all__ = ["WebSocketWire", "STOMP_SUBPROTOCOLS"]

#: Offered in the upgrade, most preferred first (the broker's, RabbitMQ's and ActiveMQ's names).
STOMP_SUBPROTOCOLS = ("v12.stomp", "v11.stomp", "v10.stomp")
#: The frames that carry STOMP bytes (control frames are the library's business).
_DATA_OPCODES = (Opcode.TEXT, Opcode.BINARY, Opcode.CONT)


class WebSocketWire(asyncio.Protocol, asyncio.Transport):
    """The TCP connection's protocol below, the STOMP wire's transport above."""

    def __init__(self, upper: asyncio.Protocol, host: str, port: int, path: str) -> None:
        super().__init__()
        self.upper = upper
        self.ws = ClientProtocol(
            parse_uri(f"ws://{host}:{port}{path}"),
            subprotocols=[Subprotocol(name) for name in STOMP_SUBPROTOCOLS],
        )
        self.tcp: asyncio.Transport | None = None
        self._waiting: list[bytes] = []  # written before the upgrade was answered
        self._lost = False

    # -- below: the TCP connection
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.tcp = transport  # type: ignore[assignment]
        self.ws.send_request(self.ws.connect())
        self._send_pending()
        self.upper.connection_made(self)

    def data_received(self, data: bytes) -> None:
        ws = self.ws
        ws.receive_data(data)
        for event in ws.events_received():
            if isinstance(event, Response):
                if ws.handshake_exc is not None:
                    self._fail(ConnectionError(f"WebSocket upgrade refused: {ws.handshake_exc}"))
                    return
                for waiting in self._waiting:
                    ws.send_binary(waiting)
                self._waiting.clear()
            elif isinstance(event, Frame) and event.opcode in _DATA_OPCODES and event.data:
                self.upper.data_received(bytes(event.data))
        self._send_pending()
        if ws.close_expected() and self.tcp is not None:
            self.tcp.close()

    def eof_received(self) -> bool:
        self.ws.receive_eof()
        self._send_pending()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._lost:
            self._lost = True
            self.upper.connection_lost(exc)

    def pause_writing(self) -> None:
        self.upper.pause_writing()

    def resume_writing(self) -> None:
        self.upper.resume_writing()

    def _send_pending(self) -> None:
        tcp = self.tcp
        if tcp is None or tcp.is_closing():
            return
        for data in self.ws.data_to_send():
            if data:
                tcp.write(data)
            elif tcp.can_write_eof():
                tcp.write_eof()

    def _fail(self, exc: Exception) -> None:
        if self.tcp is not None:
            self.tcp.close()
        self.connection_lost(exc)

    # -- above: the STOMP wire's transport
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.ws.state is State.CONNECTING:
            self._waiting.append(bytes(data))
        elif self.ws.state is State.OPEN:
            self.ws.send_binary(bytes(data))
            self._send_pending()

    def is_closing(self) -> bool:
        return self.tcp is None or self.tcp.is_closing() or self.ws.state in (State.CLOSING, State.CLOSED)

    def close(self) -> None:
        if self.ws.state is State.OPEN:
            self.ws.send_close()
            self._send_pending()
        if self.tcp is not None:
            self.tcp.close()

    def abort(self) -> None:
        if self.tcp is not None:
            self.tcp.abort()

    def pause_reading(self) -> None:
        if self.tcp is not None:
            self.tcp.pause_reading()

    def resume_reading(self) -> None:
        if self.tcp is not None:
            self.tcp.resume_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.tcp.get_extra_info(name, default) if self.tcp is not None else default
