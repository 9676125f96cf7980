"""``minibroker lab run NAME --live --console``: the lab's brokers serve the web console.

The command runs as a user runs it (a child process); the test reads the
address it prints, scrapes ``/metrics`` there while the lab runs and after, and
stops the command as a teacher does, with Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Any, Iterator

from prometheus_client.parser import text_string_to_metric_families

from browser_support import console_messages, start_chromium, wait_for

ROOT = Path(__file__).resolve().parent.parent


class Lines:
    """A child's output, line by line, read on a thread so waits can have deadlines."""

    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, pattern: str, timeout: float = 120.0) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        for line in self.seen:
            if found := re.search(pattern, line):
                return found
        while True:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"no line matching {pattern!r} in:\n" + "\n".join(self.seen)
            try:
                line = self._queue.get(timeout=remaining)
            except queue.Empty:
                continue
            assert line is not None, f"the command ended before a line matching {pattern!r}:\n" + "\n".join(self.seen)
            self.seen.append(line)
            if found := re.search(pattern, line):
                return found


def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """``/metrics`` parsed by prometheus_client: sample name -> labels -> value ({} when refused)."""
    try:
        with urllib.request.urlopen(url + "metrics", timeout=5) as response:
            text = response.read().decode()
    except (urllib.error.URLError, ConnectionError):
        return {}
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def depth(samples: dict, destination: str) -> float | None:
    for labels, value in samples.get("minibroker_destination_size", {}).items():
        if ("destination", destination) in labels:
            return value
    return None


