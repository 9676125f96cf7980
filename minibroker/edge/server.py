"""The asyncio edge: sockets in, core events out, core actions back to sockets.

Theory of operation
-------------------
This module and its two connection kinds (``connection.py``: STOMP over TCP;
``websocket.py``: STOMP over WebSocket) are the only code that touches sockets
or the real clock. It uses asyncio's protocol layer (``loop.create_server``
with an ``asyncio.Protocol``), the layer ``asyncio.start_server`` and its
streams are built on: a callback per read means no coroutine switch per frame,
which matters at 50k msg/s.

- A connection passes the STOMP bytes it reads straight to
  ``Broker.receive_data`` (an event: the core does all its work there); then
  ``flush`` drains the actions the core has ready, carries them out through
  the connection (``write``, ``write_frames``, ``close``), says so
  (``actions_done``: a connection whose full outbox held its dispatch back
  gets more), and drains again until nothing is left. Nothing it carries out
  feeds the core another event but a socket whose buffer filled
  (``pause_writing``), an event of its own; the sockets' closes arrive later,
  from the loop.
- The transport's high-water mark is the connection's ``write_buffer_limit``
  (``connection.py``): crossing it tells the core the connection is not writable,
  so dispatch to it stops (the bounded outbound buffer). This is ``drain()``
  backpressure without a coroutine per connection.
- ``PauseReading`` stops reading a producer's socket (producer flow control
  by TCP backpressure, as ActiveMQ does to a STOMP producer that asked for no
  receipt).
- ``CheckLogin`` runs a password hash (slow on purpose) in a thread of its
  own pool, never on the event loop, and hands the result back to the core.
- One timer handle is kept for the core's earliest deadline (heart-beats,
  connect timeouts); after every batch of events it is re-armed if the core
  scheduled something earlier, or when it fired.
- ``Sync`` runs the store's fsync in a worker thread (group commit: one fsync
  for every RECEIPT waiting on it) and reports the outcome to the core:
  ``store_synced``, or ``store_failed`` if it raised. ``Shutdown`` (the store
  failed) stops the broker as SIGTERM does, and ``serve`` then raises
  ``StoreFailure``: ``minibroker serve`` exits non-zero.
- SIGINT and SIGTERM close the listeners and every connection, then return.
- The WebSocket listener and the web console are imported when they are on
  (``websockets``, ``prometheus_client`` and the console's page are not loaded
  by a broker that serves STOMP over TCP alone): the port opens sooner.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import logging
import os
import signal
import socket
import time
from typing import Any, cast

from minibroker.config import BrokerConfig
from minibroker.connection.clock import SystemClock
from minibroker.core import STORE_FAILED_EXIT
from minibroker.core.actions import (
    Action,
    CheckLogin,
    Close,
    PauseReading,
    ResumeReading,
    Shutdown,
    Sync,
    Write,
    WriteFrames,
)
from minibroker.core.broker import Broker
from minibroker.durability.persistence import MessageStore
from minibroker.edge.connection import EdgeConnection, TcpConnection
from minibroker.errors import ConfigError, StoreFailure, StoreOpenError
from minibroker.eventloop import describe
from minibroker.trace import Trace
from minibroker.trace.segments import twin_dir
from storage import CorruptRecord, StorageError

__all__ = ["BrokerServer", "serve", "check_ports", "open_store", "open_trace", "trace_form"]

#: fsync "batch": how often the journals are synced (KahaDB's periodic sync: 1 s).
_BATCH_SYNC_SECONDS = 1.0
#: How often the trace buffer is handed to its writer.
_TRACE_FLUSH_SECONDS = 0.5
#: Password hashes at once (each keeps a core busy; the event loop is never one of them).
_LOGIN_THREADS = 2


log = logging.getLogger("minibroker.server")


class BrokerServer:
    """A ``Broker`` core behind a listening socket."""

    def __init__(self, broker: Broker, stop: asyncio.Event | None = None) -> None:
        """``stop`` is set when the core asks for a ``Shutdown`` (``failure`` says why)."""
        self.broker = broker
        self.stop = stop
        #: The ``Shutdown`` the core asked for (the store failed), or None.
        self.failure: Shutdown | None = None
        self.connections: dict[int, EdgeConnection] = {}
        self._server: asyncio.Server | None = None
        #: The STOMP over WebSocket listener, if on.
        self._websocket_server: asyncio.Server | None = None
        #: The web console's listener (its page, /metrics, the page's STOMP), if on.
        self._console_server: asyncio.Server | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        #: ``broker.timers.scheduled`` when the timer was last armed (-1: look again).
        self._timers_seen = -1
        self._flushing = False
        self._syncing = False
        self._sync_executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="fsync")
        self._login_executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=_LOGIN_THREADS, thread_name_prefix="login"
        )
        self._batch_timer: asyncio.TimerHandle | None = None
        self._trace_timer: asyncio.TimerHandle | None = None

    @property
    def port(self) -> int:
        """The port actually bound (useful with port 0)."""
        assert self._server is not None and self._server.sockets
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def websocket_port(self) -> int | None:
        """The STOMP over WebSocket port actually bound, or None when that listener is off."""
        return _bound_port(self._websocket_server)

    @property
    def console_port(self) -> int | None:
        """The web console's port actually bound, or None when it is off."""
        return _bound_port(self._console_server)

    async def start(
        self, host: str, port: int, websocket_port: int = 0, console: tuple[str, int] | None = None
    ) -> None:
        """Listen on ``host:port``; unless ``websocket_port`` is 0, STOMP over
        WebSocket on ``host:websocket_port`` (``ANY_PORT``: a free one); and the
        web console on ``console`` (host, port) unless its port is 0."""
        loop = asyncio.get_running_loop()
        self._server = await _listen(lambda: TcpConnection(self), host, port)
        log.info("listening on %s:%d (STOMP 1.0, 1.1, 1.2); event loop: %s", host, self.port, describe(loop))
        if websocket_port:
            from minibroker.edge.websocket import WebSocketConnection

            self._websocket_server = await _listen(lambda: WebSocketConnection(self), host, max(websocket_port, 0))
            log.info("listening on %s:%d (STOMP over WebSocket)", host, self.websocket_port)
        if console is not None and console[1]:
            from minibroker.edge.console import ConsoleConnection
            from minibroker.edge.console.vendor import check as console_library_problems

            self._console_server = await _listen(lambda: ConsoleConnection(self), console[0], max(console[1], 0))
            log.info("web console on http://%s:%d/ (Prometheus metrics at /metrics)", console[0], self.console_port)
            problems = console_library_problems()
            if problems:  # the page would load without them: it is refused with a 503 saying why
                log.warning("the web console's page is off (/metrics answers): %s", "; ".join(problems))
        self._arm_timer()
        if self.broker.store is not None and self.broker.config.store.fsync == "batch":
            self._batch_timer = loop.call_later(_BATCH_SYNC_SECONDS, self._batch_sync)
        if self.broker.trace.enabled:
            self._trace_timer = loop.call_later(_TRACE_FLUSH_SECONDS, self._flush_trace)

    async def close(self) -> None:
        """Stop listening and close every connection."""
        listeners = [srv for srv in (self._server, self._websocket_server, self._console_server) if srv is not None]
        for listener in listeners:
            listener.close()
        self.broker.shutdown()
        self.flush()
        for conn in list(self.connections.values()):
            if conn.transport is not None and not conn.transport.is_closing():
                conn.close(abort=False)
        for listener in listeners:
            await listener.wait_closed()
        if self._timer is not None:
            self._timer.cancel()
        if self._batch_timer is not None:
            self._batch_timer.cancel()
        if self._trace_timer is not None:
            self._trace_timer.cancel()
        await asyncio.sleep(0)
        self._sync_executor.shutdown(wait=True)
        self._login_executor.shutdown(wait=False, cancel_futures=True)

    # -- carrying out the core's actions
    def flush(self) -> None:
        """Carry out every action the core has for us, in its order, then re-arm the timer."""
        if self._flushing:
            return
        broker = self.broker
        actions = broker.take_actions()
        if actions:
            self._flushing = True
            try:
                connections = self.connections
                while actions:
                    for action in actions:
                        conn = connections.get(action.session)
                        if conn is None:
                            self._carry_out_for_broker(action)
                            continue
                        transport = conn.transport
                        if transport is None or transport.is_closing():
                            continue
                        kind = type(action)
                        if kind is Write:
                            conn.write(action.data)  # type: ignore[union-attr]
                        elif kind is WriteFrames:
                            conn.write_frames(action.frames)  # type: ignore[union-attr]
                        elif kind is Close:
                            conn.close(action.abort)  # type: ignore[union-attr]
                        elif kind is PauseReading:
                            transport.pause_reading()
                        elif kind is ResumeReading:
                            transport.resume_reading()
                        elif kind is CheckLogin:
                            self._check_login(cast(CheckLogin, action))
                    # The writes are in the sockets' buffers: a refill may follow.
                    actions = broker.take_actions() if broker.actions_done() else []
            finally:
                self._flushing = False
        if broker.timers.scheduled != self._timers_seen:  # else the armed timer is still the earliest
            self._arm_timer()

    def _carry_out_for_broker(self, action: Action) -> None:
        """An action about the broker, not a connection (or for a connection already gone)."""
        if type(action) is Sync:
            self._start_sync()
        elif type(action) is Shutdown:
            self._shutdown(action)

    def _shutdown(self, action: Shutdown) -> None:
        """The core cannot go on (its store failed): stop as SIGTERM would."""
        if self.failure is None:
            self.failure = action
            log.critical("stopping the broker: %s", action.reason)
            if self.stop is not None:
                self.stop.set()

    # -- password checks: in a thread, so that a hash never stops the event loop
    def _check_login(self, action: CheckLogin) -> None:
        future = asyncio.get_running_loop().run_in_executor(self._login_executor, action.check)
        future.add_done_callback(lambda done: self._login_done(action.session, done))

    def _login_done(self, sid: int, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            return  # shutting down
        error = future.exception()
        if error is not None:  # a bug in the check: refuse the login, keep the traceback
            log.error("connection %d: the password check failed", sid, exc_info=error)
        self.broker.login_checked(sid, None if error is not None else future.result())
        self.flush()

    # -- group commit: one fsync in a thread for every RECEIPT waiting on it
    def _start_sync(self) -> None:
        store = self.broker.store
        assert store is not None
        self._syncing = True
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self._sync_executor, store.sync)
        future.add_done_callback(self._sync_done)

    def _sync_done(self, future: asyncio.Future[int]) -> None:
        self._syncing = False
        try:
            generation = future.result()
        except Exception as exc:  # noqa: BLE001 - whatever stopped the fsync, nothing more is durable
            self.broker.store_failed(exc)
        else:
            self.broker.store_synced(generation)
        self.flush()

    def _flush_trace(self) -> None:
        trace: Any = self.broker.trace  # a recorder: this timer runs only while tracing
        trace.flush()
        self._trace_timer = asyncio.get_running_loop().call_later(_TRACE_FLUSH_SECONDS, self._flush_trace)

    def _batch_sync(self) -> None:
        store = self.broker.store
        if store is not None and store.needs_sync and not self._syncing:
            self._start_sync()
        self._batch_timer = asyncio.get_running_loop().call_later(_BATCH_SYNC_SECONDS, self._batch_sync)

    def _arm_timer(self) -> None:
        """Arm the one timer handle for the core's earliest deadline, unless it is armed
        for that or an earlier one. Looked at only when the core scheduled something
        since the last look (``Timers.scheduled``), or a tick ran."""
        self._timers_seen = self.broker.timers.scheduled
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
        self._timers_seen = -1  # the earliest deadline ran: look for the next one
        self.broker.tick()
        self.flush()


