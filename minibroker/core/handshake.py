"""Connecting: CONNECT, the login check, the client-id, heart-beats.

A part the ``Broker`` holds (``broker.handshake``). What a connection goes through:

1. ``on_connect``: the version and heart-beats are negotiated; without
   security the CONNECT is accepted at once (``CONNECTED``).
2. With security, the password hash runs off the event loop (``CheckLogin``)
   and the connection is not read meanwhile; ``login_checked`` accepts it, or
   refuses it (repeated failures from one address are refused later and later:
   ``logins.LoginFailures``).
3. Accepted: its client-id is claimed (or stolen, with ``allow_link_stealing``),
   and the heart-beat timers start (``_heart_beat_out``, ``_heart_beat_in``).

``check_connect_timeout`` closes a connection that sent no CONNECT in time.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from minibroker.connection.logins import LoginFailures, host_of
from minibroker.connection.security import ANONYMOUS, Principal
from minibroker.connection.session import Session, State, negotiate_heart_beat, negotiate_version, parse_heart_beat
from minibroker.core.actions import Action, CheckLogin
from minibroker.core.common import DEFERRED, log
from minibroker.core.reading import ReadingControl
from minibroker.errors import ProtocolError
from minibroker.frames import Frame
from minibroker.protocol.codec import encode
from minibroker.protocol.headers import header_text

if TYPE_CHECKING:
    from minibroker.core.context import CoreContext

__all__ = ["Handshake", "SERVER_NAME"]

SERVER_NAME = "minibroker/0.1.0"


class Handshake:
    """CONNECT, its login check, the client-ids taken, and heart-beats."""

    def __init__(
        self,
        context: CoreContext,
        *,
        client_ids: dict[str, Session],
        control: list[Action],
        reading: ReadingControl,
        fail: Callable[[Session, ProtocolError, Frame | None], None],
        close: Callable[..., None],
        read_on: Callable[[Session, bytes], None],
    ) -> None:
        """``client_ids`` are the broker's (shared with the teardown); ``control`` is its
        list of control actions for the edge; ``reading`` pauses a connection while its
        login is checked; ``fail`` answers a protocol error and closes, ``close`` closes,
        ``read_on`` handles what the parser still holds."""
        self.context = context
        self._emit = context.trace.event
        self.client_ids = client_ids
        self._control = control
        self.reading = reading
        self._fail = fail
        self._close = close
        self._read_on = read_on
        t = context.config.transport
        #: Failed logins by address (delays the refusals of a guesser).
        self.login_failures = LoginFailures(t.login_failures_before_delay, t.login_failure_delay / 1000)

    def on_connect(self, session: Session, frame: Frame) -> Any:
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
            client_hb = (
                parse_heart_beat(hb_text) if hb_text is not None else self.context.config.transport.default_heart_beat
            )
            negotiated = negotiate_heart_beat(client_hb)
        else:
            negotiated = (0, 0, "")
        session.pending_connect = (frame, version, negotiated)
        if not self.context.security.enabled:
            self._complete_connect(session, ANONYMOUS)
            return DEFERRED
        # The password hash is slow on purpose: the edge runs it in a thread, and
        # nothing more is read from this connection until it is back (login_checked).
        session.set_state(State.AUTHENTICATING)
        self.reading.stop(session, "login")
        self._control.append(
            CheckLogin(session.id, partial(self.context.security.check_login, h.get("login"), h.get("passcode")))
        )
        return DEFERRED  # CONNECT has no receipt

    def login_checked(self, sid: int, principal: Principal | None) -> None:
        """The password check of ``sid``'s CONNECT is done: ``principal`` if it passed, None if not."""
        session = self.context.sessions.get(sid)
        if session is None or session.state is not State.AUTHENTICATING:
            return
        frame = session.pending_connect[0]
        address = host_of(session.peer)
        if principal is None:
            login = frame.headers.get("login") or ""
            refusal = ProtocolError(f"User name [{login}] or password is invalid.")
            # Without a login nothing was guessed (a page asking who it should be): told at once.
            delay = self.login_failures.failed(address, self.context.clock.now()) if login else 0.0
            if delay:
                log.warning(
                    "connection %d: failed login for %r from %s (%d in a row): refused in %.1f s",
                    sid,
                    login,
                    address,
                    self.login_failures.count(address),
                    delay,
                )
                self.context.timers.call_at(self.context.clock.now() + delay, self._refuse_login, session, refusal)
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
        now = self.context.clock.now()
        if send_ms:
            self.context.timers.call_at(now + send_ms / 1000, self._heart_beat_out, session)
        if recv_ms:
            multiplier = self.context.config.transport.hb_grace_period_multiplier
            self.context.timers.call_at(now + recv_ms * multiplier / 1000, self._heart_beat_in, session)
        log.info(
            "session %d connected: STOMP %s client-id=%s heart-beat=%s",
            session.id,
            version,
            client_id,
            hb_header or "-",
        )
        if self.context.trace.enabled:
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
            if not self.context.config.transport.allow_link_stealing:
                raise ProtocolError(
                    f"Broker: {self.context.name} - Client: {client_id} already connected from {holder.peer or 'unknown'}",
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

    def check_connect_timeout(self, session: Session) -> None:
        if session.state is State.CONNECTING and session.id in self.context.sessions:
            ms = self.context.config.transport.connect_timeout
            self._fail(session, ProtocolError(f"no CONNECT frame within {ms} ms"), None)

    def _heart_beat_out(self, session: Session) -> None:
        if not session.is_open:
            return
        period = session.hb_send_ms / 1000
        now = self.context.clock.now()
        if now - session.last_write >= period * 0.999:
            session.write(b"\n")
            session.last_write = now
        self.context.timers.call_at(session.last_write + period, self._heart_beat_out, session)

    def _heart_beat_in(self, session: Session) -> None:
        if not session.is_open:
            return
        limit = session.hb_recv_ms * self.context.config.transport.hb_grace_period_multiplier / 1000
        now = self.context.clock.now()
        if session.reading.paused:
            # The broker is not reading (a busy store, flow control): the peer's beats wait
            # unread, so its silence is ours. ActiveMQ skips the check while it is busy too.
            self.context.timers.call_at(now + limit, self._heart_beat_in, session)
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
        self.context.timers.call_at(
            max(session.last_read, session.reading.resumed_at) + limit, self._heart_beat_in, session
        )
