"""``lab run NAME --console`` on the virtual clock: the lab's recorded runs, played by the page.

Theory of operation
-------------------
A lab on the virtual clock runs in seconds; each run is recorded as it goes
(``clients.labs.recording``: the broker's own statistics, sampled, and the
moments worth stopping on). The page plays the recording itself, with its own
clock, so every page has its own position and its own controls:

- a real broker serves the console (its page, ``/metrics``, the page's STOMP
  over WebSocket), and its ``statistics_source`` is ``RecordedReplay.answer``;
- the Broker statistics carry ``replay`` (the lab, the speed asked for, how many
  runs): the page then asks ``ActiveMQ.Statistics.Replay`` once, and gets each
  run's recording as one reply, and plays them from its start;
- the other statistics answer what the lab left behind (the last run's last
  sample), so a scrape of ``/metrics`` or a ``stat`` sees the end state;
- ``lab run --export FILE.html`` writes the same document into the page itself
  (``clients.labs.export``), which then needs no broker at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from minibroker import wildcards
from minibroker.ops import STATISTICS_PREFIX

from .recording import RunRecording

__all__ = ["REPLAY_STATISTICS", "RecordedReplay", "replay_document"]

#: Where the page asks for the runs' recordings (one reply per run).
REPLAY_STATISTICS = "Replay"


def replay_document(lab: Any, recordings: list[RunRecording], speed: float) -> dict[str, Any]:
    """What the page plays: the lab (name, title, source), the speed to start at, each run's recording."""
    return {
        "lab": {"name": lab.directory.name, "title": lab.title, "source": lab.citation},
        "speed": speed,
        "runs": [r.as_json() for r in recordings],
    }


class RecordedReplay:
    """A broker's ``statistics_source`` serving a lab's recorded runs to the page."""

    def __init__(
        self,
        lab: Any,
        recordings: list[RunRecording],
        speed: float = 1.0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if speed <= 0:
            raise ValueError("the replay's speed must be above 0")
        if not recordings or not recordings[-1].times:
            raise ValueError("a replay needs at least one recorded run")
        self.recordings = recordings
        self.speed = speed
        self.document = replay_document(lab, recordings, speed)
        self._clock = clock
        #: When a page first asked for the recordings (None: no page yet).
        self.first_played: float | None = None

    @property
    def duration(self) -> float:
        """Lab seconds of every run, end to end."""
        return sum(r.duration for r in self.recordings)

    def ends(self) -> float | None:
        """When the first page, playing on at the speed asked for, reaches the end (clock time), or None."""
        return None if self.first_played is None else self.first_played + self.duration / self.speed

    def answer(self, broker: Any, address: str, scope: Any = None) -> list[dict[str, Any]] | None:
        """The statistics at ``address`` (``Broker.statistics_source``)."""
        what = address[len(STATISTICS_PREFIX) :]
        last = self.recordings[-1]
        if what == REPLAY_STATISTICS:
            if self.first_played is None:
                self.first_played = self._clock()
            return list(self.document["runs"])
        if what == "Broker":
            lab = self.document["lab"]
            return [
                {
                    **last.brokers[-1],
                    "brokerName": f"replay of lab {lab['name']}",
                    "replay": {"lab": lab, "speed": self.speed, "runs": len(self.recordings)},
                }
            ]
        if what in ("Subscription", "Connection"):
            return []
        if what.startswith("Destination."):
            pattern = what[len("Destination.") :]
            return [
                d for d in last.destinations[-1] if wildcards.matches(pattern, d["destinationName"].split("/", 2)[2])
            ]
        return None
