"""The broker core: events in, actions out. No sockets, no await, no clock.

Theory of operation
-------------------
The edge (``server.py``, or the virtual network in ``sim.py``) feeds events:

- ``open_session(peer)``: a connection arrived; returns its session id;
- ``receive_data(sid, data)``: bytes from that connection;
- ``set_writable(sid, flag)``: the socket's send buffer crossed its high or
  low water mark;
- ``connection_lost(sid)``: the socket is gone;
- ``tick()``: time passed; run due timers (heart-beats, connect timeout).

After each event the edge calls ``take_actions()`` and carries out what it
returns: ``Write`` (one joined buffer per connection), ``Close``,
``PauseReading`` / ``ResumeReading``. It calls ``take_actions()`` again until
it returns nothing, because draining a session's outbox can let dispatch
continue for that session (see ``Session.can_write``).

Frames are handled by a dispatch table keyed by command, after the session's
state table (``session.TRANSITIONS``) has allowed the command. A
``ProtocolError`` from any handler becomes an ERROR frame (with ``receipt-id``
when the bad frame asked for a receipt) and then a close, as STOMP requires;
other exceptions are bugs and propagate.

The clock and the random seed are given, so a run under ``ManualClock`` is
exactly repeatable.
"""
from __future__ import annotations

import json
import logging
import random
from typing import Any, Callable, NamedTuple

from .actions import Action, Close, PauseReading, ResumeReading, Write
from .clock import Clock
from .codec import FrameParser, encode
from .config import BrokerConfig
from .destination import Destination, DurableState, Queue, Topic
from .errors import ProtocolError, ResourceLimitError
from .frames import Frame
from .cursor import PagedRef
from .message import BROKER_SET_HEADERS, Message
from .persistence import MessageStore, StoreRef, durable_key, encode_payload
from .registry import TEMP_PREFIXES, DestinationRegistry
from .security import Security
from .stats import is_statistics_address, statistics_replies
from .session import Session, State, negotiate_heart_beat, negotiate_version, parse_heart_beat
from .subscription import ACK_MODES, Subscription
from .timers import Timers
from .usage import Usage
from storage import StorageError

__all__ = ["Broker", "SERVER_NAME", "ParkedSend"]

log = logging.getLogger("minibroker.broker")

SERVER_NAME = "minibroker/0.1.0"

#: A handler's return value meaning "I will send (or have sent) the RECEIPT myself".
DEFERRED = object()

_MAX_PREFETCH = 32767
_TEMP_STARTS = tuple(TEMP_PREFIXES)


class ParkedSend(NamedTuple):
    """A SEND held back by producer flow control."""

    destination: Destination
    message: Message
    receipt: str | None
    deadline: float | None


class _NoTrace:
    """Stands in when tracing is off."""

    enabled = False

    def emit(self, event: str, **fields: Any) -> None:  # pragma: no cover - never called
        pass


