"""The asyncio edge: sockets in, core events out, core actions back to sockets.

Theory of operation
-------------------
This is the only module that touches sockets or the real clock. It uses
asyncio's protocol layer (``loop.create_server`` with an ``asyncio.Protocol``),
the layer ``asyncio.start_server`` and its streams are built on: a callback
per read means no coroutine switch per frame, which matters at 50k msg/s.

- ``data_received`` passes the bytes straight to ``Broker.receive_data`` and
  then carries out the actions the core returns (``_flush``).
- Writes go to ``transport.write``; the transport's high-water mark is the
  connection's ``write_buffer_limit``. Crossing it calls ``pause_writing``,
  which tells the core the connection is not writable, so dispatch to it stops
  (the bounded outbound buffer); ``resume_writing`` lets dispatch continue.
  This is ``drain()`` backpressure without a coroutine per connection.
- ``PauseReading`` stops reading a producer's socket (producer flow control
  by TCP backpressure, as ActiveMQ does to a STOMP producer that asked for no
  receipt).
- One timer handle is kept for the core's earliest deadline (heart-beats,
  connect timeouts); it is re-armed after every batch of events.
- SIGINT and SIGTERM close the listener and every connection, then return.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from typing import Any

from .actions import Close, PauseReading, ResumeReading, Write
from .broker import Broker
from .clock import SystemClock
from .config import BrokerConfig

__all__ = ["BrokerServer", "serve"]

log = logging.getLogger("minibroker.server")


class _Connection(asyncio.Protocol):
    """One client socket, feeding one core session."""

    def __init__(self, server: "BrokerServer") -> None:
        self.server = server
        self.sid = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # The core's outbox and the transport's buffer each take half of the
        # connection's write_buffer_limit, so together they never exceed it
        # by more than one frame.
        half = self.server.broker.config.transport.write_buffer_limit // 2
        transport.set_write_buffer_limits(high=half, low=half // 4)
        peer = transport.get_extra_info("peername")
        peer_text = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "")
        self.sid = self.server.broker.open_session(peer_text)
        self.server.connections[self.sid] = self
        self.server.flush()

    def data_received(self, data: bytes) -> None:
        self.server.broker.receive_data(self.sid, data)
        self.server.flush()

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def pause_writing(self) -> None:
        self.server.broker.set_writable(self.sid, False)

    def resume_writing(self) -> None:
        self.server.broker.set_writable(self.sid, True)
        self.server.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.pop(self.sid, None)
        self.server.broker.connection_lost(self.sid)
        self.server.flush()


class BrokerServer:
    """A ``Broker`` core behind a listening socket."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.connections: dict[int, _Connection] = {}
        self._server: asyncio.AbstractServer | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._flushing = False

    @property
    def port(self) -> int:
        """The port actually bound (useful with port 0)."""
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self, host: str, port: int) -> None:
        """Listen on ``host:port``."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Connection(self), host, port, reuse_address=True)
        log.info("listening on %s:%d (STOMP 1.0, 1.1, 1.2)", host, self.port)
        self._arm_timer()

    async def close(self) -> None:
        """Stop listening and close every connection."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections.values()):
            if conn.transport is not None:
                conn.transport.close()
        if self._server is not None:
            await self._server.wait_closed()
        if self._timer is not None:
            self._timer.cancel()
        await asyncio.sleep(0)

    # -- carrying out the core's actions
    def flush(self) -> None:
        """Apply every action the core has for us, then re-arm the timer."""
        if self._flushing:
            return
        self._flushing = True
        try:
            broker = self.broker
            connections = self.connections
            while True:
                actions = broker.take_actions()
                if not actions:
                    break
                for action in actions:
                    conn = connections.get(action.session)
                    transport = conn.transport if conn is not None else None
                    if transport is None or transport.is_closing():
                        continue
                    if type(action) is Write:
                        transport.write(action.data)
                    elif type(action) is Close:
                        transport.close()
                    elif type(action) is PauseReading:
                        transport.pause_reading()
                    elif type(action) is ResumeReading:
                        transport.resume_reading()
        finally:
            self._flushing = False
        self._arm_timer()

    def _arm_timer(self) -> None:
        deadline = self.broker.next_deadline()
        if deadline is None or (self._timer_at is not None and self._timer_at <= deadline):
            return
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.0, deadline - self.broker.clock.now())
        self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)
        self._timer_at = deadline

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self.broker.tick()
        self.flush()


async def serve(config: BrokerConfig, *, ready: Any = None, stop: asyncio.Event | None = None) -> None:
    """Run a broker with ``config`` until SIGINT/SIGTERM (or ``stop`` is set).

    ``ready``, if given, is called with the ``BrokerServer`` once listening.
    """
    broker = Broker(config, SystemClock(), seed=int.from_bytes(os.urandom(8), "big"))
    server = BrokerServer(broker)
    await server.start(config.transport.host, config.transport.port)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread
            pass
    if ready is not None:
        ready(server)
    try:
        await stop.wait()
    finally:
        log.info("shutting down")
        for sig in installed:
            loop.remove_signal_handler(sig)
        await server.close()
