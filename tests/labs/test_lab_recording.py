"""A lab run recorded for the console's player, its replay served to pages, and its export.

The recording is the broker's own statistics sampled on the virtual clock; these
tests check it against the run's trace, check the moments Step stops on, what the
console's broker answers while it serves a replay, how long ``--console-hold`` keeps
it, and ``lab run --export`` end to end on a small lab of the tests' own.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from clients.labs import load_lab
from clients.labs.console import LabConsole
from clients.labs.recording import RunRecorder, RunRecording, changes_worth_seeing
from clients.labs.replay import RecordedReplay
from minibroker.config import BrokerConfig
from minibroker.edge import VirtualNetwork
from minibroker.ops import STATISTICS_PREFIX

ROOT = Path(__file__).resolve().parents[2]

#: A lab of the tests' own: a queue filled for two seconds, then drained by a consumer.
SCENARIO = """
from clients.labs import Outcome


def run(lab):
    net = lab.network()
    producer = net.connected_client("producer")
    consumer = net.connected_client("consumer")
    net.every(0.1, lambda: producer.send("/queue/work", "x" * 100, persistent="true"), until=2.05)
    net.advance(2.5)
    lab.note("20 messages wait on /queue/work</script>, no consumer yet")
    consumer.subscribe("/queue/work")
    net.advance(1.0)
    lab.note(f"the consumer took {len(consumer.messages())}")
    return Outcome(lab.name == "held", f"{lab.name}: done")
"""


def small_lab(directory: Path) -> Path:
    """Write the tests' lab under ``directory``; its path."""
    lab = directory / "09-small"
    lab.mkdir(parents=True)
    (lab / "broker.toml").write_text("")
    (lab / "scenario.py").write_text(SCENARIO)
    (lab / "lab.toml").write_text(
        textwrap.dedent(
            """
            name = "small"
            title = "A queue filled, then drained"
            source = "destination-limits"
            [[run]]
            name = "held"
            config = "broker.toml"
            expect = "pathology"
            about = "the messages wait"
            [[run]]
            name = "drained"
            config = "broker.toml"
            expect = "healthy"
            about = "the consumer takes them"
            """
        )
    )
    return lab


def _figure(sample: list[dict[str, Any]], dest: str, key: str) -> Any:
    return next(d[key] for d in sample if d["destinationName"] == dest)


def test_the_recorded_figures_are_the_traces_at_each_sample() -> None:
    """Each sample's counts are those of the trace's events up to the sample's time."""
    net = VirtualNetwork(BrokerConfig(), trace=True)
    recording = RunRecording("run")
    RunRecorder(recording).attach(net)
    producer = net.connected_client("producer")
    consumer = net.connected_client("consumer")
    # (off the samples' instants: a sample and an event at one instant are in either order)
    net.every(0.23, lambda: producer.send("/queue/A", "body"), start=0.03, until=3.0)
    net.at(1.53, lambda: consumer.subscribe("/queue/A", "s", "client-individual"))
    acked: list[Any] = []

    def ack_one() -> None:
        waiting = consumer.messages()[len(acked) :]
        if waiting:
            consumer.ack(waiting[0])
            acked.append(waiting[0])

    net.every(0.47, ack_one, start=2.03)
    net.advance(4.0)
    events = net.trace.events()
    assert len(recording.times) >= 40
    checked = 0
    for t, broker, dests in zip(recording.times, recording.brokers, recording.destinations, strict=True):
        upto = [e for e in events if e["ts"] <= t + 1e-9]
        enqueued = sum(e["event"] == "enqueue" and e.get("dest") == "/queue/A" for e in upto)
        acked = sum(e["event"] == "ack" and e.get("dest") == "/queue/A" for e in upto)
        if not enqueued:
            continue
        assert _figure(dests, "/queue/A", "enqueueCount") == enqueued, t
        assert _figure(dests, "/queue/A", "dequeueCount") == acked, t
        assert broker["size"] == enqueued - acked, t
        checked += 1
    assert checked > 30
    net.stop()


def test_step_stops_at_a_mark_once_at_blocks_and_at_each_diagnosis() -> None:
    low = {"memoryPercentUsage": 10, "blockedProducers": 0, "diagnosis": []}
    finding = {"pathology": "starving-consumers", "destination": "/queue/A", "summary": "A starved"}
    high = {"memoryPercentUsage": 105, "blockedProducers": 2, "diagnosis": [finding]}
    assert changes_worth_seeing(low, high) == [
        ("usage", "broker memory reached 105% (past the 100% mark)"),
        ("blocked", "producer flow control: 2 send(s) blocked"),
        ("diagnosis", "diagnosis: A starved"),
    ]
    assert changes_worth_seeing(high, low) == [
        ("usage", "broker memory back under the 70% mark (10%)"),
        ("released", "no send blocked any more"),
        ("cleared", "diagnosis cleared: starving-consumers on /queue/A"),
    ]
    assert changes_worth_seeing(high, {**high, "diagnosis": [{**finding, "summary": "A starved, more"}]}) == []


