"""``StompClient``: one STOMP connection over asyncio, on minibroker's codec.

Theory of operation
-------------------
The client is an ``asyncio.Protocol`` underneath (``_Wire`` forwards the
transport's callbacks), not a pair of streams: a read is one ``feed`` of the
sans-IO ``FrameParser`` and one dict lookup per frame, a write one ``encode``
appended to a cork that is handed to ``transport.write`` at the end of the
loop pass (or at ``CORK_BYTES``), so a burst of sends costs one syscall
rather than one each. No task runs per connection, so hundreds of
connections cost hundreds of small objects and nothing more.

Waiting is done on futures that the frame handlers complete:

- ``connect`` waits for CONNECTED; the negotiated version is given to the
  parser as soon as CONNECTED is read.
- a frame sent with ``receipt`` registers a future under its receipt id; the
  RECEIPT completes it, an ERROR carrying that ``receipt-id`` fails it;
- ``Subscription.get`` parks a future that the next MESSAGE completes.

Every wait takes a timeout. An ERROR that names no pending receipt goes to
every waiter and every subscription; when the connection then ends (a broker
must close after ERROR) the last ERROR becomes the reason every later call
fails with. A connection that ends otherwise fails everything with
``ConnectionLost``; one ended by ``disconnect()`` closes subscriptions with
``SubscriptionClosed``.

Flow control both ways, after asyncio's streams (``Lib/asyncio/streams.py``):
writes go to the transport at once and ``send`` awaits ``resume_writing``
when the transport's buffer is over its high-water mark; reads stop
(``pause_reading``) while more than ``max_buffered`` messages wait in
subscriptions and resume at half that (``flow.FlowCredit`` counts them), so
a slow application fills the TCP window and the broker sees a slow
consumer, as it would with a real one.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from minibroker.errors import ProtocolError
from minibroker.frames import VERSIONS, Frame
from minibroker.protocol import HEARTBEAT, FrameParser, encode

from .errors import CannotConnect, ConnectionLost, StompClientError, StompError, SubscriptionClosed
from .flow import FlowCredit
from .heartbeat import Heartbeats, format_heartbeat, negotiate, parse_heartbeat
from .message import Message, ack_headers
from .subscription import Subscription
from .transaction import Transaction
from .transport import open_connection, wait
from .websocket import WebSocketWire

__all__ = ["StompClient", "ACK_MODES", "DEFAULT_PORT", "DEFAULT_WEBSOCKET_PORT"]

log = logging.getLogger(__name__)

#: The port STOMP brokers listen on by default (ActiveMQ, RabbitMQ, ours).
DEFAULT_PORT = 61613
#: The port of STOMP over WebSocket by default (ActiveMQ's ws connector, ours).
DEFAULT_WEBSOCKET_PORT = 61614
#: Ack modes a SUBSCRIBE may ask for.
ACK_MODES = ("auto", "client", "client-individual")
#: The prefetch header ActiveMQ reads (and our broker honours).
PREFETCH_HEADER = "activemq.prefetchSize"
#: Frames written in one pass of the event loop are corked into one
#: ``transport.write`` (one syscall, one TCP segment train) up to this size.
CORK_BYTES = 64 * 1024


class _Wire(asyncio.Protocol):
    """Forwards the transport's callbacks to its ``StompClient``."""

    def __init__(self, client: StompClient) -> None:
        self.client = client

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.client._transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.client._on_data(data)

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self.client._on_lost(exc)

    def pause_writing(self) -> None:
        self.client._write_paused = True

    def resume_writing(self) -> None:
        self.client._resume_writing()


def _transaction_id(transaction: Transaction | str | None) -> str | None:
    if transaction is None or isinstance(transaction, str):
        return transaction
    return transaction.id


def _check_raw(headers: Mapping[str, str], why: str) -> None:
    """Headers that go out unescaped must not break the frame's lines."""
    for name, value in headers.items():
        if "\n" in name or "\n" in value or "\r" in name or "\r" in value or ":" in name:
            raise ValueError(f"header {name!r}: {value!r} cannot be sent {why}")


