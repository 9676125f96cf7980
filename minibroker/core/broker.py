"""The broker core: events in, actions out. No sockets, no await, no clock.

Theory of operation
-------------------
The edge (``server.py``, or the virtual network in ``sim.py``) feeds events:

- ``open_session(peer, protocol)``: a connection arrived; returns its session id;
- ``receive_data(sid, data)``: bytes from that connection;
- ``set_writable(sid, flag)``: the socket's send buffer crossed its high or
  low water mark;
- ``connection_lost(sid)``: the socket is gone;
- ``login_checked(sid, principal)``: the password check it was asked for is done;
- ``tick()``: time passed; run due timers (heart-beats, connect timeout).

Every entry point the edge calls is wrapped in ``outbox.entry_point``: a store
that fails bringing a message back from disk in any of them stops the broker
(``store_failed``), as a frame's handler does for its own frame.

- ``store_synced(generation)`` / ``store_failed(error)``: the ``Sync`` it was
  asked for is done, or raised.

Each event does its work before it returns, down to what its frames leave for
the end of the batch (``_end_event``, see ``outbox.py``): blocked producers
retried, the store's deferred dequeues written, RECEIPTs released, the output
joined. Then the edge drains the outbox (``take_actions()``, which does nothing
else) and carries out what it returns: ``Write`` (one joined buffer per
connection), ``Close``, ``PauseReading`` / ``ResumeReading``, ``Sync`` (fsync
the store, then report ``store_synced`` or ``store_failed``), ``Shutdown`` (the
store failed) and ``CheckLogin`` (hash a password in a thread). Then it says
so (``actions_done()``, or the end of a ``turn()`` it carried them out in) and
drains again, until the outbox is empty: a connection whose full outbox held
back its dispatch gets more once its output is in the socket's buffer (see
``Writing.can_write`` in ``connection_state.py``), unless the socket said
meanwhile that it is full.

The core touches no file itself: the journals are the ``store`` it is given,
and the temp store and its scratch files live in the ``temp_dir`` it is given
(without one, and without a store, the scratch file is an anonymous one in the
system's temporary directory, which ``storage.spill`` opens).

Frames are handled by a dispatch table keyed by command, after the session's
state table (``session.TRANSITIONS``) has allowed the command. A
``ProtocolError`` from any handler becomes an ERROR frame (with ``receipt-id``
when the bad frame asked for a receipt) and then a close, as STOMP requires;
other exceptions are bugs and propagate.

The clock and the random seed are given, so a run under ``ManualClock`` is
exactly repeatable.

No client can hurt another, before or after it logs in: at most
``max_connections`` connections, of which at most
``max_unauthenticated_per_address`` from one address before they log in once
more than half the slots are taken (so sockets held open without a CONNECT
cannot take every slot, and a burst of honest clients from one host still gets
in); until its CONNECT
is accepted a connection's
frames are held to ``max_connect_frame_size`` (the parser's handshake limit);
the bytes of incomplete frames are charged to one broker-wide total
(``partial_bytes``) that ``partial_frame_memory_limit`` caps, and a frame must
arrive within ``partial_frame_timeout`` of its first byte; the password check
runs off the event loop (``CheckLogin``), and repeated failures from an
address have their refusals delayed (``logins.LoginFailures``).
"""

from __future__ import annotations

import logging
import random
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Iterator

from minibroker.config import BrokerConfig
from minibroker.connection.clock import Clock
from minibroker.connection.logins import LoginFailures, host_of
from minibroker.connection.security import ANONYMOUS, Principal, Security
from minibroker.connection.session import Session, State, negotiate_heart_beat, negotiate_version, parse_heart_beat
from minibroker.connection.timers import Timers
from minibroker.core.actions import Action, CheckLogin, Close, Sync, Write, WriteFrames
from minibroker.core.common import DEFERRED, ParkedSend, log
from minibroker.core.flow import ProducerFlowControl
from minibroker.core.handlers import FrameHandlers
from minibroker.core.hooks import DestinationHooks
from minibroker.core.outbox import Turn, entry_point, written_out
from minibroker.core.reading import ReadingControl
from minibroker.core.routing import Router
from minibroker.core.storehooks import StoreHooks
from minibroker.core.teardown import ConnectionTeardown
from minibroker.destinations.durables import OfflineDurables
from minibroker.destinations.queue import Queue
from minibroker.destinations.registry import DestinationRegistry
from minibroker.destinations.subscription import Subscription
from minibroker.destinations.usage import Usage
from minibroker.durability.persistence import MessageStore
from minibroker.errors import ProtocolError, Refused
from minibroker.frames import Frame
from minibroker.ops import SAMPLE_PERIOD
from minibroker.ops.rates import RateMeter
from minibroker.ops.stats import StatisticsSource, statistics_replies
from minibroker.protocol.codec import FrameParser, encode, escape
from minibroker.protocol.headers import header_text
from minibroker.trace import NullTrace, Recorder
from storage import StorageError, StoreFailed, StoreFull
from storage.tempstore import TEMP_STORE_NAME

__all__ = ["Broker", "SERVER_NAME", "ParkedSend"]