def start_lab(*args: str) -> tuple[subprocess.Popen[str], Lines]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    child = subprocess.Popen(
        [sys.executable, "-m", "clients.cli", "lab", "run", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return child, Lines(child.stdout)  # type: ignore[arg-type]


@contextlib.contextmanager
def lab_in_browser(tmp_path: Path, *args: str) -> Iterator[tuple[subprocess.Popen[str], Lines, Any]]:
    """``lab run ARGS`` and a headless Chromium; at the end the page logged no error and
    Ctrl-C ends the command (exit 0); the screenshot, if any, stays under ``tmp_path``."""
    child, lines = start_lab(*args)
    driver = None
    try:
        driver = start_chromium(tmp_path / "profile")
        yield child, lines, driver
        assert not [m for m in console_messages(driver) if m["level"] == "SEVERE"]
        child.send_signal(signal.SIGINT)
        assert child.wait(30) == 0
    finally:
        if driver is not None:
            driver.quit()
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_live_lab_run_serves_the_console_and_keeps_it_until_ctrl_c() -> None:
    child, lines = start_lab("01", "--live", "--console", "0")
    try:
        url = lines.wait_for(r"console: (http://127\.0\.0\.1:\d+/) \(open it now")[1]
        # While the lab runs, the console's /metrics shows the lab's own topic.
        deadline = time.monotonic() + 60
        while depth(scrape(url), "/topic/prices") is None:
            assert time.monotonic() < deadline, "the console never showed /topic/prices"
            assert child.poll() is None, "\n".join(lines.seen)
            time.sleep(0.05)
        lines.wait_for(r"Result: 3/3 verdicts as the lab promises")
        lines.wait_for(r"keeps serving the vm-cursor run; Ctrl-C to stop")
        # After the verdicts the last run's broker still serves the console, as the run left it.
        assert depth(scrape(url), "/topic/prices") is not None
        child.send_signal(signal.SIGINT)
        assert child.wait(30) == 0
        assert scrape(url) == {}, "the console still answers after Ctrl-C"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_ctrl_c_as_the_invitation_shows_stops_the_kept_broker_as_later(tmp_path: Path) -> None:
    """A Ctrl-C that lands the moment "Ctrl-C to stop" is printed is the stop it invites:
    the kept broker is stopped and its run's directory removed, and no KeyboardInterrupt
    escapes (the command would exit 130 instead of 0)."""
    from clients.labs.console import LabConsole

    class Kept:
        stopped = False

        def stop(self) -> None:
            self.stopped = True

    def out(line: str) -> None:
        if "Ctrl-C to stop" in line:
            raise KeyboardInterrupt  # the signal, delivered as the line is written

    console = LabConsole(0, out=out)
    console.port = 8161
    kept, workdir = Kept(), tmp_path / "run"
    workdir.mkdir()
    console.keep(kept, workdir)
    console.hold(None)
    assert kept.stopped and not workdir.exists()


def test_console_options_are_checked() -> None:
    for args, words in (
        (["01", "--live", "--console", "--speed", "2"], "--speed is for the replay"),
        (["01", "--live", "--console-hold", "1"], "need --console"),
        (["01", "--live", "--console", "http"], "not a port number"),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "clients.cli", "lab", "run", *args],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert result.returncode != 0
        assert words in result.stderr + result.stdout


def test_a_virtual_lab_run_replays_its_traces_in_the_console(tmp_path: Path) -> None:
    with lab_in_browser(tmp_path, "01", "--console", "0", "--speed", "4") as (child, lines, driver):
        lines.wait_for(r"Result: 3/3 verdicts as the lab promises")
        url = lines.wait_for(r"console: (http://127\.0\.0\.1:\d+/) \(open it now")[1]
        lines.wait_for(r"now showing the replay \(3 runs")
        driver.get(url)
        # The phase track: the lab's three runs, in order, above the charts.
        phases = wait_for(
            driver,
            "const t = document.getElementById('timeline');"
            "return t && !t.hidden && [...t.querySelectorAll('.phase.run')].map(p => p.dataset.phase)",
            "the phase track",
        )
        assert phases == ["deadlock", "limit-above-file", "vm-cursor"]
        assert driver.execute_script(
            "const t = document.getElementById('timeline'), c = document.querySelector('.charts');"
            "return t.getBoundingClientRect().bottom <= c.getBoundingClientRect().top"
        )
        # The same statistics path as a live broker: the page's depth figure moves as the replay plays.
        held = "return document.querySelector('[data-figure=\"messages held\"] .v')?.textContent"
        first = wait_for(driver, held, "the messages held")
        wait_for(driver, held + f" !== {first!r} && " + held[len("return ") :], "a depth that changes")
        wait_for(
            driver,
            "return document.querySelector('#destinations tr[data-destination=\"/topic/prices\"]')",
            "the lab's topic in the destinations table",
        )
        driver.save_screenshot(str(tmp_path / "replay.png"))


def test_the_replay_rebuilds_the_statistics_from_a_trace() -> None:
    """A hand-made trace: a queue filled and half drained, a topic fanned out to two
    subscriptions, a producer held twice in a row; the answers at chosen moments."""
    from clients.labs.replay import ReplayedRun, TraceReplay
    from minibroker.config import BrokerConfig

    def ev(ts: float, event: str, **fields: object) -> dict:
        return {"ts": ts, "event": event, **fields}

    first = [
        ev(0, "connect", session="1"),
        *[
            ev(1 + i / 10, "enqueue", dest="/queue/A", msg=f"m{i}", size=100, persistent=True, priority=4, cached=i < 6)
            for i in range(10)
        ],
        ev(2.5, "usage", mem_pct=40, store_pct=1, temp_pct=0),
        ev(3, "flow_block", session="1", dest="/queue/A", usage="memory", pct=100),
        ev(3.5, "flow_unblock", session="1", dest="/queue/A", usage="memory", pct=60),
        ev(3.6, "flow_block", session="1", dest="/queue/A", usage="memory", pct=100),
        ev(4, "flow_unblock", session="1", dest="/queue/A", usage="memory", pct=60),
        *[ev(5, "dispatch", session="1", sub="s", dest="/queue/A", msg=f"m{i}", size=100) for i in range(5)],
        *[ev(6, "ack", session="1", sub="s", dest="/queue/A", msg=f"m{i}") for i in range(4)],
        ev(10, "disconnect", session="1", reason="client"),
    ]
    second = [
        ev(100, "subscribe", session="2", sub="a", dest="/topic/T", ack="auto", prefetch=1),
        ev(100, "subscribe", session="3", sub="b", dest="/topic/T", ack="auto", prefetch=1),
        ev(101, "send", session="4", dest="/topic/T", msg="t1", size=10, persistent=False, priority=4),
        ev(102, "dispatch", session="2", sub="a", dest="/topic/T", msg="t1", size=10),
        ev(104, "ack", session="2", sub="a", dest="/topic/T", msg="t1"),
    ]
    now = [0.0]
    replay = TraceReplay(
        [
            ReplayedRun("legacy", "pathology", first, BrokerConfig()),
            ReplayedRun("cure", "healthy", second, BrokerConfig()),
        ],
        2.0,
        clock=lambda: now[0],
    )

    def at(seconds: float, what: str) -> list[dict]:
        now[0] = 7.0 + seconds / 2.0  # the page opens 7 s after the replay is made; speed 2
        return replay.answer(None, "/queue/ActiveMQ.Statistics." + what) or []

    assert at(0, "Broker")[0]["replay"]["position"] == 0.0  # the replay starts with the first request
    (a,) = at(2.5, "Destination.>")
    assert (a["size"], a["inflightCount"], a["storeOnlyCount"], a["enqueueRate"]) == (10, 0, 4, 2.0)
    (broker,) = at(3.2, "Broker")
    assert (broker["memoryPercentUsage"], broker["blockedProducers"], broker["connectionCount"]) == (40, 1, 1)
    assert broker["replay"]["run"] == "legacy"
    (a,) = at(6.5, "Destination.A")
    assert (a["size"], a["readyCount"], a["inflightCount"], a["dequeueCount"]) == (6, 5, 1, 4)
    # The second run starts a second after the first's end, on a fresh broker.
    (t,) = at(10 + 1 + 1.5, "Destination.>")
    assert (t["destinationName"], t["size"], t["pendingCount"], t["consumerCount"]) == ("/topic/T", 2, 2, 2)
    (t,) = at(10 + 1 + 4.5, "Destination.>")
    assert (t["size"], t["pendingCount"], t["inflightCount"]) == (1, 1, 0)
    assert at(10 + 1 + 4.5, "Connection") == []
    # The phases: the runs end to end, the two holds of the producer 0.1 s apart drawn as one window.
    phases = [(p["kind"], p["name"], p["start"], p["end"]) for p in replay.phases]
    assert phases == [
        ("run", "legacy", 0.0, 10.0),
        ("blocked", "producer blocked", 3.0, 4.0),
        ("run", "cure", 11.0, 15.0),
    ]
    # It stops at the end.
    assert at(1000, "Broker")[0]["replay"]["position"] == 15.0


def test_the_console_of_a_live_run_draws_the_runs_timeline(tmp_path: Path) -> None:
    with lab_in_browser(tmp_path, "01", "--live", "--console", "0") as (child, lines, driver):
        url = lines.wait_for(r"console: (http://127\.0\.0\.1:\d+/) \(open it now")[1]
        driver.get(url)
        # The run's timeline above the charts: which run, and what happened in it so far.
        run = wait_for(
            driver,
            "const t = document.getElementById('lab-timeline');"
            "return t && !t.hidden && t.querySelector('.tick[data-event^=\"broker started on port\"]')"
            " && t.querySelector('b').textContent",
            "the run's timeline",
            timeout=60,
        )
        assert run.startswith("Lab run: ")
        wait_for(
            driver,
            "return document.querySelector('#destinations tr[data-destination=\"/topic/prices\"]')",
            "the lab's topic in the destinations table",
            timeout=60,
        )
        assert driver.execute_script(
            "const t = document.getElementById('lab-timeline'), c = document.querySelector('.charts');"
            "return t.getBoundingClientRect().bottom <= c.getBoundingClientRect().top"
        )
        lines.wait_for(r"keeps serving the vm-cursor run; Ctrl-C to stop")
        wait_for(
            driver,
            "return document.querySelector('#lab-timeline b')?.textContent === 'Lab run: vm-cursor'"
            " && document.querySelectorAll('#lab-timeline .tick').length > 1",
            "the last run's timeline",
        )
        driver.save_screenshot(str(tmp_path / "live.png"))