class Broker:
    """The sans-IO broker. See the module docstring for the event protocol."""

    def __init__(
        self, config: BrokerConfig, clock: Clock, *, seed: int = 0, trace: Any = None, store: MessageStore | None = None
    ) -> None:
        self.config = config
        self.clock = clock
        #: The journals for persistent messages, or None (a non-persistent broker).
        self.store = store
        self.rng = random.Random(seed)
        self.name = config.broker.name
        self.trace = trace if trace is not None else _NoTrace()
        self.sessions: dict[int, Session] = {}
        limits = config.system_usage
        #: The usage tree's roots (ActiveMQ's SystemUsage).
        self.memory = Usage("memory", limits.memory_limit)
        self.store_usage = Usage("store", limits.store_limit)
        self.temp_usage = Usage("temp", limits.temp_limit)
        self.security = Security(config)
        self.registry = DestinationRegistry(self)
        #: Every destination by full address (the registry's own dict).
        self.destinations: dict[str, Destination] = self.registry.by_address
        self.client_ids: dict[str, Session] = {}
        self.timers = Timers()
        #: A token for this broker run, in message ids and temporary names.
        self.boot = "%06x" % self.rng.getrandbits(24)
        self._next_session = 1
        self._next_sub = 1
        self._next_message = 1
        self._dirty: list[Session] = []
        self._control: list[Action] = []
        self._refill: list[Session] = []
        self._subs_by_key: dict[int, Subscription] = {}
        #: Sessions with producers parked by flow control, in blocking order.
        self._blocked: list[Session] = []
        self._retry_blocked = False
        #: Queues whose cursor could not page in for lack of memory.
        self._blocked_cursors: set[Queue] = set()
        #: RECEIPTs waiting for an fsync: (store write generation, session, receipt id).
        self._sync_waiters: list[tuple[int, Session, str]] = []
        #: The storage transaction of the COMMIT being applied, if any.
        self._txid: str | None = None
        self._next_storage_tx = 1
        self._store_generation_seen = 0
        self._last_block_warning: dict[str, float] = {}
        self._handlers: dict[str, Callable[[Session, Frame], Any]] = {
            "CONNECT": self._on_connect,
            "STOMP": self._on_connect,
            "SEND": self._on_send,
            "SUBSCRIBE": self._on_subscribe,
            "UNSUBSCRIBE": self._on_unsubscribe,
            "ACK": self._on_ack,
            "NACK": self._on_nack,
            "BEGIN": self._on_begin,
            "COMMIT": self._on_commit,
            "ABORT": self._on_abort,
            "DISCONNECT": self._on_disconnect,
        }

    # ================================================================== edge API
    def open_session(self, peer: str = "") -> int:
        """A connection arrived from ``peer``; returns its session id."""
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
        )
        now = self.clock.now()
        # Half for the core's outbox, half for the edge's socket buffer.
        session = Session(sid, peer, parser, now, max(1, t.write_buffer_limit // 2), self._mark_dirty)
        self.sessions[sid] = session
        if t.connect_timeout:
            self.timers.call_at(now + t.connect_timeout / 1000, self._check_connect_timeout, session)
        log.info("connection %d from %s", sid, peer or "?")
        return sid

    def _mark_dirty(self, session: Session) -> None:
        self._dirty.append(session)

    def receive_data(self, sid: int, data: bytes) -> None:
        """Bytes arrived on connection ``sid``."""
        session = self.sessions.get(sid)
        if session is None or not session.is_open:
            return
        session.last_read = self.clock.now()
        parser = session.parser
        while True:
            if not self._receive(session, data) or not parser.awaiting_version or not session.is_open:
                return
            data = b""  # CONNECT set the version: parse the rest of the chunk with it

    def _receive(self, session: Session, data: bytes) -> bool:
        """Parse and handle ``data``; False once the session is closed or failed."""
        error: ProtocolError | None = None
        try:
            frames = session.parser.feed(data)
        except ProtocolError as exc:
            frames, error = exc.frames, exc
        if session.reading_paused or session.held_frames:
            session.held_frames.extend(frames)
            frames = []
        for i, frame in enumerate(frames):
            if not session.is_open:
                return False
            self._handle(session, frame)
            if session.reading_paused:
                # Flow control stopped this producer: the rest waits, unread.
                session.held_frames.extend(frames[i + 1 :])
                break
        if error is not None and session.is_open:
            if session.held_frames:
                session.held_error = error
            else:
                self._fail(session, error, None)
            return False
        return session.is_open

    def connection_lost(self, sid: int) -> None:
        """The socket of ``sid`` is gone (closed by the peer or by us)."""
        session = self.sessions.get(sid)
        if session is not None:
            self._close(session, "connection lost", notify_edge=False)

    def set_writable(self, sid: int, writable: bool) -> None:
        """The edge's socket buffer for ``sid`` is full (False) or drained (True)."""
        session = self.sessions.get(sid)
        if session is None:
            return
        session.transport_paused = not writable
        if writable:
            session.can_write = session.out_bytes < session.write_buffer_limit
            if session.can_write:
                self._resume_dispatch(session)
        else:
            session.can_write = False

    def tick(self) -> None:
        """Run every timer due now."""
        self.timers.run_due(self.clock.now())

    def next_deadline(self) -> float | None:
        """When ``tick()`` next has work, on the clock's ``now()`` scale."""
        return self.timers.next_deadline()

    def take_actions(self) -> list[Action]:
        """What the edge must do now: writes first, then closes and pauses."""
        if self._retry_blocked:
            self._retry_blocked = False
            self._unblock_producers()
            for queue in list(self._blocked_cursors):
                self._blocked_cursors.discard(queue)
                queue.dispatch()
        store = self.store
        if store is not None and store.write_generation != self._store_generation_seen:
            self._store_generation_seen = store.write_generation
            store.flush()
            self._set_store_usage(store.disk_usage())
            if self.config.store.fsync != "always":
                self._release_sync_waiters(store.write_generation)
        if self._refill:
            refill, self._refill = self._refill, []
            for session in refill:
                if session.is_open and session.can_write:
                    self._resume_dispatch(session)
        actions: list[Action] = []
        if self._dirty:
            dirty, self._dirty = self._dirty, []
            now = self.clock.now()
            for session in dirty:
                if not session.outbox:
                    continue
                throttled = not session.can_write
                actions.append(Write(session.id, session.take_output()))
                session.last_write = now
                if throttled and session.can_write and session.is_open:
                    self._refill.append(session)
        if self._control:
            actions.extend(self._control)
            self._control = []
        return actions

    # ================================================================== frames
    def _handle(self, session: Session, frame: Frame) -> None:
        session.frames_in += 1
        command = frame.command
        try:
            next_state = session.next_state(command)
            result = self._handlers[command](session, frame)
        except ProtocolError as exc:
            self._fail(session, exc, frame)
            return
        if session.state is not State.CLOSED:
            session.state = next_state
        if result is not DEFERRED:
            receipt = frame.headers.get("receipt")
            if receipt is not None:
                self._send_receipt(session, receipt)

    def _send_receipt(self, session: Session, receipt: str) -> None:
        """Write a RECEIPT, or queue it behind earlier ones still waiting for an fsync."""
        if session.sync_waiting:
            generation = max(g for g, s, _ in self._sync_waiters if s is session)
            self._sync_waiters.append((generation, session, receipt))
            session.sync_waiting += 1
            return
        session.write(encode(Frame("RECEIPT", {"receipt-id": receipt}), session.version))

    def _fail(self, session: Session, exc: ProtocolError, frame: Frame | None) -> None:
        """Answer a protocol error with an ERROR frame, then close."""
        headers = {"message": exc.message}
        if frame is not None and "receipt" in frame.headers:
            headers["receipt-id"] = frame.headers["receipt"]
        body = exc.detail
        if not body and frame is not None:
            shown = "\n".join(f"{k}:{v}" for k, v in list(frame.headers.items())[:20])
            body = f"The offending frame:\n{frame.command}\n{shown}\n"
        session.write(encode(Frame("ERROR", headers, body.encode("utf-8")), session.version))
        log.warning("session %d (%s): protocol error: %s", session.id, session.peer, exc.message)
        if self.trace.enabled:
            self.trace.emit("error", session=session.id, message=exc.message)
        self._close(session, f"protocol error: {exc.message}")

    def _close(self, session: Session, reason: str, *, notify_edge: bool = True) -> None:
        """Close ``session``: return its messages, drop its subscriptions."""
        if session.state is State.CLOSED and session.id not in self.sessions:
            return
        session.state = State.CLOSED
        session.can_write = False
        self.sessions.pop(session.id, None)
        if notify_edge:
            self._control.append(Close(session.id, reason))
        for sub in list(session.subscriptions.values()):
            self._remove_subscription(session, sub)
        self._abort_transactions(session)
        for dest in self.registry.remove_temporaries(session.id):
            for sub in list(dest.subscriptions):
                self._remove_subscription(sub.session, sub)
            if isinstance(dest, Queue):
                dest.purge()
        if session in self._blocked:
            self._blocked.remove(session)
        session.parked.clear()  # never entered a destination: nothing to release
        session.held_frames.clear()
        if session.client_id is not None and self.client_ids.get(session.client_id) is session:
            del self.client_ids[session.client_id]
        log.info("connection %d closed: %s", session.id, reason)
        if self.trace.enabled:
            self.trace.emit("disconnect", session=session.id, client_id=session.client_id, reason=reason)

    # ------------------------------------------------------------------ CONNECT
    def _on_connect(self, session: Session, frame: Frame) -> Any:
        h = frame.headers
        try:
            version = negotiate_version(h.get("accept-version"))
        except ProtocolError as exc:
            headers = {"message": exc.message, "version": "1.0,1.1,1.2"}
            session.write(encode(Frame("ERROR", headers, b"Supported protocol versions are 1.0 1.1 1.2\n")))
            self._close(session, exc.message)
            return DEFERRED
        t = self.config.transport
        if version != "1.0":
            hb_text = h.get("heart-beat")
            client_hb = parse_heart_beat(hb_text) if hb_text is not None else t.default_heart_beat
            send_ms, recv_ms, hb_header = negotiate_heart_beat(client_hb)
        else:
            send_ms, recv_ms, hb_header = 0, 0, ""
        session.principal = self.security.authenticate(h.get("login"), h.get("passcode"))
        client_id = h.get("client-id")
        if client_id:
            self._claim_client_id(session, client_id)
        session.version = version
        session.parser.version = version
        session.login = h.get("login")
        session.hb_send_ms, session.hb_recv_ms = send_ms, recv_ms
        connected = {"version": version, "session": f"{self.name}-{self.boot}-{session.id}", "server": SERVER_NAME}
        if version != "1.0":
            connected["heart-beat"] = hb_header
        session.write(encode(Frame("CONNECTED", connected), version))
        now = self.clock.now()
        if send_ms:
            self.timers.call_at(now + send_ms / 1000, self._heart_beat_out, session)
        if recv_ms:
            self.timers.call_at(now + recv_ms * t.hb_grace_period_multiplier / 1000, self._heart_beat_in, session)
        log.info("session %d connected: STOMP %s client-id=%s heart-beat=%s", session.id, version, client_id, hb_header or "-")
        if self.trace.enabled:
            self.trace.emit("connect", session=session.id, client_id=client_id, version=version, peer=session.peer)
        return DEFERRED  # CONNECT has no receipt

    def _claim_client_id(self, session: Session, client_id: str) -> None:
        holder = self.client_ids.get(client_id)
        if holder is not None and holder.is_open:
            if not self.config.transport.allow_link_stealing:
                raise ProtocolError(
                    f"Broker: {self.name} - Client: {client_id} already connected from {holder.peer or 'unknown'}"
                )
            log.info("client-id %s: link stolen by connection %d from %d", client_id, session.id, holder.id)
            self._fail(holder, ProtocolError(f"client-id {client_id} was taken over by a new connection (allow_link_stealing)"), None)
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
        silent = now - session.last_read
        if silent >= limit * 0.999:
            self._fail(
                session,
                ProtocolError(f"heart-beat timeout: nothing received for {silent * 1000:.0f} ms (expected every {session.hb_recv_ms} ms)"),
                None,
            )
            return
        self.timers.call_at(session.last_read + limit, self._heart_beat_in, session)

    # ------------------------------------------------------------------ SEND
    def _on_send(self, session: Session, frame: Frame) -> Any:
        address = frame.headers.get("destination")
        if not address:
            raise ProtocolError("SEND frame has no destination header")
        if is_statistics_address(address):
            return self._answer_statistics(session, frame, address)
        destination = self.registry.resolve(session, address, "write")
        message = self._make_message(session, frame, destination.address)
        session.messages_in += 1
        txid = frame.headers.get("transaction")
        if txid is not None:
            self._transaction(session, txid).append(("send", destination, message))
            return None
        receipt = frame.headers.get("receipt")
        if session.parked or not self._has_room(destination, message):
            return self._park(session, destination, message, receipt)
        try:
            self._route(destination, message)
        except ResourceLimitError as exc:
            self._refuse_send(session, receipt, exc.message)
            return DEFERRED
        return self._after_write(session, receipt, message.store_ref is not None)

    def _after_write(self, session: Session, receipt: str | None, wrote: bool) -> Any:
        """Hold a RECEIPT until the journal is on disk, when the fsync policy says so."""
        if receipt is None or not wrote or self.store is None or self.config.store.fsync != "always":
            return None
        self._sync_waiters.append((self.store.write_generation, session, receipt))
        session.sync_waiting += 1
        return DEFERRED

    # ------------------------------------------------------------------ the store
    def recover(self) -> int:
        """Bring back what the journals hold; returns the number of messages.

        Queue messages come back store-only (nothing is read until a consumer
        needs it); durable subscriptions and their messages come back in memory.
        Delivered-but-unacknowledged messages come back flagged redelivered.
        """
        store = self.store
        if store is None:
            return 0
        states: dict[str, DurableState] = {}
        for d in store.load_durables():
            topic = self.destination(d["topic"])
            assert isinstance(topic, Topic)
            state = DurableState(d["client_id"], d["name"], d.get("selector"), bool(d.get("no_local")))
            state.selector = self._compile_selector(state.selector_text)
            topic.durables[(state.client_id, state.name)] = state
            states[durable_key(topic.address, state.client_id, state.name)] = state
        count = 0
        last_seq = 0
        orphans = 0
        for key, location, delivered, seq, priority, expires, journal in store.recover():
            ref = StoreRef(journal, location, key)
            last_seq = max(last_seq, seq)
            if key.startswith("durable:"):
                state = states.get(key)
                if state is None:
                    store.dequeue(ref)  # its subscription was removed
                    orphans += 1
                    continue
                topic = self.destinations[key[len("durable:"):].split("|", 1)[0]]
                message = self.load_message(topic, PagedRef(ref, seq, priority, delivered, expires))
                state.refs[message.seq] = ref
                if delivered:
                    state.redelivered[message.seq] = 1
                topic.hold(message)
                state.pending.append(message)
            else:
                queue = self.destination(key)
                assert isinstance(queue, Queue)
                queue.cursor.add_recovered(PagedRef(ref, seq, priority, delivered, expires))
            count += 1
        for state in states.values():
            state.pending = type(state.pending)(sorted(state.pending, key=lambda m: m.seq))
        self._next_message = max(self._next_message, last_seq + 1)
        self._set_store_usage(store.disk_usage())
        log.info("recovered %d persistent messages (%d durable subscriptions)%s", count, len(states),
                 f"; dropped {orphans} of removed durable subscriptions" if orphans else "")
        return count

    def close(self) -> None:
        """Stop: make everything written durable and close the journals."""
        if self.store is not None:
            self.store.close()

    def store_synced(self, generation: int) -> None:
        """The edge's fsync covered every write up to ``generation``: release RECEIPTs."""
        self._release_sync_waiters(generation)

    @property
    def sync_wanted(self) -> bool:
        """Are RECEIPTs waiting for an fsync?"""
        return bool(self._sync_waiters)

    def _release_sync_waiters(self, generation: int) -> None:
        waiters = self._sync_waiters
        if not waiters:
            return
        keep = []
        for gen, session, receipt in waiters:
            if gen <= generation:
                session.sync_waiting -= 1
                if session.is_open:
                    session.write(encode(Frame("RECEIPT", {"receipt-id": receipt}), session.version))
            else:
                keep.append((gen, session, receipt))
        self._sync_waiters = keep

    def _set_store_usage(self, used: int) -> None:
        usage = self.store_usage
        delta = used - usage.usage
        if delta > 0:
            usage.increase(delta)
        elif delta < 0:
            usage.decrease(-delta)
            self.space_freed()

    def _payload(self, message: Message) -> bytes:
        return encode_payload(
            message.seq, message.message_id, dict(message.headers), message.body, persistent=message.persistent,
            priority=message.priority, expires=message.expires, timestamp=message.timestamp,
        )

    def _storage_call(self, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except StorageError as exc:
            raise ResourceLimitError(str(exc)) from None

    def _admit(self, destination: Destination, message: Message) -> None:
        """Journal a persistent queue message, then hand it to the destination."""
        if message.persistent and self.store is not None and isinstance(destination, Queue):
            store = self.store
            payload = self._payload(message)
            message.store_ref = self._storage_call(lambda: store.enqueue(destination.address, payload, self._txid))
        destination.accept(message)

    def persist_durable(self, topic: Topic, state: DurableState, message: Message) -> None:
        """Journal a persistent topic message for one durable subscription."""
        if not message.persistent or self.store is None:
            return
        key = durable_key(topic.address, state.client_id, state.name)
        try:
            state.refs[message.seq] = self.store.enqueue(key, self._payload(message), self._txid)
        except StorageError as exc:
            log.error("%s: could not journal %s for durable subscription %s: %s", topic.address, message.message_id, key, exc)

    def settle_durable(self, state: DurableState, message: Message) -> None:
        ref = state.refs.pop(message.seq, None)
        if ref is not None and self.store is not None:
            self.store.dequeue(ref, self._txid)

    def durables_changed(self) -> None:
        """Durable subscriptions were created or removed: save the list."""
        if self.store is None:
            return
        subs = [
            {"topic": t.address, "client_id": s.client_id, "name": s.name, "selector": s.selector_text, "no_local": s.no_local}
            for t in self.destinations.values() if isinstance(t, Topic) for s in t.durables.values()
        ]
        self.store.save_durables(subs)

    def mark_delivered(self, message: Message) -> None:
        """A persistent message went to a client-ack consumer: note it for recovery."""
        if self.store is not None and message.store_ref is not None:
            self.store.mark_delivered(message.store_ref)

    def discard_stored(self, ref: StoreRef) -> None:
        if self.store is not None:
            self.store.dequeue(ref, self._txid)

    def load_message(self, destination: Destination, paged: PagedRef) -> Message:
        """Read a store-only message back into a ``Message`` (page-in)."""
        assert self.store is not None
        stored = self.store.read(paged.ref)
        message = Message(
            stored.seq, stored.message_id, destination.address, stored.headers, stored.body,
            persistent=True, priority=stored.priority, expires=stored.expires, timestamp=stored.timestamp,
        )
        message.store_ref = paged.ref
        if paged.redelivered:
            message.redeliveries = 1
        return message

    def _answer_statistics(self, session: Session, frame: Frame, address: str) -> Any:
        """A request to the statistics plugin: one JSON reply per item to ``reply-to``."""
        reply_to = frame.headers.get("reply-to")
        if not reply_to:
            raise ProtocolError(f"a statistics request to {address} needs a reply-to header")
        self.security.check(session.principal, "write", "queue", address[len("/queue/"):])
        replies = statistics_replies(self, address)
        if replies is None:
            raise ProtocolError(
                f"unknown statistics destination {address}: use ActiveMQ.Statistics.Broker, "
                "ActiveMQ.Statistics.Destination.<name>, ActiveMQ.Statistics.Subscription or ActiveMQ.Statistics.Connection"
            )
        target = self.registry.resolve(session, reply_to, "write")
        correlation = frame.headers.get("correlation-id")
        for i, item in enumerate(replies):
            headers = {"content-type": "application/json", "statistics-index": str(i), "statistics-total": str(len(replies))}
            if correlation is not None:
                headers["correlation-id"] = correlation
            body = json.dumps(item, sort_keys=True).encode("utf-8")
            reply = self._make_message(session, Frame("SEND", headers, body), target.address)
            target.accept(reply)
        if not replies:
            empty = {"content-type": "application/json", "statistics-index": "-1", "statistics-total": "0"}
            if correlation is not None:
                empty["correlation-id"] = correlation
            target.accept(self._make_message(session, Frame("SEND", empty, b"{}"), target.address))
        return None

    # ------------------------------------------------------------------ producer flow control
    def _has_room(self, destination: Destination, message: Message) -> bool:
        """May ``message`` enter ``destination`` now? (ActiveMQ ``Queue.send``'s checks)"""
        if not destination.policy.producer_flow_control and not destination.policy.send_fail_if_no_space:
            return True
        if message.persistent and self.store is not None and self.store_usage.is_full():
            return False
        return not destination.memory.is_full()

    def _park(self, session: Session, destination: Destination, message: Message, receipt: str | None) -> Any:
        """Block a producer: withhold its RECEIPT, or stop reading it (ActiveMQ's two ways)."""
        policy = destination.policy
        usage = destination.memory
        if message.persistent and self.store is not None and self.store_usage.is_full():
            store = self.store_usage
            text = (
                f"Persistent store is Full, {store.percent}% of {store.limit}. "
                f"Stopping producer (session {session.id}) to prevent flooding {destination.kind}://{destination.name}."
            )
        else:
            text = (
                f"Usage Manager Memory Limit reached on {destination.kind}://{destination.name}. "
                f"Memory {usage.percent}% of {usage.limit} bytes, broker {self.memory.percent}%."
            )
        if policy.send_fail_if_no_space and not policy.send_fail_if_no_space_after_timeout:
            self._refuse_send(session, receipt, text)
            return DEFERRED
        deadline = None
        if policy.send_fail_if_no_space_after_timeout:
            deadline = self.clock.now() + policy.send_fail_if_no_space_after_timeout / 1000
            self.timers.call_at(deadline, self._park_timeout, session, message)
        session.parked.append(ParkedSend(destination, message, receipt, deadline))
        if len(session.parked) == 1:
            self._blocked.append(session)
            self._warn_blocked(session, destination, text)
            if self.trace.enabled:
                self.trace.emit("flow_block", session=session.id, dest=destination.address, mem_pct=self.memory.percent,
                                dest_mem_pct=usage.percent, reason="memory")
        if receipt is None and not session.reading_paused:
            session.reading_paused = True
            self._control.append(PauseReading(session.id))
        return DEFERRED

    def _warn_blocked(self, session: Session, destination: Destination, text: str) -> None:
        interval = destination.policy.blocked_producer_warning_interval / 1000
        now = self.clock.now()
        last = self._last_block_warning.get(destination.address)
        if last is None or now - last >= interval:
            self._last_block_warning[destination.address] = now
            log.warning("%s Producer (session %d, %s) stopped to prevent flooding %s.", text, session.id, session.peer, destination.address)

    def _refuse_send(self, session: Session, receipt: str | None, text: str) -> None:
        """An ERROR for one SEND; the connection stays open, as in ActiveMQ."""
        headers = {"message": text}
        if receipt is not None:
            headers["receipt-id"] = receipt
        session.write(encode(Frame("ERROR", headers, b""), session.version))
        if self.trace.enabled:
            self.trace.emit("error", session=session.id, message=text)

    def _park_timeout(self, session: Session, message: Message) -> None:
        for i, parked in enumerate(session.parked):
            if parked.message is message:
                del session.parked[i]
                dest = parked.destination
                self._refuse_send(
                    session, parked.receipt,
                    f"Usage Manager Memory Limit Wait Timeout. Stopping producer (session {session.id}) to prevent flooding "
                    f"{dest.kind}://{dest.name} (waited {dest.policy.send_fail_if_no_space_after_timeout} ms).",
                )
                self._retry_blocked = True
                return

    def space_freed(self) -> None:
        """Memory or store space was released: blocked producers and cursors may go on."""
        if self._blocked or self._blocked_cursors:
            self._retry_blocked = True

    def _unblock_producers(self) -> None:
        """Let parked sends in, in order, while there is room."""
        for session in list(self._blocked):
            while session.parked:
                parked = session.parked[0]
                if not self._has_room(parked.destination, parked.message):
                    break
                session.parked.popleft()
                try:
                    self._route(parked.destination, parked.message)
                except ResourceLimitError as exc:
                    self._refuse_send(session, parked.receipt, exc.message)
                    continue
                if parked.receipt is not None and self._after_write(session, parked.receipt, parked.message.store_ref is not None) is None:
                    self._send_receipt(session, parked.receipt)
            if session.parked:
                continue
            self._blocked.remove(session)
            if self.trace.enabled:
                self.trace.emit("flow_unblock", session=session.id, mem_pct=self.memory.percent)
            if session.reading_paused:
                session.reading_paused = False
                self._control.append(ResumeReading(session.id))
                self._replay_held(session)

    def _replay_held(self, session: Session) -> None:
        held = session.held_frames
        while held and session.is_open and not session.reading_paused:
            self._handle(session, held.popleft())
        if not held and session.held_error is not None and session.is_open and not session.reading_paused:
            error, session.held_error = session.held_error, None
            self._fail(session, error, None)

    def _make_message(self, session: Session, frame: Frame, address: str) -> Message:
        h = frame.headers
        priority = _int_header(h, "priority", 4, 0, 9, clamp=True)
        expires = _int_header(h, "expires", 0, 0, None, clamp=False)
        persistent = h.get("persistent", "false").lower() == "true"
        timestamp = self.clock.wall_ms()
        headers = {"destination": address}
        for k, v in h.items():
            if k not in BROKER_SET_HEADERS:
                headers[k] = v
        reply_to = headers.get("reply-to")
        if reply_to is not None and reply_to.startswith(_TEMP_STARTS):
            # The owner names its temporary queue: create it, publish its remote address.
            headers["reply-to"] = self.registry.resolve(session, reply_to, "read").address
        headers["timestamp"] = str(timestamp)
        headers["expires"] = str(expires)
        headers["priority"] = str(priority)
        if persistent:
            headers["persistent"] = "true"
        else:
            headers.pop("persistent", None)
        seq = self._next_message
        self._next_message += 1
        return Message(
            seq,
            f"ID:{self.name}-{self.boot}-{seq}",
            address,
            headers,
            frame.body,
            persistent=persistent,
            priority=priority,
            expires=expires,
            timestamp=timestamp,
            origin=session.id,
        )

    def _route(self, destination: Destination, message: Message) -> None:
        if self.trace.enabled:
            self.trace.emit(
                "send", session=message.origin, dest=destination.address, msg=message.message_id,
                size=message.size, persistent=message.persistent, priority=message.priority,
            )
        self._admit(destination, message)

    def destination(self, address: str) -> Destination:
        """The queue or topic at ``address``, created on first use (no rights checked)."""
        found = self.destinations.get(address)
        if found is not None:
            return found
        kind, _, name = address.strip("/").partition("/")
        if kind not in ("queue", "topic") or not name:
            raise ProtocolError(f"unknown destination {address!r}: use /queue/NAME or /topic/NAME")
        return self.registry._create(kind, name, address)

    # ------------------------------------------------------------------ SUBSCRIBE
    def _on_subscribe(self, session: Session, frame: Frame) -> Any:
        h = frame.headers
        address = h.get("destination")
        if not address:
            raise ProtocolError("SUBSCRIBE frame has no destination header")
        sub_id = h.get("id")
        if sub_id is None:
            if session.version != "1.0":
                raise ProtocolError("SUBSCRIBE frame has no id header (required from STOMP 1.1)")
            sub_id = address
        if sub_id in session.subscriptions:
            raise ProtocolError(f"subscription id {sub_id!r} is already in use on this connection")
        ack_mode = h.get("ack", "auto")
        if ack_mode not in ACK_MODES:
            raise ProtocolError(f"unknown ack mode {ack_mode!r}: use auto, client or client-individual")
        destination = self.registry.resolve(session, address, "read")
        policy = destination.policy
        browser = h.get("browser", "false").lower() == "true"
        durable_name = h.get("activemq.subscriptionName") or None
        if browser and destination.kind != "queue":
            raise ProtocolError(f"browser:true needs a queue, not {address}")
        if durable_name is not None and destination.kind != "topic":
            raise ProtocolError(f"activemq.subscriptionName (a durable subscription) needs a topic, not {address}")
        if durable_name is not None and session.client_id is None:
            raise ProtocolError("a durable subscription (activemq.subscriptionName) needs a client-id on CONNECT")
        if browser:
            default_prefetch = policy.queue_browser_prefetch
        elif durable_name is not None:
            default_prefetch = policy.durable_topic_prefetch
        else:
            default_prefetch = policy.queue_prefetch if destination.kind == "queue" else policy.topic_prefetch
        prefetch = _int_header(h, "activemq.prefetchSize", default_prefetch, 1, _MAX_PREFETCH, clamp=False)
        priority = _int_header(h, "activemq.priority", 0, -128, 127, clamp=False)
        selector_text = h.get("selector") or None
        no_local = h.get("activemq.noLocal", "false").lower() == "true"
        sub = Subscription(
            self._next_sub,
            sub_id,
            session,
            destination,
            ack_mode="auto" if browser else ack_mode,
            prefetch=prefetch,
            selector=self._compile_selector(selector_text),
            priority=priority,
            exclusive=h.get("activemq.exclusive", "false").lower() == "true",
            no_local=no_local,
            browser=browser,
        )
        if durable_name is not None:
            assert isinstance(destination, Topic) and session.client_id is not None
            state = destination.durable_state(session.client_id, durable_name, selector_text, no_local)
            if state.active is not None:
                raise ProtocolError(f"durable subscription {durable_name!r} of client {session.client_id} is already active")
            state.selector = sub.selector
            state.active = sub
            sub.durable = state
            sub.pending = state.pending
            sub.redelivered = state.redelivered
        self._next_sub += 1
        session.subscriptions[sub_id] = sub
        self._subs_by_key[sub.key] = sub
        receipt = h.get("receipt")
        if receipt is not None:  # the RECEIPT goes before the first MESSAGE, as ActiveMQ does
            self._send_receipt(session, receipt)
        if self.trace.enabled:
            self.trace.emit("subscribe", session=session.id, sub=sub_id, dest=destination.address, ack=ack_mode, prefetch=prefetch)
        if browser:
            assert isinstance(destination, Queue)
            sub.pending.extend(destination.browse_snapshot())
        else:
            destination.add_subscription(sub)
        destination.dispatch_to(sub)
        return DEFERRED

    def _compile_selector(self, text: str | None) -> Any:
        if text is None or not text.strip():
            return None
        from .selector import SelectorError, compile_selector

        try:
            return compile_selector(text)
        except SelectorError as exc:
            raise ProtocolError(f"invalid selector: {exc}") from None

    def _on_unsubscribe(self, session: Session, frame: Frame) -> Any:
        h = frame.headers
        sub_id = h.get("id")
        durable_name = h.get("activemq.subscriptionName")
        if sub_id is None and durable_name is None:
            if session.version != "1.0" or "destination" not in h:
                raise ProtocolError("UNSUBSCRIBE frame has no id header")
            sub_id = h["destination"]
        if sub_id is not None:
            sub = session.subscriptions.get(sub_id)
            if sub is None:
                raise ProtocolError(f"no subscription with id {sub_id!r} on this connection")
            self._remove_subscription(session, sub)
        if durable_name is not None:
            self._delete_durable(session, durable_name, h.get("destination"))
        return None

    def _delete_durable(self, session: Session, name: str, address: str | None) -> None:
        if session.client_id is None:
            raise ProtocolError("removing a durable subscription needs a client-id on CONNECT")
        topics = [d for d in self.destinations.values() if isinstance(d, Topic) and (address is None or d.address == address)]
        for topic in topics:
            state = topic.durables.get((session.client_id, name))
            if state is not None and state.active is not None:
                raise ProtocolError(f"durable subscription {name!r} is in use: unsubscribe its consumer first")
        if not any(t.delete_durable(session.client_id, name) for t in topics):
            raise ProtocolError(f"no durable subscription {name!r} for client {session.client_id}")

    def _remove_subscription(self, session: Session, sub: Subscription) -> None:
        session.subscriptions.pop(sub.id, None)
        self._subs_by_key.pop(sub.key, None)
        sub.destination.remove_subscription(sub)
        if self.trace.enabled:
            self.trace.emit("unsubscribe", session=session.id, sub=sub.id, dest=sub.destination.address)

    def _resume_dispatch(self, session: Session) -> None:
        for sub in list(session.subscriptions.values()):
            if not session.can_write:
                break
            sub.destination.dispatch_to(sub)

    # ------------------------------------------------------------------ ACK / NACK
    def _on_ack(self, session: Session, frame: Frame) -> Any:
        sub, messages = self._settle(session, frame, "ACK")
        txid = frame.headers.get("transaction")
        if txid is not None:
            self._transaction(session, txid).append(("ack", sub, messages))
            return None
        if self.trace.enabled:
            for m in messages:
                self.trace.emit("ack", session=session.id, sub=sub.id, dest=sub.destination.address, msg=m.message_id)
        sub.destination.acknowledge(sub, messages)
        return None

    def _on_nack(self, session: Session, frame: Frame) -> Any:
        if session.version == "1.0":
            raise ProtocolError("NACK is not part of STOMP 1.0")
        sub, messages = self._settle(session, frame, "NACK")
        txid = frame.headers.get("transaction")
        if txid is not None:
            self._transaction(session, txid).append(("nack", sub, messages))
            return None
        self._nack(sub, messages)
        return None

    def _nack(self, sub: Subscription, messages: list[Message]) -> None:
        if self.trace.enabled:
            for m in messages:
                self.trace.emit("nack", session=sub.session.id, sub=sub.id, dest=sub.destination.address, msg=m.message_id)
        sub.destination.redeliver(sub, messages, "nack")

    def _settle(self, session: Session, frame: Frame, command: str) -> tuple[Subscription, list[Message]]:
        """Find the subscription and messages an ACK or NACK refers to."""
        h = frame.headers
        sub: Subscription | None = None
        seq: int | None = None
        ack_id = h.get("id") if session.version == "1.2" else None
        if ack_id is not None:
            key, _, seq_text = ack_id.partition("-")
            if key.isdigit() and seq_text.isdigit():
                sub = self._subs_by_key.get(int(key))
                seq = int(seq_text)
            if sub is None or sub.session is not session:
                raise ProtocolError(f"{command} for unknown ack id {ack_id!r}")
        else:
            message_id = h.get("message-id")
            if message_id is None:
                needed = "id" if session.version == "1.2" else "message-id"
                raise ProtocolError(f"{command} frame has no {needed} header")
            seq = _seq_of(message_id)
            sub_id = h.get("subscription")
            if sub_id is not None:
                sub = session.subscriptions.get(sub_id)
                if sub is None:
                    raise ProtocolError(f"{command} names unknown subscription {sub_id!r}")
            elif session.version == "1.1":
                raise ProtocolError(f"{command} frame has no subscription header (required in STOMP 1.1)")
            else:
                sub = next((s for s in session.subscriptions.values() if seq in s.dispatched), None)
            if sub is None or seq is None or seq not in sub.dispatched or sub.dispatched[seq].message_id != message_id:
                raise ProtocolError(f"{command} for message {message_id!r}, which is not awaiting acknowledgement")
        if sub.auto:
            raise ProtocolError(f"{command} on subscription {sub.id!r}, which uses ack mode auto")
        messages = sub.take_acked(seq, cumulative=sub.ack_mode == "client")
        if not messages:
            raise ProtocolError(f"{command} for a message that is not awaiting acknowledgement (ack id {ack_id or seq!r})")
        return sub, messages

    # ------------------------------------------------------------------ transactions
    def _transaction(self, session: Session, txid: str) -> list[tuple[str, Any, Any]]:
        tx = session.transactions.get(txid)
        if tx is None:
            raise ProtocolError(f"unknown transaction {txid!r}: BEGIN it first")
        return tx

    def _on_begin(self, session: Session, frame: Frame) -> Any:
        txid = frame.headers.get("transaction")
        if not txid:
            raise ProtocolError("BEGIN frame has no transaction header")
        if txid in session.transactions:
            raise ProtocolError(f"transaction {txid!r} is already in progress")
        session.transactions[txid] = []
        return None

    def _on_commit(self, session: Session, frame: Frame) -> Any:
        txid = frame.headers.get("transaction")
        if not txid:
            raise ProtocolError("COMMIT frame has no transaction header")
        ops = self._transaction(session, txid)
        del session.transactions[txid]
        store = self.store
        durable = store is not None and any(
            (op == "send" and payload.persistent) or (op == "ack" and any(m.store_ref is not None for m in payload))
            for op, _, payload in ops
        )
        if durable:
            # Every journal record of the transaction carries one storage txid
            # and takes effect at its TX_COMMIT: all of it survives a crash, or none.
            self._txid = f"{session.id}.{self._next_storage_tx}"
            self._next_storage_tx += 1
        try:
            for op, target, payload in ops:
                if op == "send":
                    self._route(target, payload)
                elif op == "ack":
                    target.destination.acknowledge(target, payload)
                else:
                    self._nack(target, payload)
            if durable:
                assert store is not None and self._txid is not None
                txid_done = self._txid
                self._storage_call(lambda: store.commit(txid_done))
        except ResourceLimitError as exc:
            if durable and store is not None and self._txid is not None:
                store.abort(self._txid)
            self._txid = None
            self._refuse_send(session, frame.headers.get("receipt"), f"COMMIT of {txid!r} failed: {exc.message}")
            return DEFERRED
        finally:
            self._txid = None
        return self._after_write(session, frame.headers.get("receipt"), durable)

    def _on_abort(self, session: Session, frame: Frame) -> Any:
        txid = frame.headers.get("transaction")
        if not txid:
            raise ProtocolError("ABORT frame has no transaction header")
        ops = self._transaction(session, txid)
        del session.transactions[txid]
        self._roll_back(ops)
        return None

    def _roll_back(self, ops: list[tuple[str, Any, Any]]) -> None:
        """Undo a transaction: sends vanish, acked messages become deliverable again."""
        for op, target, payload in ops:
            if op in ("ack", "nack"):
                target.destination.redeliver(target, payload, "rollback")

    def _abort_transactions(self, session: Session) -> None:
        for ops in session.transactions.values():
            self._roll_back(ops)
        session.transactions.clear()

    # ------------------------------------------------------------------ DISCONNECT
    def _on_disconnect(self, session: Session, frame: Frame) -> Any:
        receipt = frame.headers.get("receipt")
        if receipt is not None:
            self._send_receipt(session, receipt)
        self._close(session, "client disconnected")
        return DEFERRED

    # ================================================================== hooks
    def message_consumed(self, destination: Destination, message: Message) -> None:
        """``message`` left ``destination`` for good (acknowledged or dropped)."""
        destination.release(message)
        if message.store_ref is not None and isinstance(destination, Queue) and self.store is not None:
            self.store.dequeue(message.store_ref, self._txid)
            message.store_ref = None

    def message_enqueued(self, queue: Queue, message: Message, cached: bool) -> None:
        """``message`` entered ``queue``: cached in memory, or store-only."""
        if self.trace.enabled:
            self.trace.emit("enqueue", dest=queue.address, msg=message.message_id, size=message.size, cached=cached,
                            persistent=message.persistent, dest_mem_pct=queue.memory.percent, mem_pct=self.memory.percent)

    def page_in_blocked(self, queue: Queue) -> None:
        """``queue``'s cursor refused to page in: remember to try again when space frees."""
        self._blocked_cursors.add(queue)
        if self.trace.enabled:
            self.trace.emit("page_in_blocked", dest=queue.address, store_only=len(queue.cursor.store_only),
                            dest_mem_pct=queue.memory.percent, mem_pct=self.memory.percent)
        for finding in self.diagnose():
            if finding["destination"] == queue.address:
                log.warning("DIAGNOSIS %s: %s; cure: %s", finding["pathology"], finding["summary"], finding["cure"])

    def paged_in(self, queue: Queue, count: int) -> None:
        if self.trace.enabled:
            self.trace.emit("page_in", dest=queue.address, count=count, dest_mem_pct=queue.memory.percent,
                            mem_pct=self.memory.percent)

    def message_expired(self, destination: Destination, message: Message) -> None:
        """``message`` expired before it could be delivered."""
        if self.trace.enabled:
            self.trace.emit("expire", dest=destination.address, msg=message.message_id)
        if destination.policy.process_expired:
            self.dead_letter(destination, message, "expired")
        else:
            self.message_consumed(destination, message)

    def dead_letter(self, destination: Destination, message: Message, cause: str) -> None:
        """Move ``message`` from ``destination`` to its dead letter queue.

        As ActiveMQ's dead letter strategies: a shared ``ActiveMQ.DLQ`` or an
        individual ``ActiveMQ.DLQ.Queue.<name>``; non-persistent messages are
        dropped unless ``process_non_persistent``; nothing leaves a DLQ for
        another DLQ.
        """
        policy = destination.policy
        self.message_consumed(destination, message)
        if destination.is_dlq or policy.dead_letter_strategy == "discard" or not (message.persistent or policy.process_non_persistent):
            log.info("%s: %s dropped (%s), not dead-lettered", destination.address, message.message_id, cause)
            if self.trace.enabled:
                self.trace.emit("dlq", dest=destination.address, msg=message.message_id, cause=cause, dropped=True)
            return
        if policy.dead_letter_strategy == "shared":
            dlq_name = policy.dead_letter_queue
        else:
            dlq_name = f"ActiveMQ.DLQ.{destination.kind.capitalize()}.{destination.name}"
        dlq = self.registry.system_queue(dlq_name)
        assert isinstance(dlq, Queue)
        headers = dict(message.headers)
        headers["destination"] = dlq.address
        headers["original-destination"] = destination.address
        headers["dlqDeliveryFailureCause"] = cause
        copy = Message(
            message.seq, message.message_id, dlq.address, headers, message.body,
            persistent=message.persistent, priority=message.priority, expires=0,
            timestamp=message.timestamp, origin=message.origin,
        )
        log.info("%s: %s dead-lettered to %s (%s)", destination.address, message.message_id, dlq.address, cause)
        if self.trace.enabled:
            self.trace.emit("dlq", dest=destination.address, msg=message.message_id, cause=cause, dlq=dlq.address, dropped=False)
        try:
            self._admit(dlq, copy)
        except ResourceLimitError as exc:
            log.error("%s: could not journal %s in %s: %s", destination.address, message.message_id, dlq.address, exc.message)
            dlq.accept(copy)

    def destination_created(self, destination: Destination) -> None:
        """A destination came into being (on first use)."""
        dlq_names = {p.dead_letter_queue for p in self.config.destination_policy} | {"ActiveMQ.DLQ"}
        destination.is_dlq = destination.kind == "queue" and (
            destination.name in dlq_names or destination.name.startswith("ActiveMQ.DLQ.")
        )
        log.debug("created %s", destination.address)

    def end_of_browse(self, sub: Subscription) -> None:
        """Tell a queue browser that it has seen everything (ActiveMQ's ``browser:end``)."""
        headers = {
            "subscription": sub.id,
            "message-id": f"ID:{self.name}-{self.boot}-browse-{sub.key}",
            "destination": sub.destination.address,
            "browser": "end",
        }
        sub.session.write(encode(Frame("MESSAGE", headers, b""), sub.session.version))

    def max_page_size(self, destination: Destination) -> int:
        """How many undeliverable messages a dispatch pass may step over."""
        return destination.policy.max_page_size

    # ================================================================== statistics
    def diagnose(self) -> list[dict[str, Any]]:
        """Known pathologies visible right now (see ``diagnosis.py``)."""
        from .diagnosis import diagnose

        return diagnose(self)


def _int_header(
    headers: Any, name: str, default: int, low: int, high: int | None, *, clamp: bool
) -> int:
    text = headers.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ProtocolError(f"header {name} must be an integer, not {text!r}") from None
    if clamp:
        value = max(low, value if high is None else min(high, value))
    elif value < low or (high is not None and value > high):
        bounds = f"from {low} to {high}" if high is not None else f"of {low} or more"
        raise ProtocolError(f"header {name} must be an integer {bounds}, not {text!r}")
    return value


def _seq_of(message_id: str) -> int | None:
    """The broker sequence number at the end of one of our message ids."""
    tail = message_id.rpartition("-")[2]
    return int(tail) if tail.isdigit() else None
