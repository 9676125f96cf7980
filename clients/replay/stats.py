"""What a replay counts: lag and latency histograms, message counters, errors.

A replay can play millions of actions, so lag and latency are not kept as
lists: ``Histogram`` files each value in a log-scale bucket (5% wide, from
1 us to hours) and answers percentiles from the buckets, with the exact
count, mean and maximum beside them. Recording is one ``log`` and one list
increment.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

__all__ = ["Histogram", "Counters", "ErrorLog", "format_seconds"]

_FLOOR = 1e-6  # values at or below 1 us share bucket 0
_RATIO = 1.05
_LOG_RATIO = math.log(_RATIO)
_BUCKETS = 600  # 1 us * 1.05**600 is about 5e6 s


class Histogram:
    """Non-negative durations in seconds (negative ones count as 0)."""

    __slots__ = ("counts", "count", "total", "max", "max_key")

    def __init__(self) -> None:
        self.counts = [0] * (_BUCKETS + 1)
        self.count = 0
        self.total = 0.0
        self.max = 0.0
        #: What the caller passed with the largest value (e.g. the action's t).
        self.max_key: object = None

    def record(self, value: float, key: object = None) -> None:
        if value > _FLOOR:
            index = min(_BUCKETS, int(math.log(value / _FLOOR) / _LOG_RATIO) + 1)
        else:
            index = 0
            value = max(value, 0.0)
        self.counts[index] += 1
        self.count += 1
        self.total += value
        if value > self.max or self.count == 1:
            self.max = value
            self.max_key = key

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0

    def percentile(self, p: float) -> float:
        """The value at percentile ``p`` (0-100), to within 5%, never above the max."""
        if not self.count:
            return 0.0
        rank = max(1, math.ceil(self.count * p / 100))
        seen = 0
        for index, n in enumerate(self.counts):
            seen += n
            if seen >= rank:
                upper = 0.0 if index == 0 else _FLOOR * _RATIO**index
                return min(upper, self.max)
        return self.max

    def summary(self, unit: str = "ms") -> str:
        """``p50 1.2 ms, p90 ..., p99 ..., max ...`` (or ``none`` when empty)."""
        if not self.count:
            return "none"
        parts = [f"p{p:g} {format_seconds(self.percentile(p), unit)}" for p in (50, 90, 99, 99.9)]
        return ", ".join(parts) + f", max {format_seconds(self.max, unit)}"

    def as_dict(self) -> dict[str, float | int]:
        return {
            "count": self.count,
            "mean": self.mean,
            "p50": self.percentile(50),
            "p90": self.percentile(90),
            "p99": self.percentile(99),
            "p999": self.percentile(99.9),
            "max": self.max,
        }


def format_seconds(value: float, unit: str = "ms") -> str:
    """``value`` seconds in ``unit`` (ms or s), with sensible precision."""
    if unit == "s":
        return f"{value:.3g} s"
    ms = value * 1000
    return f"{ms:.3g} ms" if ms < 1000 else f"{ms:,.0f} ms"


@dataclass
class Counters:
    """Messages and actions, for the summary and the progress bar."""

    actions: Counter[str] = field(default_factory=Counter)  # performed, by kind
    skipped: int = 0  # actions of clients that had failed, or over --max-clients
    sent: int = 0
    sent_bytes: int = 0
    received: int = 0
    received_bytes: int = 0
    acked: int = 0
    redelivered: int = 0
    connected: int = 0  # connections open now
    peak_connected: int = 0


class ErrorLog:
    """Errors by message: each distinct message is reported once as it happens,
    then counted; the summary lists the most frequent."""

    def __init__(self) -> None:
        self.count = 0
        self.by_message: Counter[str] = Counter()
        self.first: dict[str, str] = {}  # message -> the first client it happened to

    def add(self, client: str, message: str) -> bool:
        """Count one error; True when this message is new (worth printing now)."""
        self.count += 1
        self.by_message[message] += 1
        if message in self.first:
            return False
        self.first[message] = client
        return True

    def lines(self, most: int = 5) -> list[str]:
        out = [f"{n} x {msg} (first: {self.first[msg]})" for msg, n in self.by_message.most_common(most)]
        rest = len(self.by_message) - most
        if rest > 0:
            out.append(f"... and {rest} other message(s)")
        return out