def _bound_port(listener: asyncio.Server | None) -> int | None:
    if listener is None or not listener.sockets:
        return None
    return int(listener.sockets[0].getsockname()[1])


async def _listen(factory: Any, host: str, port: int) -> asyncio.Server:
    """A listener on ``host:port``; a port in use is a clear error naming it."""
    try:
        return await asyncio.get_running_loop().create_server(factory, host, port, reuse_address=True)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


async def serve(config: BrokerConfig, *, ready: Any = None, stop: asyncio.Event | None = None) -> None:
    """Run a broker with ``config`` until SIGINT/SIGTERM (or ``stop`` is set).

    ``ready``, if given, is called with the ``BrokerServer`` once listening.
    Raises ``StoreFailure`` after an orderly stop that a storage failure caused.
    """
    check_ports(config)  # a port in use refuses the start before anything is opened or made on disk
    trace = open_trace(config)
    try:
        store = open_store(config)
    except BaseException:
        if trace is not None:
            trace.close()
        raise
    temp_dir = os.path.join(config.broker.data_dir, "tmp_storage")
    broker = Broker(
        config, SystemClock(), seed=int.from_bytes(os.urandom(8), "big"), store=store, trace=trace, temp_dir=temp_dir
    )
    stop = stop or asyncio.Event()
    try:
        try:
            broker.recover()
        except StorageError as exc:  # a read at start that failed: nothing half-recovered is served
            raise StoreOpenError(f"cannot recover the store in {config.broker.data_dir}: {exc}") from None
        server = BrokerServer(broker, stop)
        await server.start(
            config.transport.host,
            config.transport.port,
            config.transport.websocket_port,
            (config.console.host, config.console.port),
        )
    except BaseException:
        broker.close()
        raise
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
        try:
            broker.close()
        except StorageError as exc:  # what is durable is what the next start recovers
            log.critical("closing the store failed: %s", exc)
            server.failure = server.failure or Shutdown(str(exc), STORE_FAILED_EXIT)
        if trace is not None:
            trace.close()
    if server.failure is not None:
        raise StoreFailure(f"the broker stopped: {server.failure.reason}", server.failure.exit_status)


