"""A lab run recorded for the console's player: the broker's own statistics, sampled, and
what happened when.

Theory of operation
-------------------
- A run on the virtual clock is sampled from inside: ``RunRecorder.attach(net)`` puts a
  sample on the network's agenda every ``SAMPLE_PERIOD`` virtual seconds, and the run's
  notes (its evidence lines) take one more sample when they are made. A sample is what
  the console asks a live broker for: ``broker_statistics`` (with the diagnosis) and
  each destination's ``destination_statistics``, so a replayed figure is the broker's
  own figure at that moment, not one rebuilt afterwards.
- A live run is sampled from outside, over STOMP (the ``Watcher`` of ``--watch``, which
  hands each snapshot to ``RunRecorder.statistics``): the same statistics, on the run's
  own seconds (``live_clock``, the seconds since the run started).
- Between samples the recorder notes the moments worth stopping on (``EVENT_KINDS``):
  the run starting, each evidence line, a diagnosis made or cleared, a producer blocked
  or released, a usage crossing a mark.
- ``RunRecording.as_json`` packs the samples column by column (a figure that never
  changes is one value), so a whole lab fits the page, and the exported file, small.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from minibroker.ops import Scope, broker_statistics, destination_statistics

__all__ = ["EVENT_KINDS", "SAMPLE_PERIOD", "RunRecorder", "RunRecording", "changes_worth_seeing"]

#: Virtual seconds between two samples of a run.
SAMPLE_PERIOD = 0.1
#: The usage marks whose crossing is a moment worth seeing (percent).
USAGE_MARKS = (70, 100)
#: The kinds of the moments the player's Step stops on.
EVENT_KINDS = ("run", "evidence", "diagnosis", "cleared", "blocked", "released", "usage")

#: What the broker and each destination both count: messages held, in and out, consumers, memory.
_SHARED_FIELDS = (
    "size",
    "readyCount",
    "inflightCount",
    "enqueueRate",
    "dequeueRate",
    "enqueueCount",
    "dequeueCount",
    "consumerCount",
    "memoryUsage",
    "memoryLimit",
    "memoryPercentUsage",
)
#: The broker's figures the page shows (the rest of its statistics are not kept).
BROKER_FIELDS = (
    *_SHARED_FIELDS,
    "storeUsage",
    "storeLimit",
    "storePercentUsage",
    "tempUsage",
    "tempLimit",
    "tempPercentUsage",
    "storeState",
    "storeProblem",
    "destinationCount",
    "connectionCount",
    "blockedProducers",
)
#: Each destination's figures the page shows.
DESTINATION_FIELDS = (
    *_SHARED_FIELDS,
    "kind",
    "expiredCount",
    "cursorMemoryHighWaterMark",
    "cachedCount",
    "storeOnlyCount",
    "tempCount",
    "pendingCount",
    "swappedCount",
)


def _finding_key(finding: dict[str, Any]) -> tuple[str, str]:
    return finding["pathology"], str(finding.get("destination") or "")


def changes_worth_seeing(before: dict[str, Any] | None, after: dict[str, Any]) -> list[tuple[str, str]]:
    """The moments between two broker samples that Step stops on: (kind, words)."""
    said: list[tuple[str, str]] = []
    b0 = before or {}
    for usage, name in (("memoryPercentUsage", "memory"), ("storePercentUsage", "store"), ("tempPercentUsage", "temp")):
        was, now = b0.get(usage, 0), after.get(usage, 0)
        up = [mark for mark in USAGE_MARKS if was < mark <= now]
        down = [mark for mark in USAGE_MARKS if now < mark <= was]
        if up:  # one moment, however many marks it passed: the highest
            said.append(("usage", f"broker {name} reached {now}% (past the {up[-1]}% mark)"))
        elif down:
            said.append(("usage", f"broker {name} back under the {down[0]}% mark ({now}%)"))
    was, now = b0.get("blockedProducers", 0), after.get("blockedProducers", 0)
    if was == 0 < now:
        said.append(("blocked", f"producer flow control: {now} send(s) blocked"))
    elif was > 0 == now:
        said.append(("released", "no send blocked any more"))
    seen = {_finding_key(f) for f in b0.get("diagnosis", [])}
    found = {_finding_key(f): f for f in after.get("diagnosis", [])}
    said += [("diagnosis", f"diagnosis: {f['summary']}") for key, f in found.items() if key not in seen]
    said += [
        ("cleared", f"diagnosis cleared: {pathology}" + (f" on {where}" if where else ""))
        for pathology, where in seen
        if (pathology, where) not in found
    ]
    return said


@dataclass
class RunRecording:
    """One run as the player plays it: samples (time, broker, destinations) and events."""

    name: str
    about: str = ""
    expect: str = ""
    verdict: str = ""
    summary: str = ""
    times: list[float] = field(default_factory=list)
    brokers: list[dict[str, Any]] = field(default_factory=list)
    destinations: list[list[dict[str, Any]]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def duration(self) -> float:
        return self.times[-1] if self.times else 0.0

    def add(self, t: float, broker: dict[str, Any], destinations: list[dict[str, Any]]) -> None:
        """A sample at ``t`` run seconds, and the moments since the last one."""
        t = round(max(t, self.times[-1] if self.times else 0.0), 3)
        if not self.times:
            self.event(t, "run", f"run {self.name} starts" + (f": {self.about}" if self.about else ""))
        before = self.brokers[-1] if self.brokers else None
        self.times.append(t)
        self.brokers.append(broker)
        self.destinations.append(destinations)
        for kind, text in changes_worth_seeing(before, broker):
            self.event(t, kind, text)

    def event(self, t: float, kind: str, text: str) -> None:
        """A moment worth seeing, at the latest sample (made at or before ``t``)."""
        self.events.append({"t": round(t, 3), "sample": max(0, len(self.times) - 1), "kind": kind, "text": text})

    def as_json(self) -> dict[str, Any]:
        """The run, column by column: a figure that never changes is one value."""
        names = sorted({d["destinationName"] for ds in self.destinations for d in ds})
        dests: dict[str, Any] = {}
        for name in names:
            rows = [next((d for d in ds if d["destinationName"] == name), None) for ds in self.destinations]
            dests[name] = {
                "present": _column([r is not None for r in rows]),
                **{f: _column([None if r is None else r.get(f) for r in rows]) for f in DESTINATION_FIELDS},
            }
        findings: list[dict[str, Any]] = []
        keys: dict[str, int] = {}
        per_sample: list[list[int]] = []
        for broker in self.brokers:
            indices = []
            for f in broker.get("diagnosis", []):
                kept = {k: f.get(k) for k in ("pathology", "destination", "summary", "cure")}
                text = repr(sorted(kept.items()))
                if text not in keys:
                    keys[text] = len(findings)
                    findings.append(kept)
                indices.append(keys[text])
            per_sample.append(indices)
        return {
            "name": self.name,
            "about": self.about,
            "expect": self.expect,
            "verdict": self.verdict,
            "summary": self.summary,
            "duration": self.duration,
            "t": self.times,
            "broker": {f: _column([b.get(f) for b in self.brokers]) for f in BROKER_FIELDS},
            "diagnosis": _column(per_sample),
            "findings": findings,
            "destinations": dests,
            "events": self.events,
        }


def _column(values: list[Any]) -> Any:
    """``values`` as a list, or ``{"all": value}`` when every one is the same."""
    if values and all(v == values[0] for v in values):
        return {"all": values[0]}
    return values


class RunRecorder:
    """Samples a run on the virtual clock into a ``RunRecording``."""

    def __init__(self, recording: RunRecording, period: float = SAMPLE_PERIOD) -> None:
        self.recording = recording
        self.period = period
        #: A live run's clock (its seconds so far), for a run with no virtual network.
        self.live_clock: Callable[[], float] = lambda: 0.0
        self._net: Any = None
        #: Run seconds before the current network's clock started (a run may use several).
        self._offset = 0.0

    def attach(self, net: Any) -> None:
        """Sample ``net`` (a ``VirtualNetwork`` of the run) from now on."""
        self._offset = self.recording.duration
        self._net = net
        self.sample()
        net.every(self.period, self.sample)

    def now(self) -> float:
        return self._offset + self._net.now if self._net is not None else self.live_clock()

    def sample(self) -> None:
        """Take the broker's statistics now (the network's current broker: after a restart, the new one)."""
        if self._net is None:
            return
        broker = self._net.broker
        scope = Scope(broker)
        self.recording.add(
            self.now(),
            broker_statistics(broker, scope),
            [destination_statistics(broker, d, scope) for d in scope.destinations()],
        )

    def statistics(self, snapshot: dict[str, Any]) -> None:
        """A live broker's statistics as ``fetch_statistics`` returns them, taken now."""
        self.recording.add(self.now(), snapshot["broker"], snapshot["destinations"])

    def note(self, text: str) -> None:
        """An evidence line of the run, at this moment (with a sample of what it speaks of)."""
        self.sample()
        self.recording.event(self.now(), "evidence", text)
