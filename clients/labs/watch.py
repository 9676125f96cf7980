"""``lab run NAME --live --watch``: the run's broker, watched while the run goes.

The feed is the broker's own statistics over STOMP (``fetch_statistics``: the
``ActiveMQ.Statistics.*`` destinations ``minibroker stat`` and the web console
read), asked a few times a second by a ``Watcher`` on its own connection and
thread. Each snapshot is drawn by ``render`` (a pure function: a snapshot, the
lab's phases so far, the time) as ``stat`` draws it: the broker's memory, store
and temp percentages, blocked sends, each destination's depth and memory, and
any diagnosis, under a timeline of the run's phases. ``render`` takes any
snapshot, so another front end can draw the same feed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from clients.commands.stat import fetch_statistics, format_tables
from clients.stomp import StompClient, StompClientError

__all__ = ["Phases", "Watcher", "changes", "render", "CLEAR"]

#: Cursor home and clear screen: each frame replaces the last on a terminal.
CLEAR = "\x1b[H\x1b[2J"


class Phases:
    """The timeline of a run: what happened when (seconds since the run started)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self._items: list[tuple[float, str]] = []
        self._lock = threading.Lock()

    def add(self, text: str) -> None:
        with self._lock:
            self._items.append((time.monotonic() - self.started, text))

    def items(self) -> list[tuple[float, str]]:
        with self._lock:
            return list(self._items)

    def elapsed(self) -> float:
        return time.monotonic() - self.started


def render(
    title: str,
    stats: dict[str, Any] | None,
    phases: list[tuple[float, str]],
    elapsed: float,
    *,
    width: int = 160,
    last: int = 8,
) -> str:
    """One frame: the run's title and clock, its timeline (the ``last`` phases), the broker's statistics."""
    lines = [f"{title}   t={elapsed:.1f}s", "", "timeline:"]
    shown = phases[-last:]
    if len(phases) > len(shown):
        lines.append(f"  ... {len(phases) - len(shown)} earlier")
    lines += [f"  t={t:6.1f}s  {text}"[:width] for t, text in shown] or ["  (nothing yet)"]
    lines.append("")
    lines.append(format_tables(stats) if stats is not None else "(waiting for the broker's statistics)")
    return "\n".join(lines)


def changes(before: dict[str, Any] | None, after: dict[str, Any]) -> list[str]:
    """What happened between two snapshots, in words: the phases the feed itself shows
    (a destination appears, memory passes the 70% mark or fills, sends block or go on,
    consumers come and go, a diagnosis is made or cleared)."""
    said: list[str] = []
    b0 = before["broker"] if before else {}
    b1 = after["broker"]
    for mark in (70, 100):
        if b0.get("memoryPercentUsage", 0) < mark <= b1["memoryPercentUsage"]:
            said.append(f"broker memory reached {b1['memoryPercentUsage']}%")
    if b0.get("blockedProducers", 0) == 0 < b1["blockedProducers"]:
        said.append(f"{b1['blockedProducers']} send(s) blocked (producer flow control)")
    elif b0.get("blockedProducers", 0) > 0 == b1["blockedProducers"]:
        said.append("no send blocked any more")
    old = {d["destinationName"]: d for d in (before or {}).get("destinations", [])}
    for d in after["destinations"]:
        name = d["destinationName"]
        if name.endswith(".minibroker-stat"):
            continue
        if name not in old:
            said.append(f"{name} appears")
        elif old[name]["consumerCount"] != d["consumerCount"]:
            said.append(f"{name}: {old[name]['consumerCount']} -> {d['consumerCount']} consumer(s)")
    # A diagnosis is one pathology on one destination; its numbers change from one snapshot to the next.
    seen = {(f["pathology"], f["summary"].split(":", 1)[0]) for f in b0.get("diagnosis", [])}
    now = {(f["pathology"], f["summary"].split(":", 1)[0]): f for f in b1.get("diagnosis", [])}
    said += [f"DIAGNOSIS {f['pathology']}: {f['summary']}" for key, f in now.items() if key not in seen]
    said += [f"diagnosis cleared: {pathology} on {where}" for pathology, where in seen if (pathology, where) not in now]
    return said


class Watcher:
    """Asks a live broker for its statistics every ``interval`` s and writes a frame each time
    (``write``; None: none) and hands the snapshot to ``on_statistics``.

    ``broker`` is the run's ``LiveBroker`` (its port changes when it restarts: the
    watcher reconnects to wherever it is now)."""

    def __init__(
        self,
        broker: Any,
        title: str,
        phases: Phases,
        write: Callable[[str], None] | None,
        interval: float = 0.3,
        *,
        on_statistics: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.broker = broker
        #: Also given each snapshot (a live run's recording: ``clients.labs.recording``), or None.
        self.on_statistics = on_statistics
        self.title = title
        self.phases = phases
        self.write = write
        self.interval = interval
        self.frames = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), name="lab-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _port(self) -> int | None:
        server = getattr(self.broker, "server", None)
        return None if server is None else int(server.port)

    async def _main(self) -> None:
        client: StompClient | None = None
        previous: dict[str, Any] | None = None
        while not self._stop.is_set():
            try:
                if client is None:
                    port = self._port()
                    if port is None:
                        raise ConnectionError("the broker is between runs")
                    client = await StompClient.connect("127.0.0.1", port)
                stats: dict[str, Any] | None = await fetch_statistics(client, timeout=2.0)
            except (OSError, TimeoutError, StompClientError):
                if client is not None:
                    client.close()
                client, stats = None, None  # stopped or restarting: draw what is known, try again
            if stats is not None:
                for text in changes(previous, stats):
                    self.phases.add(text)
                previous = stats
                if self.on_statistics is not None:
                    self.on_statistics(stats)
            if self.write is not None:
                self.write(CLEAR + render(self.title, stats, self.phases.items(), self.phases.elapsed()) + "\n")
                self.frames += 1
            await asyncio.sleep(self.interval)
        if client is not None:
            client.close()