SERVER_NAME = "minibroker/0.1.0"

#: While tracing, how often each connection is sampled (``connection`` events).
_CONNECTION_SAMPLE_SECONDS = 1.0


class Broker:
    """The sans-IO broker. See the module docstring for the event protocol."""

    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        *,
        seed: int = 0,
        trace: Recorder | None = None,
        store: MessageStore | None = None,
        temp_dir: Any = None,
    ) -> None:
        self.config = config
        self.clock = clock
        #: Where the temp store for file cursors lives (wiped when first opened), chosen
        #: by the edge (the data directory's ``tmp_storage``); None: no temp store.
        self.temp_dir = temp_dir
        #: The journals for persistent messages, or None (a non-persistent broker).
        self.store = store
        self.rng = random.Random(seed)
        self.name = config.broker.name
        self.trace: Recorder = trace if trace is not None else NullTrace()
        #: Record a traced fact that has no method of its own (call only when tracing).
        self._emit = self.trace.event
        self.sessions: dict[int, Session] = {}
        limits = config.system_usage
        #: The usage tree's roots (ActiveMQ's SystemUsage).
        self.memory = Usage("memory", limits.memory_limit)
        self.store_usage = Usage("store", limits.store_limit)
        self.temp_usage = Usage("temp", limits.temp_limit)
        self.memory.add_listener(self._swap_file_cursors)
        if self.trace.enabled:
            for usage in (self.memory, self.store_usage, self.temp_usage):
                usage.add_listener(self._trace_usage)
        self.security = Security(config)
        #: What answers ``/queue/ActiveMQ.Statistics.*`` (and ``/metrics``): this broker's own
        #: state (``stats.statistics_replies``), or a stand-in such as a lab's trace replayed
        #: (``clients.labs.replay``), so its console needs no second statistics path.
        self.statistics_source: StatisticsSource = statistics_replies
        t = config.transport
        #: Failed logins by address (delays the refusals of a guesser).
        self.login_failures = LoginFailures(t.login_failures_before_delay, t.login_failure_delay / 1000)
        #: Bytes all parsers hold of frames not yet complete (``partial_frame_memory_limit``).
        self.partial_bytes = 0
        self.registry = DestinationRegistry(self)
        #: Every destination by full address (the registry's own dict).
        self.destinations = self.registry.by_address
        self.client_ids: dict[str, Session] = {}
        self.timers = Timers()
        if self.trace.enabled:
            self.timers.call_at(clock.now() + _CONNECTION_SAMPLE_SECONDS, self._sample_connections)
        #: Enqueue and dequeue rates per destination (statistics), sampled every second.
        self.rates = RateMeter()
        self.timers.call_at(clock.now() + SAMPLE_PERIOD, self._sample_rates)
        if config.broker.offline_durable_subscriber_timeout >= 0:
            OfflineDurables(config.broker, self.registry, clock, self.timers)
        #: A token for this broker run, in message ids and temporary names.
        self.boot = "%06x" % self.rng.getrandbits(24)
        self._id_prefix = f"ID:{self.name}-{self.boot}-"
        self._id_prefix_wire = escape(self._id_prefix, "1.2").encode("utf-8")
        self._next_session = 1
        #: Sessions with output not yet in the outbox (each holds this list's append).
        self._dirty: list[Session] = []
        #: Closes, pauses and such of the event running now: after its writes in the outbox.
        self._control: list[Action] = []
        #: The actions ready for the edge (``take_actions`` drains it).
        self._outbox: list[Action] = []
        #: Events (or turns) running now: the outermost settles (``outbox.py``).
        self.events = Turn(self._end_event, self._end_turn)
        #: Sessions whose full outbox went to the edge: given more once it says it carried it out.
        self._freed: list[Session] = []
        #: ... and the edge said so: refilled at the next event's end.
        self._refill: list[Session] = []
        #: The last event's end left work for the next (``actions_done`` does it).
        self._unfinished = False
        self._subs_by_key: dict[int, Subscription] = {}
        #: Queues whose cursor could not page in for lack of memory, in the order
        #: they blocked (a dict used as an ordered set: retries are first come, first served).
        self._blocked_cursors: dict[Queue, None] = {}
        #: Journaling, fsync waiting, recovery, the temp store (``storehooks.py``).
        self.storehooks = StoreHooks(self, emit=self._emit, request=self._control_append)
        #: subscription key -> when its "cursor is full" line was last logged.
        self._full_logged: dict[int, float] = {}
        #: Pausing and resuming a socket's reading, for a set of reasons (``reading.py``).
        self.reading = reading = ReadingControl(clock.now, self._control, self._handle, self._fail)
        #: A new message into its destination (``routing.py``).
        self.router = Router(self.trace, self.sessions, self.session_tag, self.storehooks)
        #: Producer flow control (``flow.py``): parked SENDs, blocked producers, the disk-full gate.
        self.flow = ProducerFlowControl(
            self,
            blocked_cursors=self._blocked_cursors,
            route=self.router.route,
            write_mark=self.storehooks.write_mark,
            receipt=self.storehooks.receipt,
            stop_reading=reading.stop,
            start_reading=reading.start,
            emit=self._emit,
        )
        #: Frame handling (``handlers.py``): one method per command.
        self.handlers = handlers = FrameHandlers(
            self,
            flow=self.flow,
            route=self.router.route,
            emit=self._emit,
            close=self._close,
            start_reading=reading.start,
            stop_reading=reading.stop,
            subs_by_key=self._subs_by_key,
            full_logged=self._full_logged,
            id_prefix=self._id_prefix,
            id_prefix_wire=self._id_prefix_wire,
        )
        #: A connection's end (``teardown.py``): one routine, every step taken.
        self.teardown = ConnectionTeardown(
            self, roll_back=handlers.roll_back, remove_subscription=handlers.remove_subscription
        )
        #: What destinations report back (``hooks.py``): consumption, expiry, dead letters, page-in.
        self.hooks = DestinationHooks(
            self,
            emit=self._emit,
            fail=self._fail,
            remove_subscription=handlers.remove_subscription,
            blocked_cursors=self._blocked_cursors,
            subs_by_key=self._subs_by_key,
            full_logged=self._full_logged,
            trace_usage=self._trace_usage,
        )
        #: Told just before and just after each connection's teardown (``invariants.TeardownChecker``), or None.
        self.close_observer: Any = None
        self._handlers: dict[str, Callable[[Session, Frame], Any]] = {
            "CONNECT": self._on_connect,
            "STOMP": self._on_connect,
            "SEND": handlers._on_send,
            "SUBSCRIBE": handlers._on_subscribe,
            "UNSUBSCRIBE": handlers._on_unsubscribe,
            "ACK": handlers._on_ack,
            "NACK": handlers._on_nack,
            "BEGIN": handlers._on_begin,
            "COMMIT": handlers._on_commit,
            "ABORT": handlers._on_abort,
            "DISCONNECT": handlers._on_disconnect,
        }

    # ================================================================== edge API
    @entry_point
    def open_session(self, peer: str = "", protocol: str = "tcp") -> int:
        """A connection arrived from ``peer`` through the ``protocol`` listener
        ("tcp", "websocket": statistics show it, and a WebSocket session's output
        comes frame by frame, as ``WriteFrames``); returns its session id."""
        sid = self._next_session
        self._next_session += 1
        t = self.config.transport
        parser = FrameParser(
            role="server",
            max_command_length=t.max_command_length,
            max_header_line_length=t.max_header_line_length,
            max_headers=t.max_headers,
            max_body_length=t.max_data_length,
            max_frame_size=t.max_frame_size,
            max_handshake_frame_size=min(t.max_connect_frame_size, t.max_frame_size),
        )
        now = self.clock.now()
        # Half for the core's outbox, half for the edge's socket buffer.
        # A session with new output goes on the dirty list (``take_actions`` empties it).
        session = Session(sid, peer, parser, now, max(1, t.write_buffer_limit // 2), self._dirty.append)
        session.tag = self.session_tag(sid)
        session.protocol = protocol
        session.framed = protocol == "websocket"
        self.sessions[sid] = session
        log.info("connection %d from %s%s", sid, peer or "?", "" if protocol == "tcp" else f" ({protocol})")
        if t.max_connections and len(self.sessions) > t.max_connections:
            log.warning(
                "connection %d from %s refused: %d connections is the limit", sid, peer or "?", t.max_connections
            )
            self._fail(
                session,
                ProtocolError(
                    f"the broker has reached its limit of {t.max_connections} connections "
                    "(transport.max_connections): connection refused, try again later"
                ),
                None,
            )
            return sid
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
                sid,
                peer or "?",
                waiting - 1,
            )
            self._fail(
                session,
                ProtocolError(
                    f"{host_of(peer) or 'this address'} already holds {waiting - 1} connections that have not "
                    "logged in (transport.max_unauthenticated_per_address): connection refused, try again later"
                ),
                None,
            )
            return sid
        if t.connect_timeout:
            self.timers.call_at(now + t.connect_timeout / 1000, self._check_connect_timeout, session)
        return sid

    def _unauthenticated_from(self, peer: str) -> int:
        """Open connections from ``peer``'s address whose CONNECT is not accepted yet (a new one included)."""
        host = host_of(peer)
        return sum(
            1
            for s in self.sessions.values()
            if s.state is State.CONNECTING or s.state is State.AUTHENTICATING
            if host_of(s.peer) == host
        )

    # -- the edge's calls on the store (``storehooks.py`` does the work)
    def recover(self) -> int:
        """Bring back what the journals hold; returns the number of messages (``StoreHooks.recover``)."""
        handlers = self.handlers
        return self.storehooks.recover(handlers.destination, handlers.compile_selector, self.next_seqs())

    @entry_point
    def store_synced(self, generation: int) -> None:
        """The edge's fsync covered every write up to ``generation``: release RECEIPTs."""
        self.storehooks.store_synced(generation)

    @entry_point
    def store_failed(self, error: BaseException) -> None:
        """The store failed (a ``Sync`` the edge carried out raised, or a write did): fail-stop."""
        self.storehooks.store_failed(error)

    def close(self) -> None:
        """Stop: make everything written durable and close the journals (and the temp store)."""
        self.storehooks.close()

    def _control_append(self, action: Action) -> None:
        """Hand the edge a control action (``Close``, ``Shutdown`` ...) at the end of the turn."""
        self._control.append(action)

    def next_seqs(self) -> Iterator[int]:
        """Message sequence numbers from the next one on (recovery takes them in journal order)."""
        while True:
            seq = self.handlers.next_message
            self.handlers.next_message += 1
            yield seq

    # -- the store's state, as statistics and the edge read it (``storehooks.py`` keeps it)
    @property
    def store_failure(self) -> str | None:
        """Why the store failed (the broker is stopping), or None."""
        return self.storehooks.failure

    @property
    def store_full(self) -> str | None:
        """Why the store is full (no space on disk), or None."""
        return self.storehooks.full

    @property
    def store_state(self) -> str:
        """``ok``, ``full`` or ``failed`` (``StoreHooks.store_state``)."""
        return self.storehooks.store_state

    @property
    def sync_wanted(self) -> bool:
        """Are RECEIPTs waiting for an fsync?"""
        return bool(self.storehooks.waiters)

    def session_tag(self, sid: int) -> str:
        """The session id of connection ``sid`` as CONNECTED announced it (the trace's ``session``)."""
        return f"{self.name}-{self.boot}-{sid}"

    def _swap_file_cursors(self, usage: Usage, old: int, new: int) -> None:
        """Memory crossed a high-water mark upward: every file cursor under it swaps (``hooks.py``)."""
        self.hooks.swap_file_cursors(usage, old, new)

    def diagnose(self) -> list[dict[str, Any]]:
        """Known pathologies visible right now (see ``diagnosis.py``)."""
        from minibroker.ops.diagnosis import diagnose

        return diagnose(self)

    def _trace_usage(self, usage: Usage, old: int, new: int) -> None:
        """A usage percent changed: a ``usage`` event with the broker-wide values."""
        dest = None if usage.parent is None else usage.name
        self._emit(
            "usage",
            mem_pct=self.memory.percent,
            store_pct=self.store_usage.percent,
            temp_pct=self.temp_usage.percent,
            dest=dest,
            dest_mem_pct=new if dest else None,
        )

    def _sample_connections(self) -> None:
        """Every second, while tracing: a ``connection`` event per connection (the stalled socket's evidence)."""
        now = self.clock.now()
        for session in self.sessions.values():
            if session.state is State.CONNECTED:
                self._emit(
                    "connection",
                    session=session.tag,
                    client_id=session.client_id,
                    addr=session.peer or None,
                    pending_bytes=session.out_bytes + session.transport_buffered,
                    pending=sum(len(s.dispatched) for s in session.subscriptions.values()),
                    idle_read=round(now - session.last_read, 6),
                    idle_write=round(now - session.last_write_progress, 6),
                )
        self.timers.call_at(now + _CONNECTION_SAMPLE_SECONDS, self._sample_connections)

    def _sample_rates(self) -> None:
        """Every second: the counters the statistics' rates come from (``rates.py``)."""
        now = self.clock.now()
        self.rates.sample(now, [(d.address, d.enqueued, d.dequeued) for d in self.destinations.values()])
        self.timers.call_at(now + SAMPLE_PERIOD, self._sample_rates)

    def report_buffered(self, sid: int, buffered: int) -> None:
        """The edge holds ``buffered`` bytes for ``sid``'s socket (for statistics)."""
        session = self.sessions.get(sid)
        if session is not None:
            session.transport_buffered = buffered

    @written_out
    def receive_data(self, sid: int, data: bytes) -> None:
        """Bytes arrived on connection ``sid``. (An event: ``outbox.entry_point``
        written out, for it runs once per read.)"""
        session = self.sessions.get(sid)
        if session is None or not session.is_open:
            return
        session.last_read = self.clock.now()
        try:
            events = self.events
            events.depth += 1
            try:
                # ``_read_on``'s first round, written out: the usual read is one round.
                if (
                    self._receive(session, data)
                    and session.parser.awaiting_version
                    and session.state is not State.AUTHENTICATING
                ):
                    self._read_on(session, b"")  # CONNECT set the version: parse the rest of the chunk with it
            finally:
                events.depth -= 1
            if not events.depth:
                self._end_event()
        except StoreFailed as exc:
            self.store_failed(exc)

    def _read_on(self, session: Session, data: bytes) -> None:
        """Parse and handle ``data`` and what the parser still holds."""
        parser = session.parser
        while True:
            if not self._receive(session, data) or not parser.awaiting_version or not session.is_open:
                return
            if session.state is State.AUTHENTICATING:
                return  # the rest waits in the parser for the negotiated version (login_checked)
            data = b""  # CONNECT set the version: parse the rest of the chunk with it

    def _receive(self, session: Session, data: bytes) -> bool:
        """Parse and handle ``data``; False once the session is closed or failed."""
        error: ProtocolError | None = None
        try:
            frames = session.parser.feed(data)
        except ProtocolError as exc:
            frames, error = exc.frames, exc
        # Nothing held now nor before: no partial frame to charge (the common read).
        over_limit = (
            self._charge_partial(session, bool(frames)) if session.partial_bytes or session.parser.buffered else None
        )
        for frame in frames:
            if frame.command == "DISCONNECT":
                # Read together with frames before it (a final ACK): an ACK that
                # frees prefetch room must not send this client messages it will
                # never read, which its close would hand back flagged redelivered.
                session.leaving = True
                break
        if error is None:
            error = over_limit
        reading = session.reading
        if reading.holding:  # reading is paused, or was and held frames are not all handled
            reading.hold(frames)
            frames = []
        for i, frame in enumerate(frames):
            if not session.is_open:
                return False
            self._handle(session, frame)
            if reading.paused:
                # Flow control stopped this producer: the rest waits, unread.
                reading.hold(frames[i + 1 :])
                break
        if error is not None and session.is_open:
            if reading.held:
                reading.hold_error(error)
            else:
                self._fail(session, error, None)
            return False
        return session.is_open

    def _charge_partial(self, session: Session, completed: bool) -> ProtocolError | None:
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

    @entry_point
    def internal_error(self, sid: int) -> None:
        """Handling what ``sid`` sent raised (a bug): tell its client with an ERROR,
        as for a protocol error, and close it. Its messages go back to their
        destinations as on any close; the other connections are not touched."""
        session = self.sessions.get(sid)
        if session is None or not session.is_open:
            return
        try:
            self._fail(
                session,
                ProtocolError(
                    "internal error in the broker: the connection is closed (the broker's log has the details)"
                ),
                None,
            )
        except Exception:  # the session is too broken even for that: just close it
            log.exception("connection %d: could not send the ERROR for an internal error", sid)
            if session.is_open:
                self._close(session, "internal error")

    @entry_point
    def close_connection(self, session: Session, reason: str) -> None:
        """Close ``session`` for ``reason`` (an administrator's close): its teardown, then ``Close``."""
        self._close(session, reason)

    @entry_point
    def shutdown(self) -> None:
        """Close every connection (the broker is stopping): each is traced as a shutdown."""
        for session in list(self.sessions.values()):
            self._close(session, "broker shutdown")

    @entry_point
    def connection_lost(self, sid: int) -> None:
        """The socket of ``sid`` is gone (closed by the peer or by us)."""
        session = self.sessions.get(sid)
        if session is not None:
            self._close(session, "connection lost", notify_edge=False)

    @entry_point
    def set_writable(self, sid: int, writable: bool) -> None:
        """The edge's socket buffer for ``sid`` is full (False) or drained (True)."""
        session = self.sessions.get(sid)
        if session is None:
            return
        now = self.clock.now()
        if writable:
            session.writing.socket_drained()
            session.last_write_progress = now
            if session.writing.can_write:
                self.handlers.resume_dispatch(session)
        else:
            session.writing.socket_blocked(now)
            timeout = self.config.transport.so_write_timeout
            if timeout:
                self.timers.call_at(now + timeout / 1000, self._check_write_timeout, session, now)

    def _check_write_timeout(self, session: Session, since: float) -> None:
        """``transport.so_write_timeout``: a socket whose writes have not moved is closed."""
        if not session.is_open or not session.writing.socket_full or session.writing.blocked_since != since:
            return
        waited = self.clock.now() - since
        log.warning(
            "Forced write timeout for: %s (connection %d, writes stuck for %.1f s)", session.peer, session.id, waited
        )
        if self.trace.enabled:
            self._emit(
                "write_timeout",
                session=session.tag,
                waited=round(waited, 6),
                pending_bytes=session.out_bytes + session.transport_buffered,
                client_id=session.client_id,
                addr=session.peer,
            )
        self._close(session, "write timeout", abort=True)

    @entry_point
    def tick(self) -> None:
        """Run every timer due now."""
        self.timers.run_due(self.clock.now())

    def next_deadline(self) -> float | None:
        """When ``tick()`` next has work, on the clock's ``now()`` scale."""
        return self.timers.next_deadline()

    # ================================================================== the outbox
    def take_actions(self) -> list[Action]:
        """What the edge must do now, in order: each connection's writes, then the
        closes, pauses and requests that came after them. A pure drain: the work that
        made these was done when the events arrived (``_end_event``), so a second call
        with no event between returns nothing and touches nothing."""
        actions = self._outbox
        if actions:
            self._outbox = []
        return actions

    @written_out
    def actions_done(self) -> bool:
        """The edge carried out what ``take_actions`` returned (its writes are in the
        sockets' buffers): an event. A connection whose full outbox held its dispatch
        back gets more now, unless its socket said meanwhile that it is full.
        Returns whether the outbox has actions again (this, or an event the edge fed
        while it carried them out, left some): else the edge need not drain it.
        (``entry_point`` written out: once per turn.)"""
        if self._freed or self._unfinished:  # else the last event's end finished everything
            try:
                self._end_turn()
            except StoreFailed as exc:
                self.store_failed(exc)
        return bool(self._outbox)

    def _end_turn(self) -> None:
        """The edge's turn is over: what it drained is carried out, the events it fed end."""
        if self._freed:
            self._refill.extend(self._freed)
            self._freed.clear()
        if not self.events.depth:
            self._end_event()

    def turn(self) -> Turn:
        """``with broker.turn():`` the events fed inside settle once, at its end
        (one write of the store's deferred dequeues for all of them), which also
        counts as ``actions_done``. For an edge that feeds several events before
        it drains, or feeds events while it carries out actions."""
        return self.events

    def _end_event(self) -> None:
        """The end of an event (or of a turn): finish what its frames left for the
        end of the batch (``_finish``), and put the actions it leaves in the outbox
        (see ``outbox.py``): each session's output as one ``Write``, then a ``Sync``
        if RECEIPTs wait for one, then the closes, pauses and requests. Runs as an
        event itself, so that what it calls (a failed store reported) does not
        settle again inside it.

        Each step runs only when it has work, and most ends have none for most of
        them: a read of ACKs leaves nothing at all; the usual read leaves output and
        nothing for ``_finish`` (nobody waits for space, the store wrote nothing,
        no connection waits for a refill)."""
        store = self.store
        storehooks = self.storehooks
        finish = (
            self.flow.retry
            or self._refill
            or (store is not None and (store.deferred_dequeues or store.write_generation != storehooks.generation_seen))
        )
        if not finish:
            self._unfinished = False  # what ``_finish`` would say
            if not (self._dirty or self._control or storehooks.waiters):
                return
        events = self.events
        events.depth = 1
        try:
            if finish:
                self._finish()
            outbox = self._outbox
            dirty = self._dirty
            if dirty:
                now = self.clock.now()
                for session in dirty:  # nothing here writes: emptied in place after (sessions hold its append)
                    if not session.outbox:
                        continue
                    writing = session.writing
                    throttled = not writing.can_write
                    if session.framed:
                        outbox.append(WriteFrames(session.id, session.take_frames()))
                    else:
                        outbox.append(Write(session.id, session.take_output()))
                    session.last_write = now
                    if not writing.socket_full:
                        session.last_write_progress = now
                    if throttled and writing.can_write and session.is_open:
                        self._freed.append(session)
                dirty.clear()
            if storehooks.waiters and storehooks.sync_due():
                outbox.append(Sync())
            if self._control:
                outbox.extend(self._control)
                self._control.clear()
        finally:
            events.depth = 0

    @entry_point
    def _finish(self) -> None:
        """Producers and cursors that waited for space, the store's deferred writes,
        dispatch to sessions whose outbox the edge carried out: it can bring messages
        back from disk, so a store that fails there stops the broker (``entry_point``)."""
        flow = self.flow
        if flow.retry:
            flow.retry = False
            flow.unblock_producers()
            for queue in list(self._blocked_cursors):
                del self._blocked_cursors[queue]
                queue.dispatch()
        self.storehooks.flush()  # (nothing, unless the store wrote or deferred since the last)
        refill = self._refill
        if refill:
            self._refill = []
            for session in refill:
                if session.is_open and session.writing.can_write:
                    self.handlers.resume_dispatch(session)
        # What the refill dispatched (an auto-ack dequeue) waits for the next event's end,
        # which actions_done is; and so does what retries the store's flush made possible.
        self._unfinished = True if refill else flow.retry

    # ================================================================== frames
    def _handle(self, session: Session, frame: Frame) -> None:
        session.frames_in += 1
        command = frame.command
        before = session.state
        receipt = frame.headers.get("receipt")
        mark = (
            None if receipt is None else self.storehooks.write_mark()
        )  # (the one rule of durability: storehooks.receipt)
        try:
            next_state = session.transitions.get(command)
            if next_state is None:
                next_state = session.next_state(command)  # not allowed now: raises, saying what is
            if receipt is not None and session.version == "1.0" and "\r" in receipt:
                # STOMP 1.0 escapes nothing: the RECEIPT could not carry it back.
                raise ProtocolError("a receipt header cannot hold a carriage return in STOMP 1.0")
            result = self._handlers[command](session, frame)
        except ProtocolError as exc:
            self._fail(session, exc, frame)
            return
        except StorageError as exc:  # a write the store refused where no handler answers it itself
            self._storage_refused(session, frame, exc)
            return
        if next_state is not session.state and session.state is before and session.is_open:
            session.set_state(next_state)  # unless the handler moved it itself
        if receipt is not None and result is not DEFERRED:
            self.storehooks.receipt(session, receipt, mark)

    def _storage_refused(self, session: Session, frame: Frame, exc: StorageError) -> None:
        """Answer a frame the store could not write with an ERROR (the connection stays
        open); a failed store stops the broker, a full one is marked full."""
        if isinstance(exc, StoreFailed):
            self.store_failed(exc)
            text = f"{self.storehooks.failure}; the broker accepts no persistent message and is stopping"
        else:
            if isinstance(exc, StoreFull) and exc.store != TEMP_STORE_NAME:  # the journals' disk, not the temp store's
                self.storehooks.found_full(exc)
            text = f"{frame.command} refused: {exc}"
        if session.is_open:
            self.flow.refuse_send(session, frame.headers.get("receipt"), text)

    def _fail(self, session: Session, exc: ProtocolError, frame: Frame | None) -> None:
        """Answer a protocol error with an ERROR frame, then close."""
        headers = {"message": header_text(exc.message)}
        if frame is not None and "receipt" in frame.headers:
            headers["receipt-id"] = header_text(frame.headers["receipt"])
        body = exc.detail
        if not body and frame is not None:
            shown = "\n".join(f"{k}:{v}" for k, v in list(frame.headers.items())[:20])
            body = f"The offending frame:\n{frame.command}\n{shown}\n"
        session.write(encode(Frame("ERROR", headers, body.encode("utf-8")), session.version))
        what = "refused" if isinstance(exc, Refused) else "protocol error"
        log.log(
            logging.INFO if isinstance(exc, Refused) else logging.WARNING,
            "session %d (%s): %s: %s",
            session.id,
            session.peer,
            what,
            exc.message,
        )
        if self.trace.enabled:
            self._emit(
                "error",
                session=session.tag,
                client_id=session.client_id or exc.client_id,
                message=exc.message,
                fatal=True,
                code=exc.code,
            )
        self._close(session, f"{what}: {exc.message}")

    def _close(self, session: Session, reason: str, *, notify_edge: bool = True, abort: bool = False) -> None:
        """Close ``session``: return its messages, drop its subscriptions (``teardown.py``)."""
        if session.state is State.CLOSED and session.id not in self.sessions:
            return
        observer = self.close_observer
        if observer is not None:
            observer.closing(self, session)
        session.set_state(State.CLOSED)
        session.writing.close()
        self.sessions.pop(session.id, None)
        self.partial_bytes -= session.partial_bytes  # what it held of a frame is let go
        session.partial_bytes = 0
        session.partial_since = None
        session.pending_connect = None
        session.parser.discard()
        if notify_edge:
            self._control.append(Close(session.id, reason, abort))
        self.teardown.tear_down(session)
        log.info("connection %d closed: %s", session.id, reason)
        if self.trace.enabled:
            self._emit("disconnect", session=session.tag, client_id=session.client_id, reason=_reason_code(reason))
        if observer is not None:
            observer.closed(self, session)

    # ------------------------------------------------------------------ CONNECT
    def _on_connect(self, session: Session, frame: Frame) -> Any:
        h = frame.headers
        try:
            version = negotiate_version(h.get("accept-version"))
        except ProtocolError as exc:
            headers = {"message": header_text(exc.message), "version": "1.0,1.1,1.2"}
            session.write(encode(Frame("ERROR", headers, b"Supported protocol versions are 1.0 1.1 1.2\n")))
            self._close(session, exc.message)
            return DEFERRED
        if version != "1.0":
            hb_text = h.get("heart-beat")
            client_hb = parse_heart_beat(hb_text) if hb_text is not None else self.config.transport.default_heart_beat
            negotiated = negotiate_heart_beat(client_hb)
        else:
            negotiated = (0, 0, "")
        session.pending_connect = (frame, version, negotiated)
        if not self.security.enabled:
            self._complete_connect(session, ANONYMOUS)
            return DEFERRED
        # The password hash is slow on purpose: the edge runs it in a thread, and
        # nothing more is read from this connection until it is back (login_checked).
        session.set_state(State.AUTHENTICATING)
        self.reading.stop(session, "login")
        self._control.append(
            CheckLogin(session.id, partial(self.security.check_login, h.get("login"), h.get("passcode")))
        )
        return DEFERRED  # CONNECT has no receipt

    @entry_point
    def login_checked(self, sid: int, principal: Principal | None) -> None:
        """The password check of ``sid``'s CONNECT is done: ``principal`` if it passed, None if not."""
        session = self.sessions.get(sid)
        if session is None or session.state is not State.AUTHENTICATING:
            return
        frame = session.pending_connect[0]
        address = host_of(session.peer)
        if principal is None:
            login = frame.headers.get("login") or ""
            refusal = ProtocolError(f"User name [{login}] or password is invalid.")
            # Without a login nothing was guessed (a page asking who it should be): told at once.
            delay = self.login_failures.failed(address, self.clock.now()) if login else 0.0
            if delay:
                log.warning(
                    "connection %d: failed login for %r from %s (%d in a row): refused in %.1f s",
                    sid,
                    login,
                    address,
                    self.login_failures.count(address),
                    delay,
                )
                self.timers.call_at(self.clock.now() + delay, self._refuse_login, session, refusal)
            else:
                self._fail(session, refusal, None)
            return
        self.login_failures.succeeded(address)
        try:
            self._complete_connect(session, principal)
        except ProtocolError as exc:
            self._fail(session, exc, None)
            return
        if session.is_open:
            self.reading.start(session, "login")
            self._read_on(session, b"")  # what came after the CONNECT, in the negotiated version

    def _refuse_login(self, session: Session, refusal: ProtocolError) -> None:
        if session.is_open:
            self._fail(session, refusal, None)

    def _complete_connect(self, session: Session, principal: Principal) -> None:
        """Accept the CONNECT kept in ``pending_connect`` for ``principal``: CONNECTED."""
        frame, version, (send_ms, recv_ms, hb_header) = session.pending_connect
        session.pending_connect = None
        h = frame.headers
        session.principal = principal
        client_id = h.get("client-id")
        if client_id:
            self._claim_client_id(session, client_id)
        session.version = version
        session.parser.version = version
        session.parser.handshake_complete = True
        session.login = h.get("login")
        session.hb_send_ms, session.hb_recv_ms = send_ms, recv_ms
        session.set_state(State.CONNECTED)
        connected = {"version": version, "session": session.tag, "server": SERVER_NAME}
        if version != "1.0":
            connected["heart-beat"] = hb_header
        session.write(encode(Frame("CONNECTED", connected), version))
        now = self.clock.now()
        if send_ms:
            self.timers.call_at(now + send_ms / 1000, self._heart_beat_out, session)
        if recv_ms:
            multiplier = self.config.transport.hb_grace_period_multiplier
            self.timers.call_at(now + recv_ms * multiplier / 1000, self._heart_beat_in, session)
        log.info(
            "session %d connected: STOMP %s client-id=%s heart-beat=%s",
            session.id,
            version,
            client_id,
            hb_header or "-",
        )
        if self.trace.enabled:
            self._emit(
                "connect",
                session=session.tag,
                client_id=client_id,
                version=version,
                addr=session.peer,
                heart_beat=hb_header or None,
            )

    def _claim_client_id(self, session: Session, client_id: str) -> None:
        holder = self.client_ids.get(client_id)
        if holder is not None and holder.is_open:
            if not self.config.transport.allow_link_stealing:
                raise ProtocolError(
                    f"Broker: {self.name} - Client: {client_id} already connected from {holder.peer or 'unknown'}",
                    code="client_id_in_use",
                    client_id=client_id,
                )
            log.info("client-id %s: link stolen by connection %d from %d", client_id, session.id, holder.id)
            self._fail(
                holder,
                ProtocolError(f"client-id {client_id} was taken over by a new connection (allow_link_stealing)"),
                None,
            )
        session.client_id = client_id
        self.client_ids[client_id] = session

    # ------------------------------------------------------------------ timers
    def _check_connect_timeout(self, session: Session) -> None:
        if session.state is State.CONNECTING and session.id in self.sessions:
            ms = self.config.transport.connect_timeout
            self._fail(session, ProtocolError(f"no CONNECT frame within {ms} ms"), None)

    def _heart_beat_out(self, session: Session) -> None:
        if not session.is_open:
            return
        period = session.hb_send_ms / 1000
        now = self.clock.now()
        if now - session.last_write >= period * 0.999:
            session.write(b"\n")
            session.last_write = now
        self.timers.call_at(session.last_write + period, self._heart_beat_out, session)

    def _heart_beat_in(self, session: Session) -> None:
        if not session.is_open:
            return
        limit = session.hb_recv_ms * self.config.transport.hb_grace_period_multiplier / 1000
        now = self.clock.now()
        if session.reading.paused:
            # The broker is not reading (a busy store, flow control): the peer's beats wait
            # unread, so its silence is ours. ActiveMQ skips the check while it is busy too.
            self.timers.call_at(now + limit, self._heart_beat_in, session)
            return
        silent = now - max(session.last_read, session.reading.resumed_at)
        if silent >= limit * 0.999:
            self._fail(
                session,
                ProtocolError(
                    f"heart-beat timeout: nothing received for {silent * 1000:.0f} ms (expected every {session.hb_recv_ms} ms)"
                ),
                None,
            )
            return
        self.timers.call_at(max(session.last_read, session.reading.resumed_at) + limit, self._heart_beat_in, session)


_REASON_CODES = (
    ("client disconnected", "client"),
    ("connection lost", "eof"),
    ("heart-beat timeout", "heartbeat"),
    ("write timeout", "write_timeout"),
    ("slow consumer", "slow_consumer"),
    ("slow too often", "slow_consumer"),
    ("shutdown", "shutdown"),
)


def _reason_code(reason: str) -> str:
    """The trace schema's disconnect reason for a close reason text."""
    for fragment, code in _REASON_CODES:
        if fragment in reason:
            return code
    return "error"


if TYPE_CHECKING:
    from minibroker.destinations.ports import Connection, DestinationEvents, DestinationParts, DestinationStore
    from minibroker.ops.admin import AdminHost
    from minibroker.ops.stats import BrokerView

    def _declared_interfaces(
        broker: Broker, session: Session
    ) -> tuple[DestinationParts, DestinationEvents, DestinationStore, AdminHost, BrokerView, Connection]:
        """The Broker holds what a destination is given, its hooks and store hooks are
        what destinations call, it is what the operations and statistics read, and a
        Session is its subscriptions' ``Connection``: mypy checks it here (the other
        parts' hosts are checked where the Broker makes them)."""
        return broker, broker.hooks, broker.storehooks, broker, broker, session
