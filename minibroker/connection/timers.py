"""A timer queue for the core: callbacks due at virtual or real times.

The core schedules with ``call_at(when, fn, *args)``; the edge asks
``next_deadline()`` and calls ``run_due(now)`` then. Cancellation is lazy: a
callback re-checks whether it still matters (session still open, deadline
not pushed back) when it fires, which keeps scheduling O(log n) and free of
bookkeeping on the hot path.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

__all__ = ["Timers"]


class Timers:
    """A heap of (when, order, callback, args)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[..., Any], tuple[Any, ...]]] = []
        #: How many callbacks were ever scheduled: an edge that armed its own timer for
        #: ``next_deadline`` need not ask again until this moves, or its timer fires.
        self.scheduled = 0

    def __len__(self) -> int:
        return len(self._heap)

    def call_at(self, when: float, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn(*args)`` once ``run_due`` is called with ``now >= when``."""
        self.scheduled += 1  # (also the order of callbacks due at the same time)
        heapq.heappush(self._heap, (when, self.scheduled, fn, args))

    def next_deadline(self) -> float | None:
        """When the earliest callback is due, or None."""
        return self._heap[0][0] if self._heap else None

    def run_due(self, now: float) -> int:
        """Run every callback due at ``now``, in order; returns how many ran."""
        ran = 0
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, fn, args = heapq.heappop(heap)
            fn(*args)
            ran += 1
        return ran
