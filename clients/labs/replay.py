"""``lab run NAME --console`` on the virtual clock: the lab's traces replayed to the web console.

Theory of operation
-------------------
A lab on the virtual clock runs in seconds and leaves a trace per run
(``docs/trace-schema.md``). The replay lays the runs end to end on one
timeline (a run after the other, a second apart) and plays it back at
``speed`` lab seconds per wall second, from the first request it answers (the
page opened). A real broker serves the console (its
page, ``/metrics``, the page's STOMP over WebSocket), and its
``statistics_source`` is ``TraceReplay.answer``: the page asks
``/queue/ActiveMQ.Statistics.*`` exactly as it asks a live broker, and the
answers are the broker's and destinations' figures as the trace has them at
the replay's position. So the page has one statistics path, and the figures
are the ones a live console would have shown, rebuilt from events:

- a queue's size = its enqueues - acks - expiries - discards; a topic's
  (which traces each SEND, not an enqueue) = each send times the
  subscriptions it found - acks - discards, of which pending = not yet
  dispatched; unacknowledged = dispatches - acks; consumers = subscribes -
  unsubscribes;
  store-only = enqueues not cached - pages in; memory % its latest ``usage``;
  rates = events over the last five lab seconds;
- the broker's usages from its latest broker-wide ``usage`` event and the run's
  limits; connections and blocked producers from ``connect``/``disconnect``
  and ``flow_block``/``flow_unblock``.

The Broker reply also carries ``replay``: the position, the end, the speed and
the phases (each run, and inside it the windows a producer was blocked), which
the page draws as a track above its charts. Connection and subscription
statistics are empty: a trace does not keep what they show.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from minibroker import wildcards
from minibroker.config import BrokerConfig
from minibroker.stats import STATISTICS_PREFIX

__all__ = ["ReplayedRun", "TraceReplay"]

#: Lab seconds between one run's end and the next one's start on the timeline.
RUN_GAP = 1.0
#: Blocked windows closer than this (lab seconds) are drawn as one.
BLOCKED_GAP = 0.5
#: The window of the rates, as the broker's own (five seconds).
RATE_WINDOW = 5.0
#: The replay's clock starts here (ms since the epoch) so timestamps look like a broker's.
EPOCH_MS = 1_700_000_000_000


@dataclass
class ReplayedRun:
    """One run of the lab as the replay needs it: its trace's events, its configuration, its verdict."""

    name: str
    verdict: str
    events: list[dict[str, Any]]
    config: BrokerConfig


@dataclass
class _Dest:
    address: str
    enqueued: int = 0
    dequeued: int = 0
    dispatched: int = 0
    acked: int = 0
    expired: int = 0
    discarded: int = 0
    consumers: int = 0
    not_cached: int = 0
    #: A topic's copies: each send times the subscriptions it found.
    fanout: int = 0
    paged_in: int = 0
    mem_pct: int = 0
    enqueue_times: deque[float] = field(default_factory=deque)
    dequeue_times: deque[float] = field(default_factory=deque)

    @property
    def topic(self) -> bool:
        return self.address.startswith("/topic/")

    @property
    def size(self) -> int:
        return max(0, (self.fanout if self.topic else self.enqueued) - self.dequeued)

    @property
    def pending(self) -> int:
        return max(0, self.fanout - self.dispatched) if self.topic else 0

    @property
    def inflight(self) -> int:
        return min(self.size, max(0, self.dispatched - self.acked))


class _State:
    """A run's broker as its trace has it at one moment."""

    def __init__(self) -> None:
        self.dests: dict[str, _Dest] = {}
        self.mem_pct = self.store_pct = self.temp_pct = 0
        self.sessions: set[str] = set()
        self.blocked: set[str] = set()

    def dest(self, address: str) -> _Dest:
        found = self.dests.get(address)
        if found is None:
            found = self.dests[address] = _Dest(address)
        return found

    def apply(self, e: dict[str, Any], at: float) -> None:
        kind, address = e["event"], e.get("dest")
        d = self.dest(address) if isinstance(address, str) and address.startswith(("/queue/", "/topic/")) else None
        if kind == "usage":
            if d is not None and e.get("dest_mem_pct") is not None:
                d.mem_pct = int(e["dest_mem_pct"])
            self.mem_pct, self.store_pct, self.temp_pct = int(e["mem_pct"]), int(e["store_pct"]), int(e["temp_pct"])
        elif d is None:
            if kind == "connect":
                self.sessions.add(e["session"])
            elif kind == "disconnect":
                self.sessions.discard(e["session"])
        elif kind == "send" and d.topic:
            d.enqueued += 1
            d.fanout += d.consumers
            d.enqueue_times.append(at)
        elif kind == "enqueue" and not d.topic:
            d.enqueued += 1
            d.not_cached += not e.get("cached", True)
            d.enqueue_times.append(at)
        elif kind == "dispatch":
            d.dispatched += 1
        elif kind in ("ack", "expire", "discard"):
            d.dequeued += 1
            d.dequeue_times.append(at)
            if kind == "ack":
                d.acked += 1
            elif kind == "expire":
                d.expired += 1
            else:
                d.discarded += 1
        elif kind == "page_in":
            d.paged_in += int(e.get("count") or 0)
        elif kind == "subscribe":
            d.consumers += 1
        elif kind == "unsubscribe":
            d.consumers = max(0, d.consumers - 1)
        elif kind == "flow_block":
            self.blocked.add(e["session"])
        elif kind == "flow_unblock":
            self.blocked.discard(e["session"])


