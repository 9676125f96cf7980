"""The end of a replay: what it did, in numbers, as text and as a dict."""

from __future__ import annotations

from dataclasses import dataclass

from .stats import Counters, ErrorLog, Histogram

__all__ = ["ReplayReport"]

_ORDER = ("connect", "subscribe", "send", "pace", "unsubscribe", "disconnect")


def _bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB"):
        if value < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


@dataclass
class ReplayReport:
    """What a replay did: counters, lag and latency, errors, time."""

    counters: Counters
    lag: Histogram  # per action: start minus due time, seconds
    latency: Histogram  # per received message: receive time minus replay-ts, seconds
    errors: ErrorLog
    elapsed: float  # seconds from the start to the end of the last client
    schedule: float  # seconds from the start to the last row's due time
    clients: int
    trace_events: int = 0

    @property
    def ok(self) -> bool:
        return self.errors.count == 0

    @property
    def played(self) -> int:
        return sum(self.counters.actions.values())

    def as_dict(self) -> dict[str, object]:
        c = self.counters
        return {
            "actions": dict(c.actions),
            "played": self.played,
            "skipped": c.skipped,
            "clients": self.clients,
            "peak_connected": c.peak_connected,
            "sent": c.sent,
            "received": c.received,
            "acked": c.acked,
            "redelivered": c.redelivered,
            "sent_bytes": c.sent_bytes,
            "received_bytes": c.received_bytes,
            "elapsed": self.elapsed,
            "schedule": self.schedule,
            "lag": self.lag.as_dict(),
            "latency": self.latency.as_dict(),
            "errors": self.errors.count,
            "trace_events": self.trace_events,
        }

    def render(self, *, source: str, target: str, speed: float, trace: str | None) -> str:
        c = self.counters
        elapsed = max(self.elapsed, 1e-9)
        kinds = [k for k in _ORDER if c.actions[k]] + sorted(set(c.actions) - set(_ORDER))
        lines = [
            f"replayed {source} against {target} at speed {speed:g}: {self.played} actions of "
            f"{self.clients} clients in {self.elapsed:.2f} s (schedule {self.schedule:.2f} s)",
            "  actions:   " + (", ".join(f"{k} {c.actions[k]}" for k in kinds) or "none") + f"; skipped {c.skipped}",
            f"  messages:  sent {c.sent} ({_bytes(c.sent_bytes)}), received {c.received} "
            f"({_bytes(c.received_bytes)}), acked {c.acked}, redelivered {c.redelivered}",
            f"  rates:     sent {c.sent / elapsed:,.0f} msg/s, received {c.received / elapsed:,.0f} "
            f"msg/s (over the whole run); peak {c.peak_connected} connections open",
            f"  lag:       {self.lag.summary()} behind schedule"
            + (f" (the worst at t={self.lag.max_key:g})" if isinstance(self.lag.max_key, float) else ""),
            f"  latency:   {self.latency.summary()} from send to receive",
        ]
        if self.errors.count:
            lines.append(f"  errors:    {self.errors.count}")
            lines += [f"    {line}" for line in self.errors.lines()]
        else:
            lines.append("  errors:    none")
        if trace is not None:
            lines.append(f"  trace:     {trace} ({self.trace_events} events)")
        return "\n".join(lines)
