"""Clocks. The broker core never reads time itself: it is given a clock.

``now()`` is monotonic seconds (timers, heart-beats, rates); ``wall_ms()`` is
milliseconds since the epoch (message ``timestamp`` and ``expires``). The
asyncio server passes a ``SystemClock``; tests and labs pass a
``ManualClock`` and move it by hand, so a whole run is exact and repeatable.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock", "ManualClock"]


class Clock(Protocol):
    """What the core needs to know about time."""

    def now(self) -> float:
        """Monotonic seconds."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the epoch."""
        ...


class SystemClock:
    """The real clock (used only by the asyncio edge)."""

    #: ``time.monotonic`` itself: the core asks several times per frame, and a
    #: method around it would cost a Python call each time.
    now = staticmethod(time.monotonic)

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000


class ManualClock:
    """A virtual clock that moves only when told to.

    ``wall_ms()`` is ``epoch_ms`` plus the virtual time, so message expiry
    works on the same virtual timeline.
    """

    def __init__(self, start: float = 0.0, epoch_ms: int = 1_700_000_000_000) -> None:
        self._now = start
        self.epoch_ms = epoch_ms

    def now(self) -> float:
        return self._now

    def wall_ms(self) -> int:
        return self.epoch_ms + int(self._now * 1000)

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (never backwards)."""
        if seconds < 0:
            raise ValueError("a clock never goes backwards")
        self._now += seconds

    def set(self, now: float) -> None:
        """Move time forward to ``now``."""
        self.advance(now - self._now)
