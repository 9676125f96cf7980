"""Frame handlers of the broker core: SEND, SUBSCRIBE, ACK, transactions.

A part the ``Broker`` holds (``broker.handlers``; see ``broker.py`` for the event
protocol), given the core's context and its sibling parts when it is made. Each
``_on_<command>`` takes the session and the frame, may raise
``ProtocolError`` (an ERROR frame, then close), and returns ``DEFERRED`` when
it sends the RECEIPT itself (or later: flow control, an fsync).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from minibroker.connection.session import Session
from minibroker.core.common import DEFERRED, Ignored
from minibroker.core.tools import ToolRequests
from minibroker.core.transactions import Transactions
from minibroker.destinations import TEMP_PREFIXES
from minibroker.destinations.destination import Destination
from minibroker.destinations.queue import Queue
from minibroker.destinations.topic import Topic
from minibroker.digits import parse_decimal
from minibroker.errors import NoSpaceError, ProtocolError, ResourceLimitError
from minibroker.frames import Frame, ParsedHeaders
from minibroker.ops import STATISTICS_PREFIX
from minibroker.ops.stats import is_statistics_address
from minibroker.protocol import (
    BROKER_SET_HEADERS,
    MESSAGE_OVERHEAD,
    QUEUE_SUBSCRIBE_HONOURED,
    RABBITMQ_CLIENT_ID,
    SUBSCRIBE_HONOURED,
)
from minibroker.protocol.dialects import Unhonoured, rabbitmq_durable, rabbitmq_prefetch
from minibroker.protocol.headers import int_header, seq_of, shown
from minibroker.protocol.message import Message, send_block

if TYPE_CHECKING:
    from minibroker.core.context import CoreContext
    from minibroker.core.flow import ProducerFlowControl
    from minibroker.core.reading import ReadingControl
    from minibroker.core.routing import Router
    from minibroker.core.storehooks import StoreHooks
    from minibroker.core.tools import ToolHost
from minibroker.destinations import ACK_MODES
from minibroker.destinations.subscription import Subscription
from minibroker.ops import ADMIN_PREFIX
from minibroker.ops.admin import is_admin_address
from minibroker.protocol.codec import escape

__all__ = ["FrameHandlers"]

_MAX_PREFETCH = 32767
#: The latest expiry a message may carry: ms since the epoch in a signed 64-bit number,
#: as the journal keeps it (and as JMS's long).
MAX_EXPIRES = 2**63 - 1
_TEMP_STARTS = tuple(TEMP_PREFIXES)
#: What statistics and admin requests' addresses start with: one test of a SEND's address for both.
_TOOL_PREFIX = "/queue/ActiveMQ."
assert STATISTICS_PREFIX.startswith(_TOOL_PREFIX) and ADMIN_PREFIX.startswith(_TOOL_PREFIX)


class FrameHandlers:
    """SEND, SUBSCRIBE, UNSUBSCRIBE, ACK, NACK, BEGIN, COMMIT, ABORT, DISCONNECT:
    one method per command, a part the broker holds (``broker.handlers``).

    Its own state: the message and subscription sequence numbers, the subscriptions
    by key and when each last logged a full cursor. The broker calls the
    ``_on_*`` methods by the frame's command (``Broker._run_handler``)."""

    def __init__(
        self,
        context: CoreContext,
        *,
        tools_host: ToolHost,
        storehooks: StoreHooks,
        flow: ProducerFlowControl,
        router: Router,
        reading: ReadingControl,
        close: Callable[..., None],
    ) -> None:
        """The sibling parts it calls: ``storehooks`` (RECEIPTs, durable subscriptions),
        ``flow`` (it parks the SENDs it has no room for), ``router`` (a message to its
        destination), ``reading`` (a socket paused while the store is slow);
        ``close`` ends a connection (``Broker._close``); ``tools_host`` is the broker as
        statistics and admin requests read it (``tools.py``)."""
        self.context = context
        # The handlers read the clock, the trace, the store and the registry for every
        # frame. Every SEND asks ``flow.has_room`` (a method of a compiled class: called
        # through its part, it is a direct call in the compiled build), and a persistent
        # or traced one takes ``route`` (bound once).
        self.flow = flow
        self._route = route = router.route
        self.clock = context.clock
        self.trace = trace = context.trace
        self._emit = trace.event
        self.store = context.store
        #: ``store.store_latency``: read for every ACK (the configuration never changes).
        self.store_latency = context.config.store.store_latency
        self.registry = context.registry
        self.storehooks = storehooks
        self._send_receipt = storehooks.send_receipt
        self.durables_changed = storehooks.durables_changed
        self._close = close
        self._start_reading = reading.start
        self._stop_reading = reading.stop
        #: Subscriptions by key (ack ids name them): the destination hooks read it too.
        self.subs_by_key: dict[int, Subscription] = {}
        #: subscription key -> when its "cursor is full" line was last logged (``hooks.py``).
        self.full_logged: dict[int, float] = {}
        #: What message ids start with: the broker's name and this run's token.
        self._id_prefix = f"ID:{context.name}-{context.boot}-"
        self._id_prefix_wire = escape(self._id_prefix, "1.2").encode("utf-8")
        #: The broker's message sequence numbers (``Message.seq``), the next one to give.
        self.next_message = 1
        #: The next subscription key (``Subscription.key``, in ack ids).
        self.next_sub = 1
        #: BEGIN, COMMIT, ABORT (``transactions.py``).
        self.transactions = Transactions(context, storehooks, flow, route, self._nack)
        #: Statistics and admin requests (``tools.py``).
        self.tools = ToolRequests(context, tools_host, self._make_message)
        #: Names the headers of other dialects that frames carry and the broker ignores.
        self.unhonoured = Unhonoured()

    def _on_send(self, session: Session, frame: Frame) -> Any:
        h = frame.headers
        address = h.get("destination")
        if not address:
            raise ProtocolError("SEND frame has no destination header")
        if address.startswith(_TOOL_PREFIX):
            if is_statistics_address(address):
                return self.tools.answer_statistics(session, frame, address)
            if is_admin_address(address):
                return self.tools.answer_admin(session, frame, address)
        destination = self.registry.resolve(session, address, "write")
        message = self._make_message(session, frame, destination.address)
        if message.persistent and self.store is not None:
            self._check_fits_journal(message)
        session.messages_in += 1
        if "transaction" in h:
            self.transactions.open(session, h["transaction"]).append(("send", destination, message))
            return None
        receipt = h.get("receipt")
        if session.producing.parked or not self.flow.has_room(destination, message):
            return self.flow.park(session, destination, message, receipt)
        try:
            if message.persistent or self.trace.enabled:
                remaining = self._route(destination, message)
            else:  # what _route and admit come down to for it: nothing to journal, nothing to trace
                remaining = destination.accept(message)
        except NoSpaceError as exc:  # a full disk: as a full store, wait (flow control) or refuse
            policy = destination.policy
            if isinstance(destination, Queue) and (policy.producer_flow_control or policy.send_fail_if_no_space):
                return self.flow.park(
                    session, destination, message, receipt
                )  # (a topic may have delivered it: no retry)
            self.flow.refuse_send(session, receipt, exc.message)
            return DEFERRED
        except ResourceLimitError as exc:
            self.flow.refuse_send(session, receipt, exc.message)
            return DEFERRED
        if remaining is not None:  # a topic subscription is full: the producer waits there
            return self.flow.park(session, destination, message, receipt, resume=remaining)
        return None  # (a RECEIPT waits for the fsync of what was written: storehooks.receipt)

    def _check_fits_journal(self, message: Message) -> None:
        """Refuse a persistent message too large for one journal file, before it goes anywhere.

        Its record holds the body and headers (``size`` less the memory charge's fixed
        part, which is more than the record's own framing and the destination's key)."""
        assert self.store is not None
        limit, option = self.store.file_limit
        if message.size + len(message.destination) > limit:
            raise ProtocolError(
                f"a persistent message of {message.size - MESSAGE_OVERHEAD} bytes (body and headers) does not fit "
                f"in one journal file of {limit} bytes ({option}): send it non-persistent, or raise {option}"
            )

    def _make_message(self, session: Session, frame: Frame, address: str) -> Message:
        h = frame.headers
        # The common frame names none of these: skip the parsing when absent.
        priority = 4 if "priority" not in h else int_header(h, "priority", 4, 0, 9, clamp=True)
        expires = 0 if "expires" not in h else int_header(h, "expires", 0, 0, MAX_EXPIRES, clamp=False)
        persistent_text = h.get("persistent")
        persistent = persistent_text is not None and persistent_text.lower() == "true"
        timestamp = self.clock.wall_ms()
        seq = self.next_message
        if isinstance(h, ParsedHeaders) and h.head is not None and session.version != "1.0":
            passed = send_block(h.head, h, address, timestamp, expires, priority, h.lines)
            if passed is not None:  # the SEND's lines go out as they came (message.send_block)
                self.next_message += 1
                # By position (see Message.__init__): persistent, priority, expires, timestamp,
                # origin, message_id_wire, wire_headers, header_chars. The message-id is made
                # from its wire form if something asks for it (a MESSAGE to a 1.2 consumer does not).
                return Message(
                    seq,
                    None,
                    address,
                    None,
                    frame.body,
                    persistent,
                    priority,
                    expires,
                    timestamp,
                    session.id,
                    b"%b%d" % (self._id_prefix_wire, seq),
                    passed[0],
                    passed[1],
                )
        headers = {"destination": address}
        headers.update({k: v for k, v in h.items() if k not in BROKER_SET_HEADERS})
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
        self.next_message += 1
        # By position (see Message.__init__): persistent, priority, expires, timestamp, origin, message_id_wire.
        return Message(
            seq,
            f"{self._id_prefix}{seq}",
            address,
            headers,
            frame.body,
            persistent,
            priority,
            expires,
            timestamp,
            session.id,
            self._id_prefix_wire + str(seq).encode(),
        )

    def destination(self, address: str) -> Destination:
        """The queue or topic at ``address``, created on first use (no rights checked)."""
        found = self.context.destinations.get(address)
        if found is not None:
            return found
        kind, _, name = address.strip("/").partition("/")
        if kind not in ("queue", "topic") or not name:
            raise ProtocolError(f"unknown destination {address!r}: use /queue/NAME or /topic/NAME")
        return self.registry._create(kind, name, address)

    def _on_subscribe(self, session: Session, frame: Frame) -> Any:
        h = frame.headers
        mark = self.storehooks.write_mark() if "receipt" in h else None
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
        is_topic = destination.kind == "topic"
        if not h.keys() <= SUBSCRIBE_HONOURED or (not is_topic and not h.keys() <= QUEUE_SUBSCRIBE_HONOURED):
            self.unhonoured.check("SUBSCRIBE", h, SUBSCRIBE_HONOURED if is_topic else QUEUE_SUBSCRIBE_HONOURED)
        browser = h.get("browser", "false").lower() == "true"
        durable_name = h.get("activemq.subscriptionName") or None
        client_id = session.client_id
        auto_delete = False
        if durable_name is None and is_topic and ("durable" in h or "persistent" in h):
            durable, auto_delete = rabbitmq_durable(h)  # RabbitMQ's: named by its id, shared by its consumers
            if durable:
                if h.get("id") is None:
                    raise ProtocolError("Header 'id' is required for durable subscriptions (durable:true names it)")
                durable_name, client_id = sub_id, RABBITMQ_CLIENT_ID
        if browser and destination.kind != "queue":
            raise ProtocolError(f"browser:true needs a queue, not {address}")
        if durable_name is not None and destination.kind != "topic":
            raise ProtocolError(f"activemq.subscriptionName (a durable subscription) needs a topic, not {address}")
        if durable_name is not None and client_id is None:
            raise ProtocolError("a durable subscription (activemq.subscriptionName) needs a client-id on CONNECT")
        if browser:
            default_prefetch = policy.queue_browser_prefetch
        elif durable_name is not None:
            default_prefetch = policy.durable_topic_prefetch
        else:
            default_prefetch = policy.queue_prefetch if destination.kind == "queue" else policy.topic_prefetch
        if "prefetch-count" in h and "activemq.prefetchSize" not in h:  # RabbitMQ's name for it
            prefetch = rabbitmq_prefetch(h["prefetch-count"])
        else:
            prefetch = int_header(h, "activemq.prefetchSize", default_prefetch, 1, _MAX_PREFETCH, clamp=False)
        priority = int_header(h, "activemq.priority", 0, -128, 127, clamp=False)
        selector_text = h.get("selector") or None
        no_local = h.get("activemq.noLocal", "false").lower() == "true"
        sub = Subscription(
            self.next_sub,
            sub_id,
            session,
            destination,
            ack_mode="auto" if browser else ack_mode,
            prefetch=prefetch,
            selector=self.compile_selector(selector_text),
            priority=priority,
            exclusive=h.get("activemq.exclusive", "false").lower() == "true",
            no_local=no_local,
            browser=browser,
        )
        if durable_name is not None:
            assert isinstance(destination, Topic) and client_id is not None
            existing = destination.durables.get((client_id, durable_name))
            if existing is not None:
                self._check_durable_owner(session, existing)
            owner = self._durable_owner(session)
            state = destination.durable_state(client_id, durable_name, selector_text, no_local, owner)
            if state.owner is None and owner is not None:  # made before users were configured: claimed now
                state.owner = owner
                self.durables_changed()
            state.selector = sub.selector
            if state.active is None:
                state.active = sub
                state.offline_since = None
            elif client_id == RABBITMQ_CLIENT_ID:  # one more consumer of its messages
                destination.add_sharer(state, sub)
            else:
                raise ProtocolError(f"durable subscription {durable_name!r} of client {client_id} is already active")
            if state.auto_delete != auto_delete:
                state.auto_delete = auto_delete
                self.durables_changed()
            sub.durable = state
            sub.pending = state.pending
            sub.redelivered = state.redelivered
        self.next_sub += 1
        session.subscriptions[sub_id] = sub
        self.subs_by_key[sub.key] = sub
        receipt = h.get("receipt")
        if receipt is not None:
            # The RECEIPT goes before the first MESSAGE, as ActiveMQ does, unless the journal
            # was written (a durable subscription replaced: its messages' dequeues): then
            # it waits for their fsync (storehooks.receipt).
            self.storehooks.receipt(session, receipt, mark)
        if self.trace.enabled:
            self._emit(
                "subscribe",
                session=session.tag,
                sub=sub_id,
                dest=destination.address,
                ack=ack_mode,
                prefetch=prefetch,
                selector=selector_text,
                durable=durable_name,
                exclusive=sub.exclusive or None,
            )
        if browser:
            assert isinstance(destination, Queue)
            sub.pending.extend(destination.browse_snapshot())
        elif sub.durable is None or sub.durable.active is sub:  # (a sharer is its state's)
            destination.add_subscription(sub)
        destination.dispatch_to(sub)
        return DEFERRED

    def compile_selector(self, text: str | None) -> Any:
        if text is None or not text.strip():
            return None
        from minibroker.selector import SelectorError, compile_selector

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
            self.remove_subscription(session, sub)
            durable = sub.durable
            if durable is not None and durable.client_id == RABBITMQ_CLIENT_ID and rabbitmq_durable(h)[0]:
                # RabbitMQ's: UNSUBSCRIBE with durable:true removes the subscription (once its last consumer
                # left; an auto-delete one went with it)
                topic = sub.destination
                assert isinstance(topic, Topic)
                name = durable.name
                if topic.durables.get((RABBITMQ_CLIENT_ID, name)) is durable:
                    self._delete_durable(session, name, topic.address, RABBITMQ_CLIENT_ID)
        if durable_name is not None:
            self._delete_durable(session, durable_name, h.get("destination"))
        return None

    def _delete_durable(self, session: Session, name: str, address: str | None, client_id: str | None = None) -> None:
        """Remove durable subscription ``name`` of ``client_id`` (the connection's, unless given)."""
        client_id = client_id or session.client_id
        if client_id is None:
            raise ProtocolError("removing a durable subscription needs a client-id on CONNECT")
        topics = [
            d
            for d in self.context.destinations.values()
            if isinstance(d, Topic) and (address is None or d.address == address)
        ]
        for topic in topics:
            state = topic.durables.get((client_id, name))
            if state is not None:
                self._check_durable_owner(session, state)
            if state is not None and state.active is not None:
                raise ProtocolError(f"durable subscription {name!r} is in use: unsubscribe its consumer first")
        if not any(t.delete_durable(client_id, name) for t in topics):
            raise ProtocolError(f"no durable subscription {name!r} for client {client_id}")

    def _durable_owner(self, session: Session) -> str | None:
        """Who a durable subscription made by ``session`` belongs to (None with no users configured)."""
        return session.principal.name if self.context.security.enabled else None

    def _check_durable_owner(self, session: Session, state: Any) -> None:
        """Only the user who made a durable subscription may consume from it or remove it;
        the client-id alone proves nothing (any connection may claim a free one)."""
        owner = state.owner
        if owner is not None and self.context.security.enabled and owner != session.principal.name:
            raise ProtocolError(
                f"durable subscription {state.name!r} of client {state.client_id} belongs to another user "
                f"(User {session.principal.name} may not use it)"
            )

    def remove_subscription(self, session: Session, sub: Subscription) -> None:
        session.subscriptions.pop(sub.id, None)
        self.subs_by_key.pop(sub.key, None)
        self.full_logged.pop(sub.key, None)
        sub.destination.remove_subscription(sub)
        state = sub.durable
        if state is not None and state.auto_delete and state.active is None:  # RabbitMQ's auto-delete
            assert isinstance(sub.destination, Topic)
            sub.destination.delete_durable(state.client_id, state.name)
        if self.trace.enabled:
            self._emit(
                "unsubscribe",
                session=session.tag,
                sub=sub.id,
                dest=sub.destination.address,
                reason="client" if session.is_open else "disconnect",
            )

    def resume_dispatch(self, session: Session) -> None:
        for sub in list(session.subscriptions.values()):
            if not session.writing.can_write:
                break
            sub.destination.dispatch_to(sub)

    def _on_ack(self, session: Session, frame: Frame) -> Any:
        try:
            sub, messages = self._settle(session, frame, "ACK")
        except Ignored:
            return None
        txid = frame.headers.get("transaction")
        if txid is not None:
            self.transactions.open(session, txid).append(("ack", sub, messages))
            return None
        if self.trace.enabled:
            for m in messages:
                self._emit(
                    "ack",
                    session=session.tag,
                    sub=sub.id,
                    dest=sub.destination.address,
                    msg=m.message_id,
                    mode=sub.ack_mode,
                )
        latency = self.store_latency
        if latency and any(m.store_ref is not None for m in messages):
            # A slow store (the stalled socket's KahaDB): finding and removing the acked message
            # costs time for every message in flight, and meanwhile the broker does not
            # read this connection: its ACKs back up in the TCP buffers.
            self._store_busy(session, latency * (len(sub.dispatched) + len(messages)) / 1000)
        sub.destination.acknowledge(sub, messages)
        return None

    def _store_busy(self, session: Session, seconds: float) -> None:
        """The store keeps the broker busy with ``session`` for ``seconds`` more."""
        now = self.clock.now()
        reading = session.reading
        reading.busy_until = max(now, reading.busy_until) + seconds
        self._stop_reading(session, "store")
        self.context.timers.call_at(reading.busy_until, self._store_done, session)

    def _store_done(self, session: Session) -> None:
        if session.is_open and self.clock.now() >= session.reading.busy_until - 1e-9:
            self._start_reading(session, "store")

    def _on_nack(self, session: Session, frame: Frame) -> Any:
        if session.version == "1.0":
            raise ProtocolError("NACK is not part of STOMP 1.0")
        try:
            sub, messages = self._settle(session, frame, "NACK")
        except Ignored:
            return None
        h = frame.headers
        # RabbitMQ's requeue:false: not redelivered, but dropped or dead-lettered (a "reject")
        op = "reject" if "requeue" in h and h["requeue"].lower() == "false" else "nack"
        txid = h.get("transaction")
        if txid is not None:
            self.transactions.open(session, txid).append((op, sub, messages))
            return None
        self._nack(sub, messages, op)
        return None

    def _nack(self, sub: Subscription, messages: list[Message], cause: str = "nack") -> None:
        """Deliver ``messages`` again (``cause`` "nack"), or drop or dead-letter them ("reject")."""
        if self.trace.enabled:
            for m in messages:
                self._emit("nack", session=sub.session.tag, sub=sub.id, dest=sub.destination.address, msg=m.message_id)
        sub.destination.redeliver(sub, messages, cause)

    def _settle(self, session: Session, frame: Frame, command: str) -> tuple[Subscription, list[Message]]:
        """Find the subscription and messages an ACK or NACK refers to."""
        h = frame.headers
        sub: Subscription | None = None
        seq: int | None = None
        ack_id = h.get("id") if session.version == "1.2" else None
        if ack_id is None and session.version == "1.2":
            # 1.2 names the message by the MESSAGE's ``ack`` header alone (ActiveMQ refuses
            # a 1.2 ACK without it too): say so, not that some other header matched nothing.
            raise ProtocolError(f"{command} frame has no id header (STOMP 1.2 acknowledges the MESSAGE's ack header)")
        if ack_id is not None:
            key_text, _, seq_text = ack_id.partition("-")
            try:
                key, seq = parse_decimal(key_text), parse_decimal(seq_text)
            except ValueError:
                raise ProtocolError(
                    f"{command} for unknown ack id {shown(ack_id)}: an ack id is two numbers "
                    "in ASCII digits, as the MESSAGE's ack header gave it"
                ) from None
            sub = self.subs_by_key.get(key)
            if sub is None and key in session.aborted:
                raise Ignored()  # the broker aborted that subscription: the client could not know
            if sub is None or sub.session is not session:
                raise ProtocolError(f"{command} for unknown ack id {shown(ack_id)}")
        else:
            message_id = h.get("message-id")
            if message_id is None:
                raise ProtocolError(f"{command} frame has no message-id header")
            seq = seq_of(message_id)
            sub_id = h.get("subscription")
            if sub_id is not None:
                sub = session.subscriptions.get(sub_id)
                if sub is None and sub_id in session.aborted.values():
                    raise Ignored()
                if sub is None:
                    raise ProtocolError(f"{command} names unknown subscription {sub_id!r}")
            elif session.version == "1.1":
                raise ProtocolError(f"{command} frame has no subscription header (required in STOMP 1.1)")
            else:
                sub = next(
                    (
                        s
                        for s in session.subscriptions.values()
                        if seq in s.dispatched and s.dispatched[seq].message_id == message_id
                    ),
                    None,
                ) or next(
                    (
                        s
                        for s in session.subscriptions.values()
                        if any(m.message_id == message_id for m in s.dispatched.values())
                    ),
                    None,
                )
            if sub is not None and (
                seq is None or seq not in sub.dispatched or sub.dispatched[seq].message_id != message_id
            ):
                # Not one of this run's ids (a message recovered after a restart): look it up.
                seq = next((s for s, m in sub.dispatched.items() if m.message_id == message_id), None)
            if sub is None or seq is None:
                raise ProtocolError(f"{command} for message {message_id!r}, which is not awaiting acknowledgement")
        if sub.auto:
            raise ProtocolError(f"{command} on subscription {sub.id!r}, which uses ack mode auto")
        messages = sub.take_acked(seq, sub.ack_mode == "client")  # (cumulative in client mode)
        if not messages:
            raise ProtocolError(
                f"{command} for a message that is not awaiting acknowledgement (ack id {ack_id or seq!r})"
            )
        return sub, messages

    def _on_disconnect(self, session: Session, frame: Frame) -> Any:
        receipt = frame.headers.get("receipt")
        if receipt is not None:
            self._send_receipt(session, receipt)
        self._close(session, "client disconnected")
        return DEFERRED