def check_ports(config: BrokerConfig) -> None:
    """Bind (and let go of) every fixed port ``config`` listens on: a ``ConfigError``
    naming the first in use, raised before the store is opened or its directory made.

    The listeners proper are made after recovery (a client must not connect to a
    broker still reading its journal); what this check cannot see is a port taken in
    between, which ``_listen`` refuses in the same words."""
    t, c = config.transport, config.console
    for host, port in ((t.host, t.port), (t.host, t.websocket_port), (c.host, c.port)):
        if port <= 0:  # off, or any free port
            continue
        try:
            addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
            for family, kind, proto, _, address in addresses:
                with socket.socket(family, kind, proto) as probe:
                    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    if family == socket.AF_INET6:
                        probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                    probe.bind(address)
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def open_store(config: BrokerConfig) -> MessageStore | None:
    """The journals under ``data_dir`` (recovered), or None for a non-persistent broker."""
    if not config.broker.persistent:
        return None
    data_dir = config.broker.data_dir
    try:
        return MessageStore(config.store, data_dir)
    except StorageError as exc:
        repair = (
            f" `minibroker journal repair {data_dir}/journal` truncates it at the last good record, keeping a copy."
            if isinstance(exc, CorruptRecord)
            else ""
        )
        raise StoreOpenError(f"cannot open the journal in {data_dir}: {exc}.{repair}") from None
    except OSError as exc:
        raise StoreOpenError(f"cannot open the data directory {data_dir}: {exc.strerror or exc}") from None


