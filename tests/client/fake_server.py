"""A tiny scripted STOMP server for testing clients without the real broker.

It speaks through the same codec (``FrameParser(role="server")``, ``encode``)
and behaves like a single-node queue broker that trusts its clients:

- CONNECT/STOMP: highest common version (no ``accept-version``: 1.0, and no
  ``version`` header in CONNECTED), ``heart-beat`` answered with
  ``server.heartbeat``; ``refuse="text"`` answers ERROR and closes instead.
- SEND: the message goes to one subscriber of the destination (round-robin)
  or waits in a backlog; a destination listed in ``error_on_send`` gets an
  ERROR (with ``receipt-id`` when asked) and the connection is closed.
- SUBSCRIBE drains the destination's backlog to the new subscriber; MESSAGE
  frames carry ``destination``, ``message-id``, ``subscription`` and, in 1.2
  client modes, ``ack``; ``redelivered`` is never set by the fake itself.
- every frame with ``receipt`` gets its RECEIPT (``auto_receipts``);
  DISCONNECT gets its RECEIPT and the connection is closed.
- heart-beats: with ``send_heartbeats`` the server writes an EOL every
  ``max(sx, cy)`` ms; with it off it stays silent however it negotiated.

``connected_headers`` are merged into CONNECTED, to script a broker that
answers what it should not.

Everything a client sends is recorded on its ``FakeConnection`` (``frames``,
``beats`` received) so tests can assert on the wire, and ``conn.send`` /
``conn.send_raw`` let a test script frames by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import defaultdict, deque
from collections.abc import Callable

from minibroker.errors import ProtocolError
from minibroker.frames import VERSIONS, Frame
from minibroker.protocol import HEARTBEAT, FrameParser, encode

__all__ = ["FakeStompServer", "FakeConnection"]

_NOT_COPIED = frozenset({"destination", "receipt", "transaction", "content-length"})


class FakeConnection:
    """The server side of one client connection."""

    def __init__(self, server: FakeStompServer, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.parser = FrameParser(role="server", version="1.0")
        self.version = "1.0"
        #: Every frame the client sent, in order.
        self.frames: list[Frame] = []
        #: id -> (destination, ack mode)
        self.subscriptions: dict[str, tuple[str, str]] = {}
        #: Heart-beat EOLs sent to the client.
        self.beats_sent = 0
        self.closed = False
        self._changed = asyncio.Event()
        self._beat_handle: asyncio.TimerHandle | None = None

    @property
    def beats(self) -> int:
        """Heart-beat EOLs received from the client."""
        return self.parser.heartbeats

    def commands(self) -> list[str]:
        """The commands received so far."""
        return [f.command for f in self.frames]

    async def wait_for(self, predicate: Callable[[FakeConnection], object], timeout: float = 5.0) -> None:
        """Wait until ``predicate(self)`` is true (re-checked on every event)."""

        async def loop() -> None:
            while not predicate(self):
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(loop(), timeout)

    async def wait_frame(self, command: str, timeout: float = 5.0, index: int = 0) -> Frame:
        """The ``index``-th frame with ``command``, waiting for it."""

        def found(conn: FakeConnection) -> bool:
            return len([f for f in conn.frames if f.command == command]) > index

        await self.wait_for(found, timeout)
        return [f for f in self.frames if f.command == command][index]

    def _notify(self) -> None:
        self._changed.set()

    def send(self, frame: Frame) -> None:
        """Write ``frame`` to the client in the negotiated version."""
        self.writer.write(encode(frame, self.version))

    def send_raw(self, data: bytes) -> None:
        """Write bytes as they are."""
        self.writer.write(data)

    def error(self, message: str, *, receipt_id: str | None = None, close: bool = True, body: bytes = b"") -> None:
        """Send an ERROR frame, then close unless ``close`` is False."""
        headers = {"message": message}
        if receipt_id is not None:
            headers["receipt-id"] = receipt_id
        self.send(Frame("ERROR", headers, body))
        if close:
            self.close()

    def close(self) -> None:
        """Close the connection (what the client sees as the broker hanging up)."""
        self.closed = True
        if self._beat_handle is not None:
            self._beat_handle.cancel()
        if not self.writer.is_closing():
            self.writer.close()
        self._notify()

    def stop_reading(self) -> None:
        """Stop reading the socket: the client's writes back up (a stalled broker)."""
        self.writer.transport.pause_reading()  # type: ignore[attr-defined]

    def start_heartbeats(self, every_ms: int) -> None:
        """Write an EOL every ``every_ms`` from a timer (not a task)."""
        loop = asyncio.get_running_loop()

        def tick() -> None:
            if self.closed or self.writer.is_closing():
                return
            self.writer.write(HEARTBEAT)
            self.beats_sent += 1
            self._notify()
            self._beat_handle = loop.call_later(every_ms / 1000, tick)

        self._beat_handle = loop.call_later(every_ms / 1000, tick)


