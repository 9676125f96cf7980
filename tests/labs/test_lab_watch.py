"""``lab run --live --watch``: the frames drawn from the broker's statistics while a run goes.

The renderer and the phase finder are fed snapshots (the shape ``fetch_statistics``
returns); one live run of lab 00 is watched end to end, its frames collected."""

from __future__ import annotations

import dataclasses
from typing import Any

from clients.labs import find_labs, run_lab
from clients.labs.watch import CLEAR, changes, render


def _snapshot(memory: int, blocked: int, b_consumers: int, diagnosis: list[dict[str, str]]) -> dict[str, Any]:
    broker = {
        "brokerName": "localhost",
        "memoryPercentUsage": memory,
        "memoryUsage": memory * 1024,
        "memoryLimit": 100 * 1024,
        "storePercentUsage": 0,
        "storeUsage": 0,
        "storeLimit": 1 << 30,
        "tempPercentUsage": 0,
        "tempUsage": 0,
        "tempLimit": 1 << 30,
        "connectionCount": 3,
        "destinationCount": 2,
        "blockedProducers": blocked,
        "size": 60,
        "diagnosis": diagnosis,
    }
    dest = {
        "destinationName": "/queue/B.1",
        "size": 60,
        "enqueueCount": 60,
        "dequeueCount": 0,
        "consumerCount": b_consumers,
        "cachedCount": 40,
        "storeOnlyCount": 20,
        "memoryPercentUsage": memory,
        "memoryUsage": memory * 1024,
    }
    return {"broker": broker, "destinations": [dest]}


STARVED = {
    "pathology": "starving-consumers",
    "summary": "/queue/A: 1 consumer(s) starved: 50 messages in the store",
    "cure": "set a memory_limit",
}


def test_the_phases_are_what_changed_between_snapshots() -> None:
    first = _snapshot(10, 0, 0, [])
    assert changes(None, first) == ["/queue/B.1 appears"]
    full = _snapshot(71, 1, 1, [STARVED])
    assert changes(first, full) == [
        "broker memory reached 71%",
        "1 send(s) blocked (producer flow control)",
        "/queue/B.1: 0 -> 1 consumer(s)",
        "DIAGNOSIS starving-consumers: " + STARVED["summary"],
    ]
    # the same diagnosis with other numbers is not news; its end is
    again = _snapshot(72, 1, 1, [dict(STARVED, summary="/queue/A: 1 consumer(s) starved: 49 messages in the store")])
    assert changes(full, again) == []
    assert changes(again, _snapshot(40, 0, 1, [])) == [
        "no send blocked any more",
        "diagnosis cleared: starving-consumers on /queue/A",
    ]


def test_a_frame_shows_the_timeline_and_the_stat_view() -> None:
    phases = [(float(i), f"phase {i}") for i in range(12)]
    frame = render("Lab 00: run x (live)", _snapshot(71, 1, 0, [STARVED]), phases, 12.34)
    lines = frame.splitlines()
    assert lines[0] == "Lab 00: run x (live)   t=12.3s"
    assert "  ... 4 earlier" in lines and "  t=   4.0s  phase 4" in lines and "  t=  11.0s  phase 11" in lines
    assert "phase 3" not in frame
    assert "memory 71%" in frame and "1 blocked send;" in frame
    assert any(line.startswith("/queue/B.1") and line.split()[-3] == "71" for line in lines)  # its mem%
    assert "DIAGNOSIS starving-consumers: /queue/A: 1 consumer(s) starved" in frame
    assert "(waiting for the broker's statistics)" in render("t", None, [], 0.0)


def test_a_live_run_is_watched_while_it_goes() -> None:
    lab = next(lab for lab in find_labs() if lab.number == "00")
    legacy = dataclasses.replace(lab, runs=tuple(s for s in lab.runs if s.name == "restart-legacy"))
    frames: list[str] = []
    results = run_lab(legacy, live=True, out=lambda line: None, watch=frames.append)
    assert results[0].as_promised
    assert frames and all(f.startswith(CLEAR) for f in frames)
    drawn = [f for f in frames if "/queue/B.1" in f]
    assert drawn, "no frame showed the backlog"
    seen = "".join(frames)
    assert "broker started on port" in seen and "broker restarted on the same data" in seen  # the timeline
    assert "DIAGNOSIS starving-consumers: /queue/A" in "".join(drawn)  # seen while A's consumer waited
    clocks = [float(f.split("t=", 1)[1].split("s", 1)[0]) for f in frames]
    assert clocks == sorted(clocks) and clocks[-1] > clocks[0]  # refreshed while the run went