def trace_form(asked: str, *, pyarrow: bool) -> str:
    """What the trace's writer writes for ``broker.trace_format = asked``: ``auto`` is both
    forms where pyarrow is installed, JSON lines alone where it is not."""
    if asked == "auto":
        return "both" if pyarrow else "jsonl"
    return asked


def open_trace(config: BrokerConfig) -> Trace | None:
    """The trace writer for ``broker.trace`` (encoding in a child process), or None.

    Parquet (``broker.trace_format``) is written by that child alone: this
    process only checks that pyarrow is there to import, and never imports it.
    """
    path = config.broker.trace
    if not path:
        return None
    form = trace_form(config.broker.trace_format, pyarrow=importlib.util.find_spec("pyarrow") is not None)
    if form != "jsonl" and importlib.util.find_spec("pyarrow") is None:
        raise ConfigError(
            f"broker.trace_format = {form!r} needs pyarrow, which is not installed "
            "(pip install pyarrow, or the spark extra); trace_format = 'jsonl' needs nothing"
        )
    try:
        if form != "parquet":
            open(path, "a").close()
        if form != "jsonl":
            os.makedirs(twin_dir(path), exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"bad value for 'broker.trace': {path!r} ({exc.strerror or exc})") from None
    if form == "both":
        log.info(
            "trace: %s, as JSON lines and as Parquet segments in %s (what analyze reads fastest)", path, twin_dir(path)
        )
    elif form == "jsonl" and config.broker.trace_format == "auto":
        log.info(
            "trace: %s, as JSON lines only: pyarrow is not installed (`make spark` installs it), "
            "and analyze reads a trace's Parquet form several times faster",
            path,
        )
    return Trace(
        path,
        time.time,
        broker=config.broker.name,
        offload=True,
        writer_nice=config.broker.trace_writer_nice,
        lag_limit=config.broker.trace_lag_limit,
        format=form,
    )
