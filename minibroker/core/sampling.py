"""What the broker samples on its timers (a part the ``Broker`` holds: ``broker.sampling``).

- every second: each destination's enqueue and dequeue counters, which the
  statistics' rates come from (``ops/rates.py``);
- while tracing, every second: a ``connection`` event per connection (the
  stalled socket's evidence);
- while tracing, whenever a usage's percent changes: a ``usage`` event with the
  broker-wide values.
"""

from __future__ import annotations

from minibroker.connection.clock import Clock
from minibroker.connection.session import Session, State
from minibroker.connection.timers import Timers
from minibroker.destinations.destination import Destination
from minibroker.destinations.usage import Usage
from minibroker.ops import SAMPLE_PERIOD
from minibroker.ops.rates import RateMeter
from minibroker.trace import Recorder

__all__ = ["Sampling"]

#: While tracing, how often each connection is sampled (``connection`` events).
_CONNECTION_SAMPLE_SECONDS = 1.0


class Sampling:
    """The samplers; each schedules its own next run."""

    def __init__(
        self,
        clock: Clock,
        timers: Timers,
        trace: Recorder,
        sessions: dict[int, Session],
        destinations: dict[str, Destination],
        rates: RateMeter,
        memory: Usage,
        store_usage: Usage,
        temp_usage: Usage,
    ) -> None:
        """``sessions`` and ``destinations`` are the broker's; the three usages are the
        usage tree's roots. Starts sampling (the connections and usages only while tracing)."""
        self.clock = clock
        self.timers = timers
        self.trace = trace
        self._emit = trace.event
        self.sessions = sessions
        self.destinations = destinations
        self.rates = rates
        self.memory = memory
        self.store_usage = store_usage
        self.temp_usage = temp_usage
        now = clock.now()
        if trace.enabled:
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
        now = self.clock.now()
        for session in self.sessions.values():
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
        self.timers.call_at(now + _CONNECTION_SAMPLE_SECONDS, self._sample_connections)

    def _sample_rates(self) -> None:
        """Every second: the counters the statistics' rates come from."""
        now = self.clock.now()
        self.rates.sample(now, [(d.address, d.enqueued, d.dequeued) for d in self.destinations.values()])
        self.timers.call_at(now + SAMPLE_PERIOD, self._sample_rates)
