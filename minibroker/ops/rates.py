"""Enqueue and dequeue rates, from counters sampled on the broker's own clock.

Theory of operation
-------------------
The broker samples every destination's ``enqueued`` and ``dequeued``
counters once a second (a timer of the core: the virtual clock in a lab, the
real one on a socket) and keeps the last ``WINDOW`` seconds of samples. A
rate is the growth since the oldest kept sample divided by the time since it,
so it answers at any moment, between samples too, and a one-shot
``minibroker stat`` sees the last few seconds rather than nothing. A
destination seen for the first time has no sample: its rates are 0 until the
next one. Counters only grow, but a destination deleted and made again starts
from 0: a negative difference reads as 0.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

__all__ = ["RateMeter", "SAMPLE_PERIOD", "WINDOW"]

#: Seconds between samples.
SAMPLE_PERIOD = 1.0
#: Seconds of samples kept: rates are averaged over about this long.
WINDOW = 5


class RateMeter:
    """Per-key (enqueued, dequeued) samples and the rates they give."""

    def __init__(self, window: int = WINDOW) -> None:
        self._window = window
        self._samples: dict[str, deque[tuple[float, int, int]]] = {}

    def sample(self, now: float, counters: Iterable[tuple[str, int, int]]) -> None:
        """Record ``(key, enqueued, dequeued)`` for each key at ``now``; keys not
        given (deleted destinations) are forgotten."""
        samples: dict[str, deque[tuple[float, int, int]]] = {}
        for key, enqueued, dequeued in counters:
            kept = self._samples.get(key)
            if kept is None:
                kept = deque(maxlen=self._window + 1)
            kept.append((now, enqueued, dequeued))
            samples[key] = kept
        self._samples = samples

    def rates(self, key: str, now: float, enqueued: int, dequeued: int) -> tuple[float, float]:
        """Messages per second in and out of ``key`` over the window, given its counters now."""
        kept = self._samples.get(key)
        if not kept:
            return 0.0, 0.0
        then, enqueued_then, dequeued_then = kept[0]
        span = now - then
        if span <= 0:
            return 0.0, 0.0
        return (round(max(0, enqueued - enqueued_then) / span, 3), round(max(0, dequeued - dequeued_then) / span, 3))
