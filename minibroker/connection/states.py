"""A connection's reading, writing, producing and fsync state: four small state machines.

Theory of operation
-------------------
Besides its STOMP life (``session.TRANSITIONS``), a connection has four
things going on that the core must never get out of step:

- **reading** (``Reading``): is the broker reading its socket, and if not,
  why? Producer flow control (``"flow"``), a slow store busy with an ACK
  (``"store"``) or a password check (``"login"``) each stop it; it is read
  again once the last reason is over. Frames that arrived with the one that
  stopped it, or while it was stopped, are *held*, with the parse error that
  came after them, if any; when reading resumes they are handled first
  (REPLAYING), and anything read meanwhile queues behind them::

      READING --PAUSE--> PAUSED --RESUME_LAST--> REPLAYING --DRAINED--> READING
                          ^  |                       |
                          |  `--PAUSE, RESUME, HOLD  |
                          `---------PAUSE------------'

- **writing** (``Writing``): may dispatch add output? Not once the outbox
  holds its limit (OUTBOX_FULL, until the edge takes it), nor while the edge
  reports its socket buffer over the high-water mark (SOCKET_FULL, until it
  drains), nor both (BOTH_FULL)::

      OPEN <--OUTBOX_TAKEN-- OUTBOX_FULL          OPEN <--SOCKET_DRAINED-- SOCKET_FULL
        `---OUTBOX_FILLED-----^                     `---SOCKET_BLOCKED------^

  and the same two moves, independently, between SOCKET_FULL and BOTH_FULL.

- **producing** (``Producing``): producer flow control holds its SENDs back
  (BLOCKED, the SENDs *parked* in order) until there is room; once the last
  one entered its destination or was refused, it is FLOWING again. (A
  producer that asked for no RECEIPT is also not read meanwhile: reading's
  ``"flow"`` reason.)

- **fsync** (``SyncWait``): RECEIPTs of this connection waiting for an fsync
  (``store.fsync = "always"``); later RECEIPTs queue behind them, in order.

Each machine is a table in h11's manner (``h11/_state.py``): ``(state, event)
-> next state``; an event the table does not hold raises ``IllegalTransition``,
which is a bug in the core or its edge (never the peer's fault: the peer
cannot cause an event directly), so it propagates. The methods turn what happened into an
event (``resume("flow")`` is RESUME, RESUME_LAST or RESUME_UNPAUSED after the
reasons held) and keep plain attributes (``Reading.paused``,
``Writing.can_write``) that the per-message paths read without a lookup.
Every machine ends in CLOSED (IDLE for the fsync wait, whose DROP is the
close), where what arrives late (a timer, the ERROR written before the close)
is let through and nothing can start again.

This module imports nothing of the broker: the core uses it, never the
other way round.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

# Defined with the broker's other errors (a class a compiled module may not derive from RuntimeError).
from minibroker.errors import IllegalTransition

if TYPE_CHECKING:
    from minibroker.errors import ProtocolError
    from minibroker.frames import Frame

__all__ = [
    "IllegalTransition",
    "ReadState",
    "ReadEvent",
    "READ_TRANSITIONS",
    "Reading",
    "WriteState",
    "WriteEvent",
    "WRITE_TRANSITIONS",
    "Writing",
    "ProduceState",
    "ProduceEvent",
    "PRODUCE_TRANSITIONS",
    "Producing",
    "SyncState",
    "SyncEvent",
    "SYNC_TRANSITIONS",
    "SyncWait",
]


_S = TypeVar("_S", bound=enum.Enum)
_E = TypeVar("_E", bound=enum.Enum)


def _next(table: Mapping[tuple[_S, _E], _S], machine: str, state: _S, event: _E) -> _S:
    """The state after ``event`` in ``state``, or ``IllegalTransition``."""
    try:
        return table[state, event]
    except KeyError:
        raise IllegalTransition(machine, state, event) from None


# ----------------------------------------------------------------- reading


class ReadState(enum.Enum):
    #: The socket is read; every frame is handled as it comes.
    READING = "READING"
    #: Not read, for one reason or more (``Reading.reasons``); frames may be held.
    PAUSED = "PAUSED"
    #: Read again: the held frames are handled first, new ones queue behind them.
    REPLAYING = "REPLAYING"
    #: The connection is closed: nothing is read or held any more.
    CLOSED = "CLOSED"


class ReadEvent(enum.Enum):
    #: A reason to stop reading began (it may already hold).
    PAUSE = "PAUSE"
    #: A reason ended; another still keeps the socket unread.
    RESUME = "RESUME"
    #: The last reason ended.
    RESUME_LAST = "RESUME_LAST"
    #: A reason ended that was not keeping the socket unread (a producer whose
    #: RECEIPT was withheld was never paused; a timer after the close).
    RESUME_UNPAUSED = "RESUME_UNPAUSED"
    #: Frames, or the parse error after them, were put aside for later.
    HOLD = "HOLD"
    #: Every held frame was handled (the held error is answered now).
    DRAINED = "DRAINED"
    #: The connection closed.
    CLOSE = "CLOSE"


_R, _RE = ReadState, ReadEvent

#: (state, event) -> next state. Anything else is an ``IllegalTransition``.
READ_TRANSITIONS: dict[tuple[ReadState, ReadEvent], ReadState] = {
    (_R.READING, _RE.PAUSE): _R.PAUSED,
    (_R.READING, _RE.RESUME_UNPAUSED): _R.READING,
    (_R.READING, _RE.CLOSE): _R.CLOSED,
    (_R.PAUSED, _RE.PAUSE): _R.PAUSED,
    (_R.PAUSED, _RE.RESUME): _R.PAUSED,
    (_R.PAUSED, _RE.RESUME_LAST): _R.REPLAYING,
    (_R.PAUSED, _RE.RESUME_UNPAUSED): _R.PAUSED,
    (_R.PAUSED, _RE.HOLD): _R.PAUSED,
    (_R.PAUSED, _RE.CLOSE): _R.CLOSED,
    (_R.REPLAYING, _RE.PAUSE): _R.PAUSED,
    (_R.REPLAYING, _RE.RESUME_UNPAUSED): _R.REPLAYING,
    (_R.REPLAYING, _RE.HOLD): _R.REPLAYING,
    (_R.REPLAYING, _RE.DRAINED): _R.READING,
    (_R.REPLAYING, _RE.CLOSE): _R.CLOSED,
    (_R.CLOSED, _RE.RESUME_UNPAUSED): _R.CLOSED,
}


class Reading:
    """Whether the broker reads a connection's socket, why not, and what it holds."""

    __slots__ = ("state", "reasons", "held", "held_error", "resumed_at", "busy_until", "paused", "holding")

    def __init__(self, now: float) -> None:
        self.state = ReadState.READING
        #: Why the socket is not read ("flow", "store", "login"); empty unless PAUSED.
        self.reasons: set[str] = set()
        #: Frames read but not yet handled (PAUSED or REPLAYING only).
        self.held: deque[Frame] = deque()
        #: The parse error that came after the held frames: answered once they are handled.
        self.held_error: ProtocolError | None = None
        #: When reading last started again after a pause.
        self.resumed_at = now
        #: Until when a slow store keeps the broker busy with this connection (its "store" reason).
        self.busy_until = 0.0
        #: PAUSED: the socket is not read.
        self.paused = False
        #: PAUSED or REPLAYING: what is read now waits behind the held frames.
        self.holding = False

    def _fire(self, event: ReadEvent) -> None:
        state = self.state = _next(READ_TRANSITIONS, "reading", self.state, event)
        self.paused = state is ReadState.PAUSED
        self.holding = self.paused or state is ReadState.REPLAYING

    def pause(self, reason: str) -> bool:
        """Stop reading for ``reason``; True if reading just stopped (tell the edge)."""
        was_paused = self.paused
        self._fire(ReadEvent.PAUSE)
        self.reasons.add(reason)
        return not was_paused

    def resume(self, reason: str, now: float) -> bool:
        """``reason`` is over; True if nothing keeps the socket unread any more
        (tell the edge, then handle the held frames and call ``drained``)."""
        reasons = self.reasons
        if reason not in reasons:
            self._fire(ReadEvent.RESUME_UNPAUSED)
            return False
        self._fire(ReadEvent.RESUME_LAST if len(reasons) == 1 else ReadEvent.RESUME)
        reasons.discard(reason)
        if reasons:
            return False
        self.resumed_at = now
        return True

    def hold(self, frames: Iterable[Frame]) -> None:
        """Put ``frames`` aside, after those already held."""
        self._fire(ReadEvent.HOLD)
        self.held.extend(frames)

    def hold_error(self, error: ProtocolError) -> None:
        """Answer ``error`` only once the frames held before it are handled."""
        self._fire(ReadEvent.HOLD)
        self.held_error = error

    def drained(self) -> ProtocolError | None:
        """Every held frame was handled: reading as usual. Returns the held error, to answer now."""
        self._fire(ReadEvent.DRAINED)
        error, self.held_error = self.held_error, None
        return error

    def close(self) -> None:
        """The connection closed: what was held is dropped, no reason is left."""
        self._fire(ReadEvent.CLOSE)
        self.reasons.clear()
        self.held.clear()
        self.held_error = None


