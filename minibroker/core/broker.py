"""The broker core: events in, actions out. No sockets, no await, no clock.

The ``Broker`` holds its parts, one module each (``docs/design-notes.md`` has
the table) and takes the edge's events (``server.py``, or the virtual network):

- ``open_session(peer, protocol)``: a connection arrived; returns its session id;
- ``receive_data(sid, data)``: bytes from that connection;
- ``set_writable(sid, flag)``: its socket's send buffer is full, or drained;
- ``connection_lost(sid)``: the socket is gone;
- ``login_checked(sid, principal)``: the password check it was asked for is done;
- ``store_synced(generation)`` / ``store_failed(error)``: a ``Sync`` is done, or raised;
- ``tick()``: time passed; run the timers due (heart-beats, timeouts).

How one event runs (``outbox.py`` says how it settles):

1. The entry point is an ``outbox.entry_point``: a store that fails in it
   stops the broker (``store_failed``).
2. ``_receive`` parses the bytes; the session's state table
   (``session.TRANSITIONS``) allows each command or refuses it.
3. ``_handle`` runs the command's handler (``handshake.py`` for CONNECT,
   ``handlers.py`` for the rest); a ``ProtocolError`` becomes an ERROR frame
   (with ``receipt-id`` when asked) and a close; other exceptions are bugs.
4. The outermost event settles, and the edge drains the actions.

How the Broker holds its parts (``docs/design-notes.md`` has the table):

- it makes one read-only ``context.CoreContext`` from what it is given and
  keeps (the configuration, clock, timers, trace, security, store, usages,
  registry, sessions) and hands it to every part;
- it gives each part its sibling parts explicitly when it makes it, in an
  order in which they exist: reading, flow control, store hooks, router,
  frame handling, teardown, hooks, limits, handshake, outbox;
- it gives callables only for what it does itself (``_close``, ``_fail``,
  ``_handle``, ``_read_on``, ``store_failed``, ``diagnose``), and its own lists
  of the event running (``_dirty`` sessions, ``_control`` actions);
- no method of a part is bound onto it: its entry points call the parts.

What the Broker is given and keeps:

- the journals (``store``) and the temp store's directory (``temp_dir``): the
  core opens no file itself (without either, the temp store's scratch file is
  an anonymous one that ``storage.spill`` opens);
- the clock and the random seed: a run under ``ManualClock`` repeats exactly;
- the limits no client may exceed, before or after it logs in (``limits.py``).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from minibroker.config import BrokerConfig
from minibroker.connection.clock import Clock
from minibroker.connection.security import Principal, Security
from minibroker.connection.session import Session, State
from minibroker.connection.timers import Timers
from minibroker.core.actions import Action, Close
from minibroker.core.common import DEFERRED, ParkedSend, log
from minibroker.core.context import CoreContext
from minibroker.core.flow import ProducerFlowControl
from minibroker.core.handlers import FrameHandlers
from minibroker.core.handshake import SERVER_NAME, Handshake
from minibroker.core.hooks import DestinationHooks
from minibroker.core.limits import ConnectionLimits
from minibroker.core.outbox import Outbox, Turn, entry_point, written_out
from minibroker.core.reading import ReadingControl
from minibroker.core.recovery import recover
from minibroker.core.routing import Router
from minibroker.core.sampling import Sampling
from minibroker.core.storehooks import StoreHooks
from minibroker.core.teardown import ConnectionTeardown
from minibroker.destinations.durables import OfflineDurables
from minibroker.destinations.registry import DestinationRegistry
from minibroker.destinations.usage import Usage
from minibroker.durability.persistence import MessageStore
from minibroker.errors import ProtocolError, Refused
from minibroker.frames import Frame
from minibroker.ops.rates import RateMeter
from minibroker.ops.stats import StatisticsSource, statistics_replies
from minibroker.protocol.codec import FrameParser, encode
from minibroker.protocol.headers import header_text
from minibroker.trace import NullTrace, Recorder
from storage import StorageError, StoreFailed, StoreFull
from storage.tempstore import TEMP_STORE_NAME

__all__ = ["Broker", "SERVER_NAME", "ParkedSend"]


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
        self.sessions: dict[int, Session] = {}
        limits = config.system_usage
        #: The usage tree's roots (ActiveMQ's SystemUsage).
        self.memory = Usage("memory", limits.memory_limit)
        self.store_usage = Usage("store", limits.store_limit)
        self.temp_usage = Usage("temp", limits.temp_limit)
        self.memory.add_listener(self._swap_file_cursors)
        self.security = Security(config)
        #: What answers ``/queue/ActiveMQ.Statistics.*`` (and ``/metrics``): this broker's own
        #: state (``stats.statistics_replies``), or a stand-in such as a lab's trace replayed
        #: (``clients.labs.replay``), so its console needs no second statistics path.
        self.statistics_source: StatisticsSource = statistics_replies
        self.registry = DestinationRegistry(self)
        #: Every destination by full address (the registry's own dict).
        self.destinations = self.registry.by_address
        self.client_ids: dict[str, Session] = {}
        self.timers = Timers()
        #: A token for this broker run, in message ids and temporary names.
        self.boot = f"{self.rng.getrandbits(24):06x}"
        #: What every part is given: the services above, read-only, in ``CoreContext``'s order.
        self.context = context = CoreContext(
            config,
            clock,
            self.timers,
            self.trace,
            self.security,
            store,
            self.memory,
            self.store_usage,
            self.temp_usage,
            self.registry,
            self.destinations,
            self.sessions,
            self.name,
            self.boot,
        )
        #: Enqueue and dequeue rates per destination (statistics), sampled every second.
        self.rates = RateMeter()
        #: What is sampled on the timers: the rates, and while tracing the connections and usages.
        self.sampling = Sampling(context, self.rates)
        if config.broker.offline_durable_subscriber_timeout >= 0:
            OfflineDurables(config.broker, self.registry, clock, self.timers)
        self._next_session = 1
        #: Sessions with output not yet in the outbox (each holds this list's append).
        self._dirty: list[Session] = []
        #: Closes, pauses and such of the event running now: after its writes in the outbox.
        self._control: list[Action] = []
        # The parts, each made once its siblings are (each module says what it does):
        #: Pausing and resuming a socket's reading, for a set of reasons (``reading.py``).
        self.reading = reading = ReadingControl(context, self._control, self._handle, self._fail)
        #: Producer flow control (``flow.py``): parked SENDs, blocked producers and cursors, the disk-full gate.
        self.flow = flow = ProducerFlowControl(context, reading=reading)
        #: Journaling, fsync waiting, recovery, the temp store (``storehooks.py``).
        self.storehooks = storehooks = StoreHooks(context, flow=flow, temp_dir=temp_dir, request=self._control.append)
        #: A new message into its destination (``routing.py``).
        self.router = router = Router(context, storehooks)
        #: Frame handling (``handlers.py``): one method per command.
        self.handlers = handlers = FrameHandlers(
            context,
            tools_host=self,
            storehooks=storehooks,
            flow=flow,
            router=router,
            reading=reading,
            close=self._close,
        )
        #: A connection's end (``teardown.py``): one routine, every step taken.
        self.teardown = ConnectionTeardown(
            context, handlers=handlers, flow=flow, storehooks=storehooks, client_ids=self.client_ids
        )
        #: What destinations report back (``hooks.py``): consumption, expiry, dead letters, page-in.
        self.hooks = DestinationHooks(
            context,
            storehooks=storehooks,
            flow=flow,
            subscriptions=handlers,
            sampling=self.sampling,
            diagnose=self.diagnose,
            fail=self._fail,
        )
        #: What no client may exceed: connections, incomplete frames (``limits.py``).
        self.limits = ConnectionLimits(context, fail=self._fail)
        #: CONNECT, the login check, client-ids, heart-beats (``handshake.py``).
        self.handshake = Handshake(
            context,
            client_ids=self.client_ids,
            control=self._control,
            reading=reading,
            fail=self._fail,
            close=self._close,
            read_on=self._read_on,
        )
        #: The actions for the edge, and the settling at each event's end (``outbox.py``).
        self.outbox = Outbox(
            context,
            storehooks=storehooks,
            flow=flow,
            router=router,
            handlers=handlers,
            dirty=self._dirty,
            control=self._control,
            store_failed=self.store_failed,
        )
        #: Events (or turns) running now: the outermost settles.
        self.events = self.outbox.events
        #: Told just before and just after each connection's teardown (``invariants.TeardownChecker``), or None.
        self.close_observer: Any = None

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
        refusal = self.limits.refusal(session)
        if refusal is not None:
            self._fail(session, refusal, None)
            return sid
        if t.connect_timeout:
            self.timers.call_at(now + t.connect_timeout / 1000, self.handshake.check_connect_timeout, session)
        return sid

    @property
    def partial_bytes(self) -> int:
        """Bytes all parsers hold of frames not yet complete (``ConnectionLimits``)."""
        return self.limits.partial_bytes

    # -- the edge's calls on the store (``storehooks.py`` does the work)
    def recover(self) -> int:
        """Bring back what the journals hold; returns the number of messages (``recovery.py``)."""
        handlers = self.handlers
        return recover(self.context, self.storehooks, handlers.destination, handlers.compile_selector, self.next_seqs())

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
        return self.context.session_tag(sid)

    def _swap_file_cursors(self, usage: Usage, old: int, new: int) -> None:
        """Memory crossed a high-water mark upward: every file cursor under it swaps (``hooks.py``)."""
        self.hooks.swap_file_cursors(usage, old, new)

    def diagnose(self) -> list[dict[str, Any]]:
        """Known pathologies visible right now (see ``diagnosis.py``)."""
        from minibroker.ops.diagnosis import diagnose

        return diagnose(self)

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
                self.outbox.end_event()  # (what ``events.end_event`` calls)
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
            self.limits.charge_partial(session, bool(frames))
            if session.partial_bytes or session.parser.buffered
            else None
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
            self.trace.event(
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
        made these was done when the events arrived (``Outbox.end_event``), so a second
        call with no event between returns nothing and touches nothing."""
        outbox = self.outbox
        actions = outbox.actions
        if actions:
            outbox.actions = []
        return actions

    @written_out
    def actions_done(self) -> bool:
        """The edge carried out what ``take_actions`` returned (its writes are in the
        sockets' buffers): an event. A connection whose full outbox held its dispatch
        back gets more now, unless its socket said meanwhile that it is full.
        Returns whether the outbox has actions again (this, or an event the edge fed
        while it carried them out, left some): else the edge need not drain it.
        (``entry_point`` written out: once per turn.)"""
        try:
            return self.outbox.done()
        except StoreFailed as exc:
            self.store_failed(exc)
            return self.outbox.ready

    def turn(self) -> Turn:
        """``with broker.turn():`` the events fed inside settle once, at its end
        (one write of the store's deferred dequeues for all of them), which also
        counts as ``actions_done``. For an edge that feeds several events before
        it drains, or feeds events while it carries out actions."""
        return self.events

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
            result = self._run_handler(session, frame)
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

    def _run_handler(self, session: Session, frame: Frame) -> Any:
        """Run the handler of ``frame``'s command: ``handshake.py`` for CONNECT,
        ``handlers.py`` for the rest; returns what it returns (``DEFERRED``: it sends
        the RECEIPT itself). The session's state table allowed the command, so it is
        one of these. A ``match`` rather than a table of bound methods: the compiled
        build calls each handler directly."""
        handlers = self.handlers
        match frame.command:
            case "SEND":
                return handlers._on_send(session, frame)
            case "ACK":
                return handlers._on_ack(session, frame)
            case "NACK":
                return handlers._on_nack(session, frame)
            case "SUBSCRIBE":
                return handlers._on_subscribe(session, frame)
            case "UNSUBSCRIBE":
                return handlers._on_unsubscribe(session, frame)
            case "BEGIN":
                return handlers.transactions.on_begin(session, frame)
            case "COMMIT":
                return handlers.transactions.on_commit(session, frame)
            case "ABORT":
                return handlers.transactions.on_abort(session, frame)
            case "DISCONNECT":
                return handlers._on_disconnect(session, frame)
            case "CONNECT" | "STOMP":
                return self.handshake.on_connect(session, frame)
        raise ProtocolError(f"no handler for {frame.command}")

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
            self.trace.event(
                "error",
                session=session.tag,
                client_id=session.client_id or exc.client_id,
                message=exc.message,
                fatal=True,
                code=exc.code,
            )
        self._close(session, f"{what}: {exc.message}")

    @entry_point
    def login_checked(self, sid: int, principal: Principal | None) -> None:
        """The password check of ``sid``'s CONNECT is done: ``principal`` if it passed, None if not."""
        self.handshake.login_checked(sid, principal)

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
        self.limits.release_partial(session)  # what it held of a frame is let go
        session.partial_since = None
        session.pending_connect = None
        session.parser.discard()
        if notify_edge:
            self._control.append(Close(session.id, reason, abort))
        self.teardown.tear_down(session)
        log.info("connection %d closed: %s", session.id, reason)
        if self.trace.enabled:
            self.trace.event(
                "disconnect", session=session.tag, client_id=session.client_id, reason=_reason_code(reason)
            )
        if observer is not None:
            observer.closed(self, session)


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
