"""One STOMP connection as the core sees it: a state machine and an outbox.

Theory of operation
-------------------
The session's life is a table (h11's ``_state.py`` style), not a tangle of
flags::

    CONNECTING --CONNECT/STOMP--> CONNECTED --DISCONNECT--> CLOSED
       |   \\                           ^
       |    `--CONNECT, users--> AUTHENTICATING  (the login is checked off the event loop)
       |                               |
       `--- protocol error, refused login ---> CLOSED  (after an ERROR frame)

``TRANSITIONS[state][command]`` gives the next state; a command missing from
the table is a protocol error with a message saying what was expected. A
handler may move the session itself (CONNECT to AUTHENTICATING, until the
password check comes back); then the table's move is not applied. CLOSED
is sticky: whatever arrives after it is ignored.

Output goes to ``outbox`` as encoded bytes. ``writing.can_write`` turns false
once the outbox holds ``write_buffer_limit`` bytes or the edge reports its
socket buffer full, and the dispatcher gives such a session nothing more: a
client that does not read cannot grow the broker's memory.

Whether the socket is read (and why not), whether output may be added,
whether flow control holds its SENDs back, and which RECEIPTs wait for an
fsync are four more small tables, in ``states.py``: ``reading``,
``writing``, ``producing`` and ``sync``.

Negotiation helpers (version, heart-beat) live here too, as pure functions.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from minibroker.connection.outlet import Connection
from minibroker.connection.security import ANONYMOUS
from minibroker.connection.states import Producing, Reading, SyncWait, Writing
from minibroker.digits import parse_decimal
from minibroker.errors import ProtocolError
from minibroker.frames import VERSIONS
from minibroker.protocol.codec import FrameParser
from minibroker.protocol.headers import shown

if TYPE_CHECKING:
    from minibroker.destinations.subscription import Subscription

__all__ = [
    "State",
    "TRANSITIONS",
    "Session",
    "negotiate_version",
    "negotiate_heart_beat",
    "parse_heart_beat",
]


class State(enum.Enum):
    CONNECTING = "CONNECTING"
    AUTHENTICATING = "AUTHENTICATING"
    CONNECTED = "CONNECTED"
    CLOSED = "CLOSED"


_IN_SESSION = ("SEND", "SUBSCRIBE", "UNSUBSCRIBE", "ACK", "NACK", "BEGIN", "COMMIT", "ABORT")

#: state -> command -> next state. Anything else is a protocol error.
TRANSITIONS: dict[State, dict[str, State]] = {
    State.CONNECTING: {"CONNECT": State.CONNECTED, "STOMP": State.CONNECTED},
    State.AUTHENTICATING: {},  # nothing is read until the password check is back
    State.CONNECTED: {**{c: State.CONNECTED for c in _IN_SESSION}, "DISCONNECT": State.CLOSED},
    State.CLOSED: {},
}

#: What to tell a peer that sent ``command`` in ``state``.
_WRONG_STATE = {
    State.CONNECTING: "not connected: the first frame must be CONNECT or STOMP, not {command}",
    State.CONNECTED: "already connected: {command} is not allowed after CONNECT",
    State.AUTHENTICATING: "{command} before the CONNECT's login was checked",
}


class Session(Connection):
    """Per-connection state kept by the core (what its subscriptions use of it: ``outlet.Connection``)."""

    def __init__(
        self,
        session_id: int,
        peer: str,
        parser: FrameParser,
        now: float,
        write_buffer_limit: int,
        on_output: Callable[[Session], None],
    ) -> None:
        self.id = session_id
        #: The id CONNECTED announces (``<broker>-<boot>-<id>``); the trace uses it too.
        self.tag = str(session_id)
        self.peer = peer
        self.parser = parser
        #: Where the session is in its life; changed only by ``set_state``.
        self.state = State.CONNECTING
        #: False once CLOSED (kept beside ``state``: the hot paths ask it per frame).
        self.is_open = True
        #: ``TRANSITIONS[state]``: command -> the state after it (the broker reads it per frame).
        self.transitions = TRANSITIONS[State.CONNECTING]
        #: Negotiated STOMP version ("1.0" until CONNECT says otherwise).
        self.version = "1.0"
        self.client_id = None
        self.login: str | None = None
        #: Who authenticated on CONNECT (anonymous when no users are configured).
        self.principal = ANONYMOUS
        self.opened_at = now
        self.last_read = now
        self.last_write = now
        #: Negotiated heart-beat periods in ms (0 = none): we send / we expect.
        self.hb_send_ms = 0
        self.hb_recv_ms = 0
        self.subscriptions: dict[str, Subscription] = {}
        self.transactions: dict[str, Any] = {}
        self.outbox: list[bytes] = []
        self.out_bytes = 0
        self.write_buffer_limit = write_buffer_limit
        #: May dispatch add output (``writing.can_write``), and what holds it back.
        self.writing = Writing(now)
        #: Bytes the edge holds for the socket, as last reported.
        self.transport_buffered = 0
        #: Which listener it came through ("tcp", "websocket"), for statistics.
        self.protocol = "tcp"
        #: The edge writes frame by frame (one WebSocket message each): ``take_frames``.
        self.framed = False
        #: When bytes last left for the socket (reported by the edge).
        self.last_write_progress = now
        #: The client sent DISCONNECT (it may still be handling the frames read
        #: with it): it reads nothing more, so nothing more is dispatched to it.
        self.leaving = False
        #: Is the socket read, why not, and the frames held meanwhile.
        self.reading = Reading(now)
        #: Whether producer flow control holds its SENDs back, and which (``producing.parked``).
        self.producing = Producing(now)
        #: RECEIPTs of this session waiting for an fsync (later ones queue behind).
        self.sync = SyncWait()
        #: Subscriptions the broker aborted (key -> id): late ACKs for them are ignored.
        self.aborted: dict[int, str] = {}
        self.frames_in = 0
        self.messages_in = 0
        #: Steps of this connection's close that failed (a bug; see ``teardown.py``).
        self.teardown_errors: list[str] = []
        #: Bytes the parser holds of a frame not yet complete (as charged to the broker's total).
        self.partial_bytes = 0
        #: When the partial frame the parser holds started arriving (None: none held).
        self.partial_since: float | None = None
        #: While AUTHENTICATING: what the CONNECT asked for, until its login is checked.
        self.pending_connect: Any = None
        self._on_output = on_output

    def set_state(self, state: State) -> None:
        """Move to ``state``."""
        self.state = state
        self.is_open = state is not State.CLOSED
        self.transitions = TRANSITIONS[state]

    def next_state(self, command: str) -> State:
        """The state after ``command``, or ``ProtocolError`` if not allowed now."""
        nxt = self.transitions.get(command)
        if nxt is None:
            raise ProtocolError(_WRONG_STATE.get(self.state, "{command} after close").format(command=command))
        return nxt

    def write(self, data: bytes) -> None:
        """Queue ``data`` for the socket."""
        if not self.outbox:
            self._on_output(self)
        self.outbox.append(data)
        self.out_bytes += len(data)
        if self.out_bytes >= self.write_buffer_limit and not self.writing.outbox_full:
            self.writing.outbox_filled()

    def take_output(self) -> bytes:
        """Everything queued since the last call, as one buffer."""
        data = b"".join(self.outbox)
        self.outbox.clear()
        self.out_bytes = 0
        if self.writing.outbox_full:  # (taking an outbox under its limit changes nothing)
            self.writing.outbox_taken()
        return data

    def take_frames(self) -> list[bytes]:
        """Everything queued since the last call, frame by frame (a framing edge's ``take_output``)."""
        frames = self.outbox
        self.outbox = []
        self.out_bytes = 0
        if self.writing.outbox_full:
            self.writing.outbox_taken()
        return frames

    def describe(self) -> dict[str, Any]:
        """Statistics for ``stat``."""
        return {
            "session": self.id,
            "peer": self.peer,
            "state": self.state.value,
            "version": self.version,
            "client_id": self.client_id,
            "subscriptions": len(self.subscriptions),
            "unacked": sum(len(s.dispatched) for s in self.subscriptions.values()),
            "frames_in": self.frames_in,
        }

    def __repr__(self) -> str:
        return f"<Session {self.id} {self.peer} {self.state.value}>"


def negotiate_version(accept_version: str | None) -> str:
    """The highest version both sides speak; 1.0 when the header is absent.

    Raises ``ProtocolError`` when there is none in common.
    """
    if accept_version is None:
        return "1.0"
    offered = {v.strip() for v in accept_version.split(",")}
    for version in reversed(VERSIONS):
        if version in offered:
            return version
    raise ProtocolError(f"Supported protocol versions are {','.join(VERSIONS)}; the client offered {accept_version!r}")


#: The longest heart-beat period a peer may ask for, in ms (24 days: a signed 32-bit count).
MAX_HEART_BEAT_MS = 2**31 - 1


def parse_heart_beat(value: str) -> tuple[int, int]:
    """``"cx,cy"`` -> (cx, cy) in ms; ``ProtocolError`` if malformed."""
    parts = value.split(",")
    try:
        if len(parts) != 2:
            raise ValueError("not two numbers")
        cx, cy = (parse_decimal(p.strip(" \t")) for p in parts)
    except ValueError as exc:
        raise ProtocolError(
            f"heart-beat header must be two non-negative integers 'cx,cy' in ASCII digits, not {shown(value)} ({exc})"
        ) from None
    if max(cx, cy) > MAX_HEART_BEAT_MS:
        raise ProtocolError(f"heart-beat periods must be at most {MAX_HEART_BEAT_MS} ms, not {shown(value)}")
    return cx, cy


def negotiate_heart_beat(client: tuple[int, int]) -> tuple[int, int, str]:
    """Agree heart-beats with a client that asked for ``(cx, cy)``.

    As ActiveMQ does, the broker accepts the client's wish and answers
    ``cy,cx``: it sends a beat every ``cy`` ms and expects one every ``cx``
    ms (spec: client->server every max(cx, sy), server->client every
    max(sx, cy)). Returns (send_ms, expect_ms, CONNECTED header value).
    """
    cx, cy = client
    return cy, cx, f"{cy},{cx}"