class FakeStompServer:
    """Scripted STOMP server on 127.0.0.1, an ephemeral port (see module doc)."""

    def __init__(
        self,
        *,
        versions: tuple[str, ...] = VERSIONS,
        heartbeat: tuple[int, int] | None = (0, 0),
        send_heartbeats: bool = True,
        refuse: str | None = None,
        error_on_send: dict[str, str] | None = None,
        auto_receipts: bool = True,
        connected_headers: dict[str, str] | None = None,
        session: str = "fake-session-1",
        server_name: str = "FakeStomp/0.1",
    ) -> None:
        self.versions = versions
        self.heartbeat = heartbeat
        self.send_heartbeats = send_heartbeats
        self.refuse = refuse
        self.error_on_send = dict(error_on_send or {})
        self.auto_receipts = auto_receipts
        self.session = session
        #: Merged into every CONNECTED frame (to script a misbehaving broker).
        self.connected_headers = dict(connected_headers or {})
        self.server_name = server_name
        self.host = "127.0.0.1"
        self.port = 0
        #: Every connection ever accepted, in order.
        self.connections: list[FakeConnection] = []
        #: destination -> messages (headers, body) waiting for a subscriber
        self.backlog: dict[str, deque[tuple[dict[str, str], bytes]]] = defaultdict(deque)
        self._server: asyncio.base_events.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._message_ids = itertools.count(1)
        self._rr = itertools.count()
        self._new_connection = asyncio.Event()
        self._handlers: dict[str, Callable[[FakeConnection, Frame], None]] = {
            "CONNECT": self._on_connect,
            "STOMP": self._on_connect,
            "SEND": self._on_send,
            "SUBSCRIBE": self._on_subscribe,
            "UNSUBSCRIBE": self._on_unsubscribe,
            "DISCONNECT": self._on_disconnect,
        }

    async def start(self) -> FakeStompServer:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in self.connections:
            conn.close()
            with contextlib.suppress(ConnectionError, OSError):
                await conn.writer.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def __aenter__(self) -> FakeStompServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def connection(self, index: int = 0, timeout: float = 5.0) -> FakeConnection:
        """The ``index``-th accepted connection, waiting for it."""

        async def loop() -> None:
            while len(self.connections) <= index:
                self._new_connection.clear()
                await self._new_connection.wait()

        await asyncio.wait_for(loop(), timeout)
        return self.connections[index]

    def preload(self, destination: str, bodies: list[bytes], headers: dict[str, str] | None = None) -> None:
        """Put messages in ``destination``'s backlog, as if sent earlier."""
        for body in bodies:
            self.backlog[destination].append((dict(headers or {}), body))

    # -- serving
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = FakeConnection(self, reader, writer)
        self.connections.append(conn)
        self._new_connection.set()
        try:
            while not conn.closed:
                data = await reader.read(65536)
                if not data:
                    break
                while True:
                    try:
                        frames = conn.parser.feed(data)
                    except ProtocolError as exc:
                        conn.error(exc.message)
                        frames = None
                        break
                    conn._notify()  # heart-beats count too
                    for frame in frames:
                        conn.frames.append(frame)
                        self._handle(conn, frame)
                        conn._notify()
                        if conn.closed:
                            break
                    if conn.closed or not conn.parser.awaiting_version:
                        break
                    data = b""  # CONNECT set the version: parse the rest with it
                if frames is None:
                    break
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            conn.close()
            self._tasks.discard(task)

    def _receipt(self, conn: FakeConnection, frame: Frame) -> None:
        receipt = frame.headers.get("receipt")
        if receipt is not None and self.auto_receipts:
            conn.send(Frame("RECEIPT", {"receipt-id": receipt}))

    def _handle(self, conn: FakeConnection, frame: Frame) -> None:
        self._handlers.get(frame.command, self._receipt)(conn, frame)

    def _on_connect(self, conn: FakeConnection, frame: Frame) -> None:
        accept = frame.headers.get("accept-version")
        offered = accept.split(",") if accept is not None else ["1.0"]
        common = [v for v in self.versions if v in offered]
        if not common:
            conn.error(f"Supported protocol versions are {','.join(self.versions)}")
            return
        if self.refuse is not None:
            conn.error(self.refuse)
            return
        conn.version = common[-1]
        conn.parser.version = conn.version
        headers = {"session": self.session, "server": self.server_name}
        if accept is not None:
            headers["version"] = conn.version
        if self.heartbeat is not None:
            sx, sy = self.heartbeat
            headers["heart-beat"] = f"{sx},{sy}"
            cx, cy = (int(x) for x in frame.headers.get("heart-beat", "0,0").split(","))
            if sx and cy and self.send_heartbeats:
                conn.start_heartbeats(max(sx, cy))
        headers.update(self.connected_headers)
        conn.send(Frame("CONNECTED", headers))

    def _on_send(self, conn: FakeConnection, frame: Frame) -> None:
        destination = frame.headers.get("destination", "")
        if destination in self.error_on_send:
            conn.error(self.error_on_send[destination], receipt_id=frame.headers.get("receipt"))
            return
        headers = {k: v for k, v in frame.headers.items() if k not in _NOT_COPIED}
        self.backlog[destination].append((headers, frame.body))
        self._receipt(conn, frame)
        self._dispatch(destination)

    def _on_subscribe(self, conn: FakeConnection, frame: Frame) -> None:
        sub_id = frame.headers.get("id", frame.headers.get("destination", ""))
        destination = frame.headers.get("destination", "")
        conn.subscriptions[sub_id] = (destination, frame.headers.get("ack", "auto"))
        self._receipt(conn, frame)
        self._dispatch(destination)

    def _on_unsubscribe(self, conn: FakeConnection, frame: Frame) -> None:
        conn.subscriptions.pop(frame.headers.get("id", ""), None)
        self._receipt(conn, frame)

    def _on_disconnect(self, conn: FakeConnection, frame: Frame) -> None:
        self._receipt(conn, frame)
        conn.close()

    def _dispatch(self, destination: str) -> None:
        backlog = self.backlog[destination]
        while backlog:
            targets = [
                (conn, sub_id, ack)
                for conn in self.connections
                if not conn.closed
                for sub_id, (dest, ack) in conn.subscriptions.items()
                if dest == destination
            ]
            if not targets:
                return
            conn, sub_id, ack = targets[next(self._rr) % len(targets)]
            app_headers, body = backlog.popleft()
            n = next(self._message_ids)
            headers = {"destination": destination, "message-id": f"m-{n}", "subscription": sub_id}
            if conn.version == "1.2" and ack != "auto":
                headers["ack"] = f"a-{n}"
            headers.update(app_headers)
            conn.send(Frame("MESSAGE", headers, body))
