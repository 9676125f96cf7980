"""Heart-beats: the negotiation rule, and the two timers that apply it.

Negotiation (STOMP 1.1+, "Heart-beating"): the client offers ``cx,cy`` in
CONNECT ("I can send every cx ms, I want to hear from you every cy ms") and
the server answers ``sx,sy`` in CONNECTED. The client then sends something at
least every ``max(cx, sy)`` ms when both are non-zero, and expects something
from the server every ``max(sx, cy)`` ms when both are non-zero. A missing
header means ``0,0``: no heart-beats in that direction.

Theory of operation of ``Heartbeats``
-------------------------------------
The client stamps ``last_read`` / ``last_write`` with the loop clock whenever
bytes move; the timers only read the stamps, so the hot path costs one
attribute store per read or write and nothing else.

- The send timer fires ``send_every`` after the last write. If nothing was
  written meanwhile it writes one EOL; either way it re-arms itself at
  ``last_write + send_every``. Frames therefore count as heart-beats, as the
  spec allows, and the line is never quiet for longer than the interval.
- The read timer fires ``expect_every * grace`` after the last read. Finding
  the peer quiet, it does not give up at once: a timer that fires late means
  this event loop was busy, and the peer's beat may be sitting unread in the
  socket. It lets the loop run its selector twice more (two zero-delay timers,
  which asyncio runs after the I/O callbacks of the same pass), and only if
  ``last_read`` has still not moved does it call ``on_silence``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["negotiate", "parse_heartbeat", "format_heartbeat", "Heartbeats"]

#: Timers may fire up to the clock resolution early; a 1 ms slop absorbs it.
_SLOP = 0.001
#: Selector passes granted to a quiet peer before it is declared silent.
_FINAL_PASSES = 2


def negotiate(client: tuple[int, int], server: tuple[int, int]) -> tuple[int, int]:
    """``(send_every_ms, expect_every_ms)`` for the client, 0 meaning never.

    ``client`` is what the client offered (cx, cy), ``server`` what the
    CONNECTED frame answered (sx, sy).
    """
    cx, cy = client
    sx, sy = server
    send = max(cx, sy) if cx and sy else 0
    expect = max(sx, cy) if sx and cy else 0
    return send, expect


def parse_heartbeat(value: str | None) -> tuple[int, int]:
    """Parse a ``heart-beat`` header; ``None`` (missing) is ``(0, 0)``.

    Raises ``ValueError`` on anything but two non-negative integers.
    """
    if value is None:
        return (0, 0)
    parts = value.split(",")
    if len(parts) != 2:
        raise ValueError(f"heart-beat must be 'x,y', not {value!r}")
    try:
        x, y = int(parts[0].strip()), int(parts[1].strip())
    except ValueError:
        raise ValueError(f"heart-beat must be two integers, not {value!r}") from None
    if x < 0 or y < 0:
        raise ValueError(f"heart-beat values must not be negative: {value!r}")
    return (x, y)


def format_heartbeat(value: tuple[int, int]) -> str:
    """The header text for ``value``, after checking it."""
    x, y = value
    if not (isinstance(x, int) and isinstance(y, int)) or x < 0 or y < 0:
        raise ValueError(f"heart-beat must be two non-negative integers (ms), not {value!r}")
    return f"{x},{y}"


class Heartbeats:
    """The send and read timers of one connection (times in seconds)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        send_every: float,
        expect_every: float,
        grace: float,
        beat: Callable[[], None],
        on_silence: Callable[[float], None],
    ) -> None:
        self._loop = loop
        now = loop.time()
        #: Loop time of the last byte read from / written to the peer.
        self.last_read = now
        self.last_write = now
        self.send_every = send_every
        self.expect_every = expect_every
        self.limit = expect_every * grace
        self._beat = beat
        self._on_silence = on_silence
        self._send_handle: asyncio.TimerHandle | None = None
        self._read_handle: asyncio.TimerHandle | None = None
        self._final_passes = 0
        #: Heart-beat EOLs written so far.
        self.sent = 0

    def start(self) -> None:
        """Arm the timers the negotiation asked for."""
        loop = self._loop
        if self.send_every > 0:
            self._send_handle = loop.call_at(self.last_write + self.send_every, self._send_tick)
        if self.limit > 0:
            self._read_handle = loop.call_at(self.last_read + self.limit, self._read_tick)

    def stop(self) -> None:
        """Cancel both timers (idempotent)."""
        for handle in (self._send_handle, self._read_handle):
            if handle is not None:
                handle.cancel()
        self._send_handle = self._read_handle = None

    def _send_tick(self) -> None:
        now = self._loop.time()
        if now + _SLOP >= self.last_write + self.send_every:
            self._beat()
            self.sent += 1
            self.last_write = now
        self._send_handle = self._loop.call_at(self.last_write + self.send_every, self._send_tick)

    def _read_tick(self) -> None:
        now = self._loop.time()
        deadline = self.last_read + self.limit
        if now + _SLOP < deadline:
            self._final_passes = 0
            self._read_handle = self._loop.call_at(deadline, self._read_tick)
            return
        if self._final_passes < _FINAL_PASSES:
            self._final_passes += 1
            self._read_handle = self._loop.call_later(0, self._read_tick)
            return
        self._read_handle = None
        self._on_silence(now - self.last_read)
