"""How busy the machine was during a live run, as the broker felt it.

A live lab's verdict rests on timings: a heart-beat grace of 3 s, a write
timeout of 3 s, a client that retries for 5 s. On a loaded machine the
broker's event loop runs its timers late, and a verdict can flip for reasons
that have nothing to do with the configuration. ``LoopLag`` measures that
directly instead of guessing from wall-clock durations: a task on the broker's
own event loop asks to sleep ``INTERVAL`` seconds, again and again, and records
how much later than asked it woke up (the scheduling delay every timer of the
broker suffered at that moment, CPU starvation and GIL contention included).
"""

from __future__ import annotations

import asyncio
import statistics

__all__ = ["BUSY_SECONDS", "LoopLag"]

#: A run whose broker loop woke up this late (or later) was not a fair run: the
#: labs' shortest margins (a heart-beat's grace of 1 s, a stall seen after 1 s)
#: are a few such delays.
BUSY_SECONDS = 0.25


class LoopLag:
    """Samples an event loop's scheduling delay while ``sample()`` runs on it."""

    INTERVAL = 0.05

    def __init__(self) -> None:
        self.samples: list[float] = []

    async def sample(self) -> None:
        """Run on the loop to watch, until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + self.INTERVAL
            await asyncio.sleep(self.INTERVAL)
            self.samples.append(max(0.0, loop.time() - asked))

    def worst(self) -> float:
        return max(self.samples, default=0.0)

    def busy(self) -> bool:
        """Was the loop, at some moment, too late for a fair run?"""
        return self.worst() >= BUSY_SECONDS

    def summary(self) -> str:
        """One line: how late the broker's loop ran, worst and typical."""
        if not self.samples:
            return "the broker's event loop was not sampled"
        late = sum(s >= BUSY_SECONDS for s in self.samples)
        return (
            f"the broker's event loop woke up to {self.worst() * 1000:.0f} ms late (median "
            f"{statistics.median(self.samples) * 1000:.0f} ms; {late} of {len(self.samples)} samples "
            f"{BUSY_SECONDS * 1000:.0f} ms late or more)"
        )