class StompClient:
    """A STOMP 1.0/1.1/1.2 client connection. Open one with ``connect()``.

    After ``connect`` returns, ``version``, ``server``, ``session`` and
    ``heartbeat`` describe the session the broker granted. ``errors`` lists
    every ERROR frame received (as ``StompError``), and ``closed`` is a future
    that completes when the connection ends: with ``None`` after a clean
    ``disconnect()``, otherwise with the ``StompClientError`` that ended it.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        versions: tuple[str, ...],
        heartbeat: tuple[int, int],
        heartbeat_grace: float,
        max_buffered: int,
    ) -> None:
        """Internal: use ``await StompClient.connect(...)``."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        self.host = host
        self.port = port
        self.versions = versions
        #: Negotiated version ('1.0' until CONNECTED says otherwise).
        self.version = "1.0"
        #: The ``server`` header of CONNECTED, if any.
        self.server: str | None = None
        #: The ``session`` header of CONNECTED, if any.
        self.session: str | None = None
        #: All headers of CONNECTED.
        self.connected_headers: Mapping[str, str] = {}
        #: Negotiated ``(send_every_ms, expect_every_ms)``; 0 means none.
        self.heartbeat: tuple[int, int] = (0, 0)
        #: Every ERROR frame received, oldest first.
        self.errors: list[StompError] = []
        #: Completes when the connection ends (see the class docstring).
        self.closed: asyncio.Future[StompClientError | None] = loop.create_future()
        #: MESSAGE frames no subscription could be found for (dropped).
        self.unrouted = 0
        self._offered_heartbeat = heartbeat
        self._grace = heartbeat_grace
        self._transport: asyncio.Transport | None = None
        self._parser = FrameParser(role="client", version="1.0")
        self._connected: asyncio.Future[Frame] | None = None
        self._receipts: dict[str, asyncio.Future[Frame]] = {}
        self._subs: dict[str, Subscription] = {}
        self._receipt_ids = itertools.count(1)
        self._sub_ids = itertools.count(1)
        self._tx_ids = itertools.count(1)
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._write_paused = False
        self._out: list[bytes] = []
        self._out_size = 0
        self._flush_scheduled = False
        self._yield_due = False
        self._credit = FlowCredit(max_buffered, self._update_reading)
        self._hb: Heartbeats | None = None
        self._closing = False
        self._failure: StompClientError | None = None  # why the connection must end
        self._end: StompClientError | None = None  # raised by any use after the end
        self._handlers: dict[str, Callable[[Frame], None]] = {
            "MESSAGE": self._on_message,
            "RECEIPT": self._on_receipt,
            "ERROR": self._on_error,
            "CONNECTED": self._on_connected,
        }

    # ------------------------------------------------------------------ connect
    @classmethod
    async def connect(
        cls,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        versions: Iterable[str] = VERSIONS,
        vhost: str | None = "localhost",
        login: str | None = None,
        passcode: str | None = None,
        client_id: str | None = None,
        heartbeat: tuple[int, int] = (0, 0),
        heartbeat_grace: float = 1.5,
        connect_timeout: float | None = 10.0,
        sndbuf: int | None = None,
        rcvbuf: int | None = None,
        extra_headers: Mapping[str, str] | None = None,
        max_buffered: int = 1000,
        websocket_path: str | None = None,
    ) -> StompClient:
        """Open a TCP connection, send CONNECT and wait for CONNECTED.

        With ``websocket_path``, STOMP goes over a WebSocket upgraded at that
        path (``ws://host:port/path``, as the broker's WebSocket port and the
        console's ``/stomp`` take it) instead of over the bare TCP connection.

        ``versions`` are offered in ``accept-version`` (none is sent when only
        1.0 is offered, as a 1.0 client would); ``heartbeat`` is ``(cx, cy)``
        in ms; the broker is declared dead after ``expect_every * heartbeat_grace``
        of silence. ``sndbuf``/``rcvbuf`` set ``SO_SNDBUF``/``SO_RCVBUF`` before
        connecting. ``max_buffered`` bounds the messages held for ``get``
        before the client stops reading the socket.

        Raises ``CannotConnect`` (unreachable, or no CONNECTED within
        ``connect_timeout``), ``StompError`` (the broker answered ERROR) or
        ``ConnectionLost`` (closed, or the broker broke the protocol), and
        ``ValueError`` for arguments that cannot be sent.
        """
        offered = tuple(versions)
        if not offered or any(v not in VERSIONS for v in offered):
            raise ValueError(f"versions must be among {VERSIONS}, not {offered!r}")
        offered = tuple(v for v in VERSIONS if v in offered)
        headers: dict[str, str] = {}
        if offered != ("1.0",):
            headers["accept-version"] = ",".join(offered)
            headers["heart-beat"] = format_heartbeat(heartbeat)
        if vhost is not None:
            headers["host"] = vhost
        for name, value in (("login", login), ("passcode", passcode), ("client-id", client_id)):
            if value is not None:
                headers[name] = value
        if extra_headers:
            headers.update(extra_headers)
        _check_raw(headers, "in CONNECT (it is never escaped)")
        if heartbeat_grace <= 0:
            raise ValueError(f"heartbeat_grace must be positive, not {heartbeat_grace!r}")
        if max_buffered < 1:
            raise ValueError(f"max_buffered must be at least 1, not {max_buffered!r}")

        client = cls(
            host,
            port,
            versions=offered,
            heartbeat=heartbeat,
            heartbeat_grace=heartbeat_grace,
            max_buffered=max_buffered,
        )
        loop = client._loop
        started = loop.time()
        if websocket_path is None:
            wire: Callable[[], asyncio.Protocol] = lambda: _Wire(client)  # noqa: E731
        else:
            path = websocket_path
            wire = lambda: WebSocketWire(_Wire(client), host, port, path)  # noqa: E731
        await open_connection(wire, host, port, timeout=connect_timeout, sndbuf=sndbuf, rcvbuf=rcvbuf)
        connected: asyncio.Future[Frame] = loop.create_future()
        client._connected = connected
        client._write(Frame("CONNECT", headers))
        remaining = None if connect_timeout is None else max(0.0, connect_timeout - (loop.time() - started))
        try:
            await wait(connected, remaining)
        except TimeoutError:
            client._abort(ConnectionLost("no CONNECTED frame"))
            raise CannotConnect(host, port, f"no CONNECTED frame within {connect_timeout:g}s") from None
        except BaseException:
            client._abort(ConnectionLost("connect failed"))
            raise
        return client

    def _on_connected(self, frame: Frame) -> None:
        connected = self._connected
        if connected is None or connected.done():
            self._abort(ConnectionLost("the broker sent a second CONNECTED frame"))
            return
        version = frame.headers.get("version", "1.0")
        if version not in self.versions:
            self._abort(
                ConnectionLost(f"the broker chose STOMP {version!r}, which was not offered ({','.join(self.versions)})")
            )
            return
        try:
            server_hb = parse_heartbeat(frame.headers.get("heart-beat"))
        except ValueError as exc:
            self._abort(ConnectionLost(f"the broker sent a bad heart-beat header: {exc}"))
            return
        self._parser.version = version
        self.version = version
        self.server = frame.headers.get("server")
        self.session = frame.headers.get("session")
        self.connected_headers = frame.headers
        if version != "1.0":
            self.heartbeat = negotiate(self._offered_heartbeat, server_hb)
        send_ms, expect_ms = self.heartbeat
        if send_ms or expect_ms:
            self._hb = Heartbeats(
                self._loop,
                send_every=send_ms / 1000,
                expect_every=expect_ms / 1000,
                grace=self._grace,
                beat=self._beat,
                on_silence=self._on_silence,
            )
            self._hb.start()
        connected.set_result(frame)

    # --------------------------------------------------------------- public API
    @property
    def is_closed(self) -> bool:
        """True once the connection has ended."""
        return self.closed.done()

    @property
    def reading_paused(self) -> bool:
        """True while the client has stopped reading the socket because
        ``max_buffered`` messages wait to be taken with ``get``."""
        return self._credit.paused

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The transport's ``get_extra_info`` (``"socket"``, ``"peername"`` ...)."""
        if self._transport is None:
            return default
        return self._transport.get_extra_info(name, default)

    async def send(
        self,
        destination: str,
        body: bytes | str = b"",
        headers: Mapping[str, str] | None = None,
        *,
        receipt: bool = False,
        transaction: Transaction | str | None = None,
        timeout: float | None = 30.0,
    ) -> None:
        """SEND ``body`` (str is sent as UTF-8) to ``destination``.

        With ``receipt`` wait for the broker's RECEIPT (an ERROR for it raises
        ``StompError``); without, wait only while the socket's write buffer is
        over its high-water mark. ``timeout`` bounds either wait.
        """
        if isinstance(body, str):
            body = body.encode("utf-8")
        frame_headers = {"destination": destination}
        if headers:
            frame_headers.update(headers)
            frame_headers["destination"] = destination
        tx = _transaction_id(transaction)
        if tx is not None:
            frame_headers["transaction"] = tx
        await self._request("SEND", frame_headers, body, receipt=receipt, timeout=timeout)

    async def subscribe(
        self,
        destination: str,
        *,
        id: str | None = None,
        ack: str = "auto",
        prefetch: int | None = None,
        selector: str | None = None,
        headers: Mapping[str, str] | None = None,
        receipt: bool = True,
        on_message: Callable[[Message], None] | None = None,
        timeout: float | None = 30.0,
    ) -> Subscription:
        """SUBSCRIBE to ``destination`` and return the ``Subscription``.

        ``prefetch`` is sent as ``activemq.prefetchSize``, ``selector`` as
        ``selector``; ``headers`` add to (or override) these, except
        ``destination`` and ``id``. With ``receipt`` (the default) return only
        once the broker has confirmed. ``on_message``, if given, is called
        with each message from the socket callback instead of buffering it
        for ``get`` (cheaper for load drivers; it must not block).
        """
        if ack not in ACK_MODES:
            raise ValueError(f"ack must be one of {', '.join(ACK_MODES)}, not {ack!r}")
        sub_id = id if id is not None else f"sub-{next(self._sub_ids)}"
        if sub_id in self._subs:
            raise ValueError(f"subscription id {sub_id!r} is already in use on this connection")
        frame_headers = {"destination": destination, "id": sub_id, "ack": ack}
        if prefetch is not None:
            if prefetch < 0:
                raise ValueError(f"prefetch must not be negative, not {prefetch!r}")
            frame_headers[PREFETCH_HEADER] = str(prefetch)
        if selector is not None:
            frame_headers["selector"] = selector
        if headers:
            frame_headers.update(headers)
            frame_headers["destination"], frame_headers["id"] = destination, sub_id
        self._check_usable()
        sub = Subscription(
            sub_id,
            destination,
            frame_headers["ack"],
            loop=self._loop,
            credit=self._credit,
            unsubscribe=self._unsubscribe,
            on_message=on_message,
        )
        self._subs[sub_id] = sub  # before sending: MESSAGEs may follow at once
        try:
            await self._request("SUBSCRIBE", frame_headers, receipt=receipt, timeout=timeout)
        except BaseException as exc:
            if self._subs.get(sub_id) is sub:
                del self._subs[sub_id]
            sub._close(exc if isinstance(exc, StompClientError) else SubscriptionClosed("subscribe failed"))
            raise
        return sub

    async def _unsubscribe(
        self, sub: Subscription, headers: Mapping[str, str] | None, receipt: bool, timeout: float | None
    ) -> None:
        frame_headers = {"id": sub.id}
        if headers:
            frame_headers.update(headers)
        try:
            await self._request("UNSUBSCRIBE", frame_headers, receipt=receipt, timeout=timeout)
        finally:
            if self._subs.get(sub.id) is sub:
                del self._subs[sub.id]
                sub._close(SubscriptionClosed(f"subscription {sub.id} was unsubscribed"))

    async def ack(
        self,
        message: Message,
        transaction: Transaction | str | None = None,
        *,
        receipt: bool = False,
        timeout: float | None = 30.0,
    ) -> None:
        """ACK ``message`` with the headers its version needs (see ``message``)."""
        headers = ack_headers(message, self.version, _transaction_id(transaction))
        await self._request("ACK", headers, receipt=receipt, timeout=timeout)

    async def nack(
        self,
        message: Message,
        transaction: Transaction | str | None = None,
        *,
        receipt: bool = False,
        timeout: float | None = 30.0,
    ) -> None:
        """NACK ``message`` (STOMP 1.1 and later; ``ValueError`` in 1.0)."""
        if self.version == "1.0":
            raise ValueError("NACK does not exist in STOMP 1.0")
        headers = ack_headers(message, self.version, _transaction_id(transaction))
        await self._request("NACK", headers, receipt=receipt, timeout=timeout)

    def transaction(self, id: str | None = None) -> Transaction:
        """A new ``Transaction`` (not begun yet); ``id`` defaults to ``tx-N``."""
        return Transaction(self, id if id is not None else f"tx-{next(self._tx_ids)}")

    async def send_frame(self, frame: Frame, *, receipt: bool = False, timeout: float | None = 30.0) -> Frame | None:
        """Send any client ``frame`` as is (for experiments and fault tests).

        With ``receipt`` a ``receipt`` header is added and the RECEIPT frame
        is returned.
        """
        return await self._request(frame.command, dict(frame.headers), frame.body, receipt=receipt, timeout=timeout)

    async def disconnect(self, *, receipt: bool = True, timeout: float | None = 10.0) -> None:
        """Send DISCONNECT, wait for its RECEIPT (so the broker has processed
        every earlier frame), then close the socket. A no-op once closed.

        Raises ``StompError`` if the broker answers ERROR and ``TimeoutError``
        if no RECEIPT comes in time; the socket is closed either way. A broker
        that closes without a RECEIPT is taken as having said goodbye.
        """
        if self.is_closed or self._closing:
            return
        self._closing = True
        try:
            if receipt:
                await self._request("DISCONNECT", {}, receipt=True, timeout=timeout)
            else:
                self._write(Frame("DISCONNECT", {}))
        except ConnectionLost:
            pass
        finally:
            self.close()

    def close(self) -> None:
        """Close the socket without DISCONNECT (data already written is flushed)."""
        self._closing = True
        self._flush()
        if self._transport is not None:
            self._transport.close()

    async def __aenter__(self) -> StompClient:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, *rest: object) -> None:
        if exc_type is None:
            await self.disconnect()
        else:
            self.close()

    def __repr__(self) -> str:
        state = "closed" if self.is_closed else "open"
        return f"<StompClient {self.host}:{self.port} STOMP {self.version} {state}>"

    # ---------------------------------------------------------------- writing
    def _check_usable(self) -> None:
        if self._end is not None:
            raise self._end
        if self._failure is not None:
            raise self._failure
        if self._transport is None or self._transport.is_closing():
            raise ConnectionLost("the connection is closed")

    def _write(self, frame: Frame) -> None:
        self._check_usable()
        if self.version == "1.0" and frame.command != "CONNECT":
            _check_raw(frame.headers, "in STOMP 1.0 (which has no escapes)")
        data = encode(frame, self.version)
        self._out.append(data)
        self._out_size += len(data)
        if self._out_size >= CORK_BYTES:
            self._flush()
            self._yield_due = True
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
        hb = self._hb
        if hb is not None:
            hb.last_write = self._loop.time()

    def _flush(self) -> None:
        """Hand the frames corked so far to the transport in one write."""
        self._flush_scheduled = False
        out = self._out
        if not out:
            return
        data = out[0] if len(out) == 1 else b"".join(out)
        out.clear()
        self._out_size = 0
        transport = self._transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    async def _request(
        self, command: str, headers: dict[str, str], body: bytes = b"", *, receipt: bool, timeout: float | None
    ) -> Frame | None:
        """Write one frame; with ``receipt`` wait for its RECEIPT and return it."""
        if not receipt:
            self._write(Frame(command, headers, body))
            if self._write_paused:
                await self._drain(timeout)
            elif self._yield_due:
                # A producer that never waits would starve the loop (reads,
                # timers, other connections) until the socket fills up.
                self._yield_due = False
                await asyncio.sleep(0)
            return None
        receipt_id = f"r-{next(self._receipt_ids)}"
        headers["receipt"] = receipt_id
        fut: asyncio.Future[Frame] = self._loop.create_future()
        self._receipts[receipt_id] = fut
        if self._credit.paused:
            self._update_reading()
        try:
            self._write(Frame(command, headers, body))
            return await wait(fut, timeout)
        finally:
            self._receipts.pop(receipt_id, None)
            if self._credit.exhausted:
                self._update_reading()

    async def _drain(self, timeout: float | None) -> None:
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._drain_waiters.append(waiter)
        try:
            await wait(waiter, timeout)
        finally:
            if waiter in self._drain_waiters:
                self._drain_waiters.remove(waiter)

    def _resume_writing(self) -> None:
        self._write_paused = False
        waiters, self._drain_waiters = self._drain_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _beat(self) -> None:
        self._out.append(HEARTBEAT)
        self._out_size += 1
        self._flush()

    # ---------------------------------------------------------------- reading
    def _on_data(self, data: bytes) -> None:
        hb = self._hb
        if hb is not None:
            hb.last_read = self._loop.time()
        try:
            frames = self._parser.feed(data)  # it follows CONNECTED's version by itself
        except ProtocolError as exc:
            self._abort(ConnectionLost(f"the broker sent a malformed frame: {exc.message}"))
            return
        handlers = self._handlers
        for frame in frames:
            if self._failure is not None:
                return
            handlers[frame.command](frame)

    def _on_message(self, frame: Frame) -> None:
        sub_id = frame.headers.get("subscription")
        sub = self._subs.get(sub_id) if sub_id is not None else None
        if sub is None:
            sub = self._route_by_destination(frame)
            if sub is None:
                self.unrouted += 1
                log.warning(
                    "MESSAGE for unknown subscription %r on %r dropped", sub_id, frame.headers.get("destination")
                )
                return
        sub._deliver(Message(frame, sub.id))

    def _route_by_destination(self, frame: Frame) -> Subscription | None:
        """A STOMP 1.0 broker may omit ``subscription``: match the destination."""
        destination = frame.headers.get("destination")
        subs = [s for s in self._subs.values() if s.destination == destination]
        if len(subs) == 1:
            return subs[0]
        if not subs and len(self._subs) == 1:
            return next(iter(self._subs.values()))
        return None

    def _update_reading(self) -> None:
        """Pause or resume reading as the flow credit says (``flow.FlowCredit``).

        A RECEIPT travels behind the messages the broker sent before it, so
        while one is awaited (or the client is closing) reading goes on
        whatever the buffer holds: otherwise a client that asks for a receipt
        without taking its messages would wait for it until its timeout.
        """
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        credit = self._credit
        pause = credit.wants_pause(must_read=bool(self._receipts) or self._closing)
        if pause != credit.paused:
            credit.paused = pause
            if pause:
                transport.pause_reading()
            else:
                transport.resume_reading()

    def _on_receipt(self, frame: Frame) -> None:
        fut = self._receipts.get(frame.headers.get("receipt-id", ""))
        if fut is not None and not fut.done():
            fut.set_result(frame)

    def _on_error(self, frame: Frame) -> None:
        error = StompError(frame)
        self.errors.append(error)
        log.debug("ERROR from %s:%s: %s", self.host, self.port, error)
        connected = self._connected
        if connected is not None and not connected.done():
            connected.set_exception(error)
            return
        fut = self._receipts.get(error.receipt_id or "")
        if fut is not None and not fut.done():
            fut.set_exception(error)
            return
        for fut in self._receipts.values():
            if not fut.done():
                fut.set_exception(error)
        for sub in self._subs.values():
            sub._fail(error)

    def _on_silence(self, silent_for: float) -> None:
        expect = self.heartbeat[1] / 1000
        self._abort(
            ConnectionLost(f"no heart-beat from the broker for {silent_for:.3g}s (expected every {expect:.3g}s)")
        )

    # ------------------------------------------------------------------ ending
    def _abort(self, reason: StompClientError) -> None:
        """End the connection now because of ``reason``."""
        if self._failure is None:
            self._failure = reason
        if self._transport is not None:
            self._transport.abort()
        elif not self.closed.done():
            self._on_lost(None)

    def _on_lost(self, exc: Exception | None) -> None:
        if self.closed.done():
            return
        if self._hb is not None:
            self._hb.stop()
        self._out.clear()
        failure = self._failure
        if failure is None and self.errors and not self._closing:
            failure = self.errors[-1]
        if failure is None and not self._closing:
            failure = ConnectionLost(
                f"connection to {self.host}:{self.port} lost: {exc}"
                if exc is not None
                else f"the broker at {self.host}:{self.port} closed the connection"
            )
        self._failure = failure
        self._end = failure or ConnectionLost("the client has disconnected")
        for fut in [self._connected, *self._receipts.values(), *self._drain_waiters]:
            if fut is not None and not fut.done():
                fut.set_exception(self._end)
        self._drain_waiters = []
        sub_reason = failure or SubscriptionClosed("the client has disconnected")
        for sub in self._subs.values():
            sub._close(sub_reason)
        self.closed.set_result(failure)