# ----------------------------------------------------------------- writing


class WriteState(enum.Enum):
    #: Dispatch may add output.
    OPEN = "OPEN"
    #: The outbox holds its limit: nothing more until the edge takes it.
    OUTBOX_FULL = "OUTBOX_FULL"
    #: The edge's socket buffer is over its high-water mark: nothing more until it drains.
    SOCKET_FULL = "SOCKET_FULL"
    #: Both.
    BOTH_FULL = "BOTH_FULL"
    #: The connection is closed: it is given nothing more.
    CLOSED = "CLOSED"


class WriteEvent(enum.Enum):
    #: The outbox reached its limit.
    OUTBOX_FILLED = "OUTBOX_FILLED"
    #: The edge took the outbox.
    OUTBOX_TAKEN = "OUTBOX_TAKEN"
    #: The edge reports its socket buffer over the high-water mark.
    SOCKET_BLOCKED = "SOCKET_BLOCKED"
    #: The edge reports its socket buffer back under the low-water mark.
    SOCKET_DRAINED = "SOCKET_DRAINED"
    #: The connection closed.
    CLOSE = "CLOSE"


_W, _WE = WriteState, WriteEvent

#: (state, event) -> next state. Anything else is an ``IllegalTransition``: the edge
#: reports a socket full or drained only as it changes, and never after the close.
WRITE_TRANSITIONS: dict[tuple[WriteState, WriteEvent], WriteState] = {
    (_W.OPEN, _WE.OUTBOX_FILLED): _W.OUTBOX_FULL,
    (_W.OPEN, _WE.OUTBOX_TAKEN): _W.OPEN,
    (_W.OPEN, _WE.SOCKET_BLOCKED): _W.SOCKET_FULL,
    (_W.OPEN, _WE.CLOSE): _W.CLOSED,
    (_W.OUTBOX_FULL, _WE.OUTBOX_TAKEN): _W.OPEN,
    (_W.OUTBOX_FULL, _WE.SOCKET_BLOCKED): _W.BOTH_FULL,
    (_W.OUTBOX_FULL, _WE.CLOSE): _W.CLOSED,
    (_W.SOCKET_FULL, _WE.OUTBOX_FILLED): _W.BOTH_FULL,
    (_W.SOCKET_FULL, _WE.OUTBOX_TAKEN): _W.SOCKET_FULL,
    (_W.SOCKET_FULL, _WE.SOCKET_DRAINED): _W.OPEN,
    (_W.SOCKET_FULL, _WE.CLOSE): _W.CLOSED,
    (_W.BOTH_FULL, _WE.OUTBOX_TAKEN): _W.SOCKET_FULL,
    (_W.BOTH_FULL, _WE.SOCKET_DRAINED): _W.OUTBOX_FULL,
    (_W.BOTH_FULL, _WE.CLOSE): _W.CLOSED,
    (_W.CLOSED, _WE.OUTBOX_FILLED): _W.CLOSED,  # the ERROR written before the close
    (_W.CLOSED, _WE.OUTBOX_TAKEN): _W.CLOSED,
}

