"""A one-line progress bar for a terminal (no dependency).

Redrawn in place with a carriage return; ``clear`` wipes it so a warning can
be printed on a clean line, and the next ``update`` draws it again.
"""

from __future__ import annotations

from typing import Protocol, TextIO

from .stats import Counters, ErrorLog, format_seconds

__all__ = ["Progress", "ReplayStatus", "bar"]


class ReplayStatus(Protocol):
    """What the bar shows of a replay (``driver.Replayer`` is one)."""

    counters: Counters
    errors: ErrorLog
    #: The worst lag since the bar was last drawn, in seconds.
    recent_lag: float


def bar(fraction: float, width: int = 24) -> str:
    """``[#########---------------]`` for ``fraction`` in [0, 1]."""
    fraction = min(1.0, max(0.0, fraction))
    done = round(fraction * width)
    return "[" + "#" * done + "-" * (width - done) + "]"


class Progress:
    """Draws ``replay [####----] 42% t 4.2/10 s sent ... behind ...`` on ``stream``.

    ``duration`` is the table's length in its own seconds (from summary.json);
    without it the bar shows the table time reached and no percentage.
    """

    def __init__(self, stream: TextIO, duration: float | None) -> None:
        self.stream = stream
        self.duration = duration
        self._width = 0

    def line(self, elapsed: float, table_t: float, r: ReplayStatus) -> str:
        c = r.counters
        if self.duration:
            head = (
                f"{bar(table_t / self.duration)} {min(100.0, 100 * table_t / self.duration):3.0f}% "
                f"t {table_t:.1f}/{self.duration:g} s"
            )
        else:
            head = f"t {table_t:.1f} s"
        return (
            f"replay {head}  clients {c.connected}  sent {c.sent}  recv {c.received}  "
            f"acked {c.acked}  behind {format_seconds(max(0.0, r.recent_lag))}  "
            f"errors {r.errors.count}  ({elapsed:.0f} s)"
        )

    def update(self, elapsed: float, table_t: float, r: ReplayStatus) -> None:
        text = self.line(elapsed, table_t, r)
        pad = max(0, self._width - len(text))
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()
        self._width = len(text)

    def clear(self) -> None:
        if self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
            self._width = 0

    def close(self) -> None:
        self.clear()