class TraceReplay:
    """The runs' traces on one timeline, played at ``speed``; ``answer`` is a broker's
    ``statistics_source``."""

    def __init__(
        self, runs: list[ReplayedRun], speed: float = 1.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if speed <= 0:
            raise ValueError("the replay's speed must be above 0")
        self.runs = runs
        self.speed = speed
        self._clock = clock
        #: When the replay began: at the first request (a page opened, a scrape), so a class
        #: that opens the console after the verdicts still sees the lab from its start.
        self._started: float | None = None
        #: (start, end) of each run on the timeline.
        self.spans: list[tuple[float, float]] = []
        start = 0.0
        for run in runs:
            first = run.events[0]["ts"] if run.events else 0.0
            last = run.events[-1]["ts"] if run.events else 0.0
            self.spans.append((start, start + (last - first)))
            start += (last - first) + RUN_GAP
        self.end = self.spans[-1][1] if self.spans else 0.0
        self.phases = self._phases()
        self._run = -1
        self._next = 0
        self._state = _State()

    def _phases(self) -> list[dict[str, Any]]:
        phases: list[dict[str, Any]] = []
        for run, (start, end) in zip(self.runs, self.spans):
            phases.append({"kind": "run", "name": run.name, "verdict": run.verdict, "start": start, "end": end})
            first = run.events[0]["ts"] if run.events else 0.0
            since: float | None = None
            held: set[str] = set()
            for e in run.events:
                if e["event"] == "flow_block":
                    if not held:
                        since = e["ts"]
                    held.add(e["session"])
                elif e["event"] == "flow_unblock" and e["session"] in held:
                    held.discard(e["session"])
                    if not held and since is not None:
                        phases.append(
                            {
                                "kind": "blocked",
                                "name": "producer blocked",
                                "run": run.name,
                                "start": start + since - first,
                                "end": start + e["ts"] - first,
                            }
                        )
            if held and since is not None:
                phases.append(
                    {
                        "kind": "blocked",
                        "name": "producer blocked",
                        "run": run.name,
                        "start": start + since - first,
                        "end": end,
                    }
                )
        merged: list[dict[str, Any]] = []
        for phase in phases:  # a producer held and let go many times in a row: one window
            last = merged[-1] if merged else None
            if (
                last is not None
                and phase["kind"] == last["kind"] == "blocked"
                and phase["run"] == last["run"]
                and phase["start"] - last["end"] < BLOCKED_GAP
            ):
                last["end"] = max(last["end"], phase["end"])
            else:
                merged.append(phase)
        return merged

    def position(self) -> float:
        """Where the replay is, in lab seconds on the timeline (it stops at the end)."""
        if self._started is None:
            return 0.0
        return min(self.end, (self._clock() - self._started) * self.speed)

    def _advance(self) -> tuple[int, float]:
        """Apply the events up to the position; the run being shown and its own time."""
        at = self.position()
        index = next((i for i, (_, end) in enumerate(self.spans) if at <= end + RUN_GAP / 2), len(self.spans) - 1)
        if index != self._run:
            self._run, self._next, self._state = index, 0, _State()
        run = self.runs[index]
        first = run.events[0]["ts"] if run.events else 0.0
        local = first + max(0.0, at - self.spans[index][0])
        events = run.events
        while self._next < len(events) and events[self._next]["ts"] <= local:
            self._state.apply(events[self._next], events[self._next]["ts"])
            self._next += 1
        for d in self._state.dests.values():
            for times in (d.enqueue_times, d.dequeue_times):
                while times and times[0] < local - RATE_WINDOW:
                    times.popleft()
        return index, local - first

    def answer(self, broker: Any, address: str, scope: Any = None) -> list[dict[str, Any]] | None:
        """The statistics at ``address`` as the trace has them now (``Broker.statistics_source``)."""
        if self._started is None:
            self._started = self._clock()
        index, local = self._advance()
        run, state = self.runs[index], self._state
        what = address[len(STATISTICS_PREFIX) :]
        timestamp = EPOCH_MS + int(self.position() * 1000)
        if what == "Broker":
            return [self._broker(run, state, timestamp, local)]
        if what in ("Subscription", "Connection"):
            return []
        if what.startswith("Destination."):
            pattern = what[len("Destination.") :]
            return [
                self._destination(run, d, timestamp)
                for name, d in sorted(state.dests.items())
                if wildcards.matches(pattern, name.split("/", 2)[2])
            ]
        return None

    def _destination(self, run: ReplayedRun, d: _Dest, timestamp: int) -> dict[str, Any]:
        kind = "queue" if d.address.startswith("/queue/") else "topic"
        policy = run.config.policy_for(kind, d.address.split("/", 2)[2])
        limit = policy.memory_limit or run.config.system_usage.memory_limit
        hwm = policy.cursor_memory_high_water_mark
        store_only = max(0, min(d.size, d.not_cached - d.paged_in))
        return {
            "destinationName": d.address,
            "kind": kind,
            "timestamp": timestamp,
            "size": d.size,
            "readyCount": d.size - d.inflight,
            "inflightCount": d.inflight,
            "enqueueCount": d.enqueued,
            "dequeueCount": d.dequeued,
            "dispatchCount": d.dispatched,
            "expiredCount": d.expired,
            "discardedCount": d.discarded,
            "enqueueRate": round(len(d.enqueue_times) / RATE_WINDOW, 2),
            "dequeueRate": round(len(d.dequeue_times) / RATE_WINDOW, 2),
            "consumerCount": d.consumers,
            "memoryUsage": limit * d.mem_pct // 100,
            "memoryLimit": limit,
            "memoryPercentUsage": d.mem_pct,
            "cursorMemoryHighWaterMark": hwm,
            "cachedCount": d.size - store_only,
            "storeOnlyCount": store_only,
            "cacheEnabled": store_only == 0,
            "pageInBlocked": False,
            "pagedInCount": d.paged_in,
            "tempCount": 0,
            "pendingCount": d.pending,
            "swappedCount": 0,
            "consumers": [],
        }

    def _broker(self, run: ReplayedRun, state: _State, timestamp: int, local: float) -> dict[str, Any]:
        limits = run.config.system_usage
        dests = state.dests.values()
        size = sum(d.size for d in dests)
        inflight = sum(d.inflight for d in dests)
        return {
            "brokerName": f"{run.config.broker.name} (replay of {run.name})",
            "timestamp": timestamp,
            "memoryUsage": limits.memory_limit * state.mem_pct // 100,
            "memoryLimit": limits.memory_limit,
            "memoryPercentUsage": state.mem_pct,
            "storeUsage": limits.store_limit * state.store_pct // 100,
            "storeLimit": limits.store_limit,
            "storePercentUsage": state.store_pct,
            "tempUsage": limits.temp_limit * state.temp_pct // 100,
            "tempLimit": limits.temp_limit,
            "tempPercentUsage": state.temp_pct,
            "storeState": "ok",
            "storeProblem": "",
            "size": size,
            "readyCount": size - inflight,
            "inflightCount": inflight,
            "enqueueCount": sum(d.enqueued for d in dests),
            "dequeueCount": sum(d.dequeued for d in dests),
            "dispatchCount": sum(d.dispatched for d in dests),
            "expiredCount": sum(d.expired for d in dests),
            "enqueueRate": round(sum(len(d.enqueue_times) for d in dests) / RATE_WINDOW, 2),
            "dequeueRate": round(sum(len(d.dequeue_times) for d in dests) / RATE_WINDOW, 2),
            "consumerCount": sum(d.consumers for d in dests),
            "destinationCount": len(state.dests),
            "connectionCount": len(state.sessions),
            "blockedProducers": len(state.blocked),
            "diagnosis": [],
            "replay": {
                "position": round(self.position(), 3),
                "end": round(self.end, 3),
                "speed": self.speed,
                "run": run.name,
                "runTime": round(local, 3),
                "phases": self.phases,
            },
        }