#: state -> (can_write, outbox_full, socket_full)
_WRITE_FLAGS: dict[WriteState, tuple[bool, bool, bool]] = {
    _W.OPEN: (True, False, False),
    _W.OUTBOX_FULL: (False, True, False),
    _W.SOCKET_FULL: (False, False, True),
    _W.BOTH_FULL: (False, True, True),
    _W.CLOSED: (False, False, False),
}


class Writing:
    """Whether dispatch may give a connection more output, and what holds it back."""

    __slots__ = ("state", "can_write", "outbox_full", "socket_full", "blocked_since")

    def __init__(self, now: float) -> None:
        self.state = WriteState.OPEN
        #: OPEN: dispatch may add output.
        self.can_write = True
        #: OUTBOX_FULL or BOTH_FULL.
        self.outbox_full = False
        #: SOCKET_FULL or BOTH_FULL: the edge holds more than it wants for the socket.
        self.socket_full = False
        #: When the socket last stopped accepting writes.
        self.blocked_since = now

    def _fire(self, event: WriteEvent) -> None:
        state = self.state = _next(WRITE_TRANSITIONS, "writing", self.state, event)
        self.can_write, self.outbox_full, self.socket_full = _WRITE_FLAGS[state]

    def outbox_filled(self) -> None:
        """The outbox reached its limit."""
        self._fire(WriteEvent.OUTBOX_FILLED)

    def outbox_taken(self) -> None:
        """The edge took the outbox."""
        self._fire(WriteEvent.OUTBOX_TAKEN)

    def socket_blocked(self, now: float) -> None:
        """The edge's socket buffer went over its high-water mark."""
        self._fire(WriteEvent.SOCKET_BLOCKED)
        self.blocked_since = now

    def socket_drained(self) -> None:
        """The edge's socket buffer went back under its low-water mark."""
        self._fire(WriteEvent.SOCKET_DRAINED)

    def close(self) -> None:
        """The connection closed."""
        self._fire(WriteEvent.CLOSE)