def test_a_recording_packs_what_never_changes_as_one_value() -> None:
    recording = RunRecording("run", "about it", "healthy")
    for t, size in ((0.0, 0), (0.1, 3), (0.2, 3)):
        broker = {"size": size, "memoryLimit": 1024, "diagnosis": []}
        recording.add(t, broker, [{"destinationName": "/queue/A", "kind": "queue", "size": size}] if size else [])
    packed = recording.as_json()
    assert packed["broker"]["size"] == [0, 3, 3]
    assert packed["broker"]["memoryLimit"] == {"all": 1024}
    assert packed["destinations"]["/queue/A"]["present"] == [False, True, True]
    assert packed["destinations"]["/queue/A"]["kind"] == [None, "queue", "queue"]
    assert packed["events"] == [{"t": 0.0, "sample": 0, "kind": "run", "text": "run run starts: about it"}]


def _replay(tmp_path: Path, clock: Any) -> RecordedReplay:
    lab = load_lab(small_lab(tmp_path))
    recordings = []
    for duration in (2.0, 4.0):
        r = RunRecording(f"run-{duration:g}", verdict="healthy")
        for t in (0.0, duration):
            r.add(t, {"size": int(t), "diagnosis": []}, [{"destinationName": "/queue/work", "size": int(t)}])
        recordings.append(r)
    return RecordedReplay(lab, recordings, 2.0, clock=clock)


def test_the_console_serves_the_recordings_and_what_the_lab_left_behind(tmp_path: Path) -> None:
    replay = _replay(tmp_path, lambda: 0.0)
    (broker,) = replay.answer(None, STATISTICS_PREFIX + "Broker") or []
    assert broker["replay"] == {"lab": replay.document["lab"], "speed": 2.0, "runs": 2}
    assert broker["size"] == 4  # the last run's last sample
    assert [d["size"] for d in replay.answer(None, STATISTICS_PREFIX + "Destination.work") or []] == [4]
    assert replay.answer(None, STATISTICS_PREFIX + "Destination.other") == []
    runs = replay.answer(None, STATISTICS_PREFIX + "Replay") or []
    assert [r["name"] for r in runs] == ["run-2", "run-4"]
    assert replay.answer(None, STATISTICS_PREFIX + "Nothing") is None


def test_console_hold_counts_from_the_replays_end_as_the_first_page_plays_it(tmp_path: Path) -> None:
    now = [100.0]
    replay = _replay(tmp_path, lambda: now[0])
    console = LabConsole(0, out=lambda line: None)
    console._replay = replay
    # No page yet: as if one opened when the hold began (6 lab seconds at 2x: 3 s).
    assert console._deadline(5.0, since=50.0) == 50.0 + 3.0 + 5.0
    now[0] = 120.0
    replay.answer(None, STATISTICS_PREFIX + "Replay")  # a page opens and asks for the runs
    assert console._deadline(5.0, since=50.0) == 120.0 + 3.0 + 5.0
    now[0] = 130.0
    replay.answer(None, STATISTICS_PREFIX + "Replay")  # a second page changes nothing
    assert console._deadline(5.0, since=50.0) == 128.0


def test_lab_run_export_says_what_it_does_first_and_writes_one_file(tmp_path: Path) -> None:
    small_lab(tmp_path / "labs")
    out = tmp_path / "small.html"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "clients.cli",
            "lab",
            "run",
            "09",
            "--labs",
            str(tmp_path / "labs"),
            "--export",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[
        0
    ] == "running the lab: 2 runs on the virtual clock (held, drained); then the replay is written to " + str(out)
    assert re.search(rf"The replay, one file that plays offline: {re.escape(str(out))} \(\d+ KiB\)", result.stdout)
    page = out.read_text()
    assert out.stat().st_size < 2 * 1024 * 1024
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    assert not re.search(r'<(script|link)[^>]+(src|href)="(?!data:)', page), "the file loads something from elsewhere"
    found = re.search(r'<script type="application/json" id="minibroker-recording">(.*?)</script>', page, re.S)
    assert found is not None
    document = json.loads(found[1])
    assert [(r["name"], r["verdict"]) for r in document["runs"]] == [("held", "pathology"), ("drained", "healthy")]
    evidence = [e["text"] for e in document["runs"][0]["events"] if e["kind"] == "evidence"]
    assert evidence == ["20 messages wait on /queue/work</script>, no consumer yet", "the consumer took 20"]


def test_export_is_refused_before_the_lab_runs(tmp_path: Path) -> None:
    for args, words in ((["--export", str(tmp_path / "nowhere" / "x.html")], "no directory"),):
        result = subprocess.run(
            [sys.executable, "-m", "clients.cli", "lab", "run", "01", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode != 0 and words in result.stderr, result.stderr
        assert "running the lab" not in result.stdout
