"""``minibroker lab run NAME --live --console``: the lab's brokers serve the web console.

The command runs as a user runs it (a child process); the test reads the
address it prints, scrapes ``/metrics`` there while the lab runs and after, and
stops the command as a teacher does, with Ctrl-C.
"""

from __future__ import annotations

import contextlib
import json
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
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from prometheus_client.parser import text_string_to_metric_families

from browser_support import console_messages, start_chromium, wait_for

ROOT = Path(__file__).resolve().parents[2]


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


def _recording(page: Path) -> dict[str, Any]:
    """The replay document written into an exported page."""
    found = re.search(
        r'<script type="application/json" id="minibroker-recording">(.*?)</script>', page.read_text(), re.S
    )
    assert found is not None, "no recording in the exported page"
    return dict(json.loads(found[1]))


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


def test_a_live_lab_run_serves_the_console_and_keeps_it_until_ctrl_c(tmp_path: Path) -> None:
    """... and exports its runs as the broker's statistics showed them, to replay offline."""
    export = tmp_path / "live.html"
    child, lines = start_lab("01", "--live", "--console", "0", "--export", str(export))
    try:
        url = lines.wait_for(r"console: (http://127\.0\.0\.1:\d+/) \(open it now")[1]
        # While the lab runs, the console's /metrics shows the lab's own topic.
        deadline = time.monotonic() + 60
        while depth(scrape(url), "/topic/prices") is None:
            assert time.monotonic() < deadline, "the console never showed /topic/prices"
            assert child.poll() is None, "\n".join(lines.seen)
            time.sleep(0.05)
        lines.wait_for(r"Result: 3/3 verdicts as the lab promises")
        lines.wait_for(r"The replay, one file that plays offline: .*live\.html \(\d+ KiB\)")
        assert lines.seen[0].startswith("running the lab: 3 runs live (deadlock, limit-above-file, vm-cursor)")
        runs = _recording(export)["runs"]
        assert [r["name"] for r in runs] == ["deadlock", "limit-above-file", "vm-cursor"]
        for run in runs:  # sampled as it ran, the lab's evidence lines at their moments
            # Several samples, in order, the last near the run's end (a cure run may take a second).
            assert len(run["t"]) >= 3 and run["t"] == sorted(run["t"]), run["name"]
            assert run["t"][-1] >= run["duration"] / 2, run["name"]
            assert any(e["kind"] == "evidence" for e in run["events"]), run["name"]
            assert "/topic/prices" in run["destinations"], run["name"]
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


def test_a_virtual_lab_run_replays_its_runs_in_the_console(tmp_path: Path) -> None:
    with lab_in_browser(tmp_path, "01", "--console", "0", "--speed", "4") as (child, lines, driver):
        # Said at once, before the runs (which take a while).
        assert lines.wait_for(r"^running the lab: ", timeout=30).string.startswith(
            "running the lab: 3 runs on the virtual clock (deadlock, limit-above-file, vm-cursor); then the console"
        )
        assert not any("verdict" in line for line in lines.seen)
        lines.wait_for(r"Result: 3/3 verdicts as the lab promises")
        url = lines.wait_for(r"console: (http://127\.0\.0\.1:\d+/) \(open it now")[1]
        lines.wait_for(r"now showing the replay \(3 runs")
        driver.get(url)
        # The player above the charts: the lab's three runs, in order, each with its verdict.
        phases = wait_for(
            driver,
            "const t = document.getElementById('player');"
            "return t && !t.hidden && [...t.querySelectorAll('.phase.run')].map(p => [p.dataset.phase, p.dataset.verdict])",
            "the player's track",
        )
        assert phases == [["deadlock", "pathology"], ["limit-above-file", "healthy"], ["vm-cursor", "healthy"]]
        assert driver.execute_script(
            "const t = document.getElementById('player'), c = document.querySelector('.charts');"
            "return t.getBoundingClientRect().bottom <= c.getBoundingClientRect().top"
        )
        assert driver.execute_script("return document.getElementById('replay-speed').value") == "4"
        # The page plays: the depth figure moves; no operation offered on a recording.
        held = "return document.querySelector('[data-figure=\"messages held\"] .v')?.textContent"
        first = wait_for(driver, held, "the messages held")
        wait_for(driver, held + f" !== {first!r} && " + held[len("return ") :], "a depth that changes")
        wait_for(
            driver,
            "return document.querySelector('#destinations tr[data-destination=\"/topic/prices\"]')",
            "the lab's topic in the destinations table",
        )
        assert not driver.execute_script("return document.querySelectorAll('#destinations button').length")
        assert driver.execute_script("return document.getElementById('nav-connections').hidden")
        driver.save_screenshot(str(tmp_path / "replay.png"))


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