# --------------------------------------------------------------- producing


class ProduceState(enum.Enum):
    #: Its SENDs enter their destinations as they come.
    FLOWING = "FLOWING"
    #: Producer flow control holds its SENDs back (``Producing.parked``) until there is room.
    BLOCKED = "BLOCKED"
    #: The connection is closed: what was parked was dropped.
    CLOSED = "CLOSED"


class ProduceEvent(enum.Enum):
    #: A SEND was parked while none was.
    BLOCK = "BLOCK"
    #: Another SEND was parked behind those already waiting.
    PARK = "PARK"
    #: Every parked SEND entered its destination or was refused: the producer goes on.
    UNBLOCK = "UNBLOCK"
    #: The connection closed.
    CLOSE = "CLOSE"


_P, _PE = ProduceState, ProduceEvent

#: (state, event) -> next state. Anything else is an ``IllegalTransition``.
PRODUCE_TRANSITIONS: dict[tuple[ProduceState, ProduceEvent], ProduceState] = {
    (_P.FLOWING, _PE.BLOCK): _P.BLOCKED,
    (_P.FLOWING, _PE.CLOSE): _P.CLOSED,
    (_P.BLOCKED, _PE.PARK): _P.BLOCKED,
    (_P.BLOCKED, _PE.UNBLOCK): _P.FLOWING,
    (_P.BLOCKED, _PE.CLOSE): _P.CLOSED,
}


