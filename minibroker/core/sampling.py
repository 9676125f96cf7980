"""What the broker samples on its timers (a part the ``Broker`` holds: ``broker.sampling``).

- every second: each destination's enqueue and dequeue counters, which the
  statistics' rates come from (``ops/rates.py``);
- while tracing, every second: a ``connection`` event per connection (the
  stalled socket's evidence);
- while tracing, whenever a usage's percent changes: a ``usage`` event with the
  broker-wide values.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from minibroker.connection.session import State
from minibroker.destinations.usage import Usage
from minibroker.ops import SAMPLE_PERIOD
from minibroker.ops.rates import RateMeter

if TYPE_CHECKING:
    from minibroker.core.context import CoreContext

__all__ = ["Sampling"]

#: While tracing, how often each connection is sampled (``connection`` events).
_CONNECTION_SAMPLE_SECONDS = 1.0


class Sampling:
    """The samplers; each schedules its own next run."""

    def __init__(self, context: CoreContext, rates: RateMeter) -> None:
        """Samples the context's sessions, destinations and usage tree's roots into
        ``rates`` and the trace. Starts sampling (the connections and usages only while tracing)."""
        self.context = context
        self._emit = context.trace.event
        self.rates = rates
        # Bound once: every usage change reads the three roots.
        self.memory = memory = context.memory
        self.store_usage = store_usage = context.store_usage
        self.temp_usage = temp_usage = context.temp_usage
        timers = context.timers
        now = context.clock.now()
        if context.trace.enabled:
            for usage in (memory, store_usage, temp_usage):
                usage.add_listener(self.usage_changed)
            timers.call_at(now + _CONNECTION_SAMPLE_SECONDS, self._sample_connections)
        timers.call_at(now + SAMPLE_PERIOD, self._sample_rates)

    def usage_changed(self, usage: Usage, old: int, new: int) -> None:
        """A usage percent changed: a ``usage`` event with the broker-wide values (while tracing)."""
        dest = None if usage.parent is None else usage.name
        self._emit(
            "usage",
            mem_pct=self.memory.percent,
            store_pct=self.store_usage.percent,
            temp_pct=self.temp_usage.percent,
            dest=dest,
            dest_mem_pct=new if dest else None,
        )

    def _sample_connections(self) -> None:
        """Every second, while tracing: a ``connection`` event per connection."""
        now = self.context.clock.now()
        for session in self.context.sessions.values():
            if session.state is State.CONNECTED:
                self._emit(
                    "connection",
                    session=session.tag,
                    client_id=session.client_id,
                    addr=session.peer or None,
                    pending_bytes=session.out_bytes + session.transport_buffered,
                    pending=sum(len(s.dispatched) for s in session.subscriptions.values()),
                    idle_read=round(now - session.last_read, 6),
                    idle_write=round(now - session.last_write_progress, 6),
                )
        self.context.timers.call_at(now + _CONNECTION_SAMPLE_SECONDS, self._sample_connections)

    def _sample_rates(self) -> None:
        """Every second: the counters the statistics' rates come from."""
        now = self.context.clock.now()
        self.rates.sample(now, [(d.address, d.enqueued, d.dequeued) for d in self.context.destinations.values()])
        self.context.timers.call_at(now + SAMPLE_PERIOD, self._sample_rates)
