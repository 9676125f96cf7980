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
import concurrent.futures
import logging
import os
import signal
import socket
import time
from typing import Any

from .actions import Close, PauseReading, ResumeReading, Write
from .broker import Broker
from .clock import SystemClock
from .config import BrokerConfig
from .errors import ConfigError, StoreOpenError
from .persistence import MessageStore
from .trace import Trace

__all__ = ["BrokerServer", "serve", "open_store"]

#: fsync "batch": how often the journals are synced (KahaDB's periodic sync: 1 s).
_BATCH_SYNC_SECONDS = 1.0
#: How often the trace buffer is handed to its writer.
_TRACE_FLUSH_SECONDS = 0.5
#: How long a closing connection may take to drain its last frames before it is aborted.
_CLOSE_GRACE_SECONDS = 5.0


log = logging.getLogger("minibroker.server")


class _Connection(asyncio.Protocol):
    """One client socket, feeding one core session."""

    def __init__(self, server: "BrokerServer") -> None:
        self.server = server
        self.sid = 0
        self.transport: asyncio.Transport | None = None
        self.lost = False
        #: The transport's buffered bytes as last reported to the core.
        self.reported_buffered = 0

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

    def abort_if_open(self) -> None:
        """Closed, but still flushing to a peer that does not read: drop the socket."""
        if not self.lost and self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
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
        self._syncing = False
        self._sync_executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="fsync")
        self._batch_timer: asyncio.TimerHandle | None = None
        self._trace_timer: asyncio.TimerHandle | None = None

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
        if self.broker.store is not None and self.broker.config.store.fsync == "batch":
            self._batch_timer = loop.call_later(_BATCH_SYNC_SECONDS, self._batch_sync)
        if self.broker.trace.enabled:
            self._trace_timer = loop.call_later(_TRACE_FLUSH_SECONDS, self._flush_trace)

    async def close(self) -> None:
        """Stop listening and close every connection."""
        if self._server is not None:
            self._server.close()
        self.broker.shutdown()
        self.flush()
        for conn in list(self.connections.values()):
            if conn.transport is not None:
                conn.transport.close()
        if self._server is not None:
            await self._server.wait_closed()
        if self._timer is not None:
            self._timer.cancel()
        if self._batch_timer is not None:
            self._batch_timer.cancel()
        if self._trace_timer is not None:
            self._trace_timer.cancel()
        await asyncio.sleep(0)
        self._sync_executor.shutdown(wait=True)

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
                    if conn is None:
                        continue
                    transport = conn.transport
                    if transport is None or transport.is_closing():
                        continue
                    if type(action) is Write:
                        transport.write(action.data)
                        buffered = transport.get_write_buffer_size()
                        if buffered or conn.reported_buffered:  # the usual write leaves nothing: nothing new to say
                            conn.reported_buffered = buffered
                            broker.report_buffered(action.session, buffered)
                    elif type(action) is Close:
                        if action.abort:
                            transport.abort()
                        else:
                            transport.close()  # flushes what was written (the ERROR frame) first ...
                            grace = broker.config.transport.so_write_timeout / 1000 or _CLOSE_GRACE_SECONDS
                            # ... unless the peer never reads: then the socket goes anyway.
                            asyncio.get_running_loop().call_later(grace, conn.abort_if_open)
                    elif type(action) is PauseReading:
                        transport.pause_reading()
                    elif type(action) is ResumeReading:
                        transport.resume_reading()
        finally:
            self._flushing = False
        self._arm_timer()
        if self.broker.sync_wanted and not self._syncing:
            self._start_sync()

    # -- group commit: one fsync in a thread for every RECEIPT waiting on it
    def _start_sync(self) -> None:
        store = self.broker.store
        assert store is not None
        self._syncing = True
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._sync_executor, store.sync)
        future.add_done_callback(self._sync_done)

    def _sync_done(self, future: "asyncio.Future[int]") -> None:
        self._syncing = False
        try:
            generation = future.result()
        except OSError as exc:  # the disk failed us: nothing more can be promised
            log.critical("journal fsync failed: %s; stopping", exc)
            raise
        self.broker.store_synced(generation)
        self.flush()

    def _flush_trace(self) -> None:
        self.broker.trace.flush()
        self._trace_timer = asyncio.get_running_loop().call_later(_TRACE_FLUSH_SECONDS, self._flush_trace)

    def _batch_sync(self) -> None:
        store = self.broker.store
        if store is not None and store.needs_sync and not self._syncing:
            self._start_sync()
        self._batch_timer = asyncio.get_running_loop().call_later(_BATCH_SYNC_SECONDS, self._batch_sync)

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
    store = open_store(config)
    trace = open_trace(config)
    temp_dir = os.path.join(config.broker.data_dir, "tmp_storage")
    broker = Broker(config, SystemClock(), seed=int.from_bytes(os.urandom(8), "big"), store=store, trace=trace,
                    temp_dir=temp_dir)
    try:
        broker.recover()
        server = BrokerServer(broker)
        await server.start(config.transport.host, config.transport.port)
    except BaseException:
        broker.close()
        raise
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
        broker.close()
        if trace is not None:
            trace.close()


def open_store(config: BrokerConfig) -> MessageStore | None:
    """The journals under ``data_dir`` (recovered), or None for a non-persistent broker."""
    if not config.broker.persistent:
        return None
    from storage import CorruptRecord, StorageError

    data_dir = config.broker.data_dir
    try:
        return MessageStore(config.store, data_dir)
    except StorageError as exc:
        repair = (f" `minibroker journal repair {data_dir}/journal` truncates it at the last good record, keeping a copy."
                  if isinstance(exc, CorruptRecord) else "")
        raise StoreOpenError(f"cannot open the journal in {data_dir}: {exc}.{repair}") from None
    except OSError as exc:
        raise StoreOpenError(f"cannot open the data directory {data_dir}: {exc.strerror or exc}") from None


def open_trace(config: BrokerConfig) -> "Trace | None":
    """The trace writer for ``broker.trace`` (encoding in a child process), or None."""
    path = config.broker.trace
    if not path:
        return None
    try:
        open(path, "a").close()
    except OSError as exc:
        raise ConfigError(f"bad value for 'broker.trace': {path!r} ({exc.strerror or exc})") from None
    return Trace(path, time.time, broker=config.broker.name, offload=True,
                 writer_nice=config.broker.trace_writer_nice, lag_limit=config.broker.trace_lag_limit)