class Producing:
    """Whether producer flow control holds a connection's SENDs back, and which."""

    __slots__ = ("state", "parked", "blocked_since", "usage")

    def __init__(self, now: float) -> None:
        self.state = ProduceState.FLOWING
        #: SENDs waiting for room, in order (empty unless BLOCKED; the broker may
        #: let some go, or refuse them, before the whole producer is unblocked).
        self.parked: deque[Any] = deque()
        #: When the producer was last blocked.
        self.blocked_since = now
        #: Which usage blocked it ("memory", "store", "temp"), for the trace.
        self.usage = "memory"

    def _fire(self, event: ProduceEvent) -> None:
        self.state = _next(PRODUCE_TRANSITIONS, "producing", self.state, event)

    def park(self, send: Any, now: float) -> bool:
        """Hold ``send`` back; True if this blocked the producer (it was flowing)."""
        blocking = self.state is ProduceState.FLOWING
        self._fire(ProduceEvent.BLOCK if blocking else ProduceEvent.PARK)
        self.parked.append(send)
        if blocking:
            self.blocked_since = now
        return blocking

    def unblock(self) -> None:
        """Nothing is parked any more: the producer goes on."""
        self._fire(ProduceEvent.UNBLOCK)

    def close(self) -> None:
        """The connection closed: its parked SENDs are dropped (they never entered a destination)."""
        self._fire(ProduceEvent.CLOSE)
        self.parked.clear()


# ------------------------------------------------------------------- fsync


class SyncState(enum.Enum):
    #: No RECEIPT of this connection waits for an fsync.
    IDLE = "IDLE"
    #: ``SyncWait.count`` RECEIPTs wait (later ones queue behind them).
    AWAITING = "AWAITING"


class SyncEvent(enum.Enum):
    #: A RECEIPT waits for an fsync (or behind one that does).
    AWAIT = "AWAIT"
    #: One waiting RECEIPT was let go (written, or refused after a store failure); more wait.
    RELEASE = "RELEASE"
    #: The last waiting RECEIPT was let go.
    RELEASE_LAST = "RELEASE_LAST"
    #: The connection closed: its waiting RECEIPTs are dropped.
    DROP = "DROP"


_Y, _YE = SyncState, SyncEvent

#: (state, event) -> next state. Anything else is an ``IllegalTransition``.
SYNC_TRANSITIONS: dict[tuple[SyncState, SyncEvent], SyncState] = {
    (_Y.IDLE, _YE.AWAIT): _Y.AWAITING,
    (_Y.AWAITING, _YE.AWAIT): _Y.AWAITING,
    (_Y.AWAITING, _YE.RELEASE): _Y.AWAITING,
    (_Y.AWAITING, _YE.RELEASE_LAST): _Y.IDLE,
    (_Y.AWAITING, _YE.DROP): _Y.IDLE,
}


class SyncWait:
    """The RECEIPTs of a connection waiting for an fsync."""

    __slots__ = ("state", "count")

    def __init__(self) -> None:
        self.state = SyncState.IDLE
        #: How many RECEIPTs wait (0 when IDLE).
        self.count = 0

    def _fire(self, event: SyncEvent) -> None:
        self.state = _next(SYNC_TRANSITIONS, "fsync wait", self.state, event)

    def wait(self) -> None:
        """One more RECEIPT waits."""
        self._fire(SyncEvent.AWAIT)
        self.count += 1

    def release(self) -> None:
        """One waiting RECEIPT was let go."""
        self._fire(SyncEvent.RELEASE_LAST if self.count == 1 else SyncEvent.RELEASE)
        self.count -= 1

    def drop(self) -> None:
        """The connection closed with RECEIPTs waiting: they are dropped."""
        self._fire(SyncEvent.DROP)
        self.count = 0
