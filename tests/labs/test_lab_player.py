"""The lab player in a real headless Chromium: a lab's recorded runs played by the page.

Lab 01 is run once, recorded, and played two ways: served by the console of a real
broker (each page with its own clock), and as the file ``lab run --export`` writes,
opened from ``file://`` with the browser offline. One Chromium serves the module.
Screenshots stay in the tests' temporary directory.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.keys import Keys

from browser_support import console_messages, start_chromium, wait_for, wait_until
from clients.labs import RunResult, find_labs, run_lab
from clients.labs.console import LabConsole
from clients.labs.export import write_export
from clients.labs.replay import RecordedReplay, replay_document
from minibroker.edge.console.vendor import check as vendored_problems

#: One page's player: where it is and what it shows.
PLAYER = "const p = document.getElementById('player'); return p && !p.hidden && {...p.dataset};"
#: The player, once it is playing (or paused).
PLAYING = "const p = document.getElementById('player'); return p && !p.hidden && p.dataset.playing === 'true';"
PAUSED = "const p = document.getElementById('player'); return p && !p.hidden && p.dataset.playing === 'false';"


@pytest.fixture(scope="module")
def lab() -> Any:
    return next(lab for lab in find_labs() if lab.number == "01")


@pytest.fixture(scope="module")
def results(lab: Any) -> list[RunResult]:
    return run_lab(lab, record=True, out=lambda line: None)


@pytest.fixture(scope="module")
def document(lab: Any, results: list[RunResult]) -> dict[str, Any]:
    return replay_document(lab, [r.recording for r in results if r.recording is not None], 1.0)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    problems = vendored_problems()
    if problems:
        pytest.fail("the console's libraries are not vendored: " + "; ".join(problems))
    driver = start_chromium(tmp_path_factory.mktemp("profile"))
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def served(lab: Any, results: list[RunResult], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The console of a real broker serving the replay; its address."""
    console = LabConsole(0, out=lambda line: None)
    recordings = [r.recording for r in results if r.recording is not None]
    console.replay(RecordedReplay(lab, recordings, 1.0), tmp_path_factory.mktemp("replay"))
    assert console.url is not None
    yield console.url
    console.release()


@pytest.fixture(scope="module")
def exported(document: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("export") / "lab-01.html"
    write_export(document, path)
    return path


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """The module's browser, online, its console log emptied; no error logged by the test's pages."""
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
    )
    console_messages(browser)
    yield browser
    assert not [m for m in console_messages(browser) if m["level"] == "SEVERE"]


def control(driver: Any, name: str) -> None:
    """Click the player's control whose accessible name is ``name``."""
    buttons = [b for b in driver.find_elements("css selector", "#player button") if b.accessible_name == name]
    assert len(buttons) == 1, f"no one control named {name!r}"
    buttons[0].click()


def position(driver: Any) -> float:
    return float(wait_for(driver, PLAYER, "the player")["position"])


def test_pause_freezes_the_position(page: Any, served: str, tmp_path: Path) -> None:
    page.get(served)
    wait_until(lambda: position(page) > 0.5, "the replay playing")
    speeds = page.execute_script(
        "return [...document.querySelector('select[aria-label=Speed]').options].map(o => o.textContent)"
    )
    assert speeds == ["0.25×", "0.5×", "1×", "2×", "4×", "8×", "16×"]
    control(page, "Pause")
    wait_for(page, PAUSED, "the pause")
    first = position(page)
    time.sleep(1.0)  # what is asserted: nothing moves in a second
    assert position(page) == first
    page.save_screenshot(str(tmp_path / "paused.png"))
    control(page, "Play")
    wait_until(lambda: position(page) > first, "the replay playing again")


def test_a_second_page_starts_at_the_beginning(page: Any, served: str) -> None:
    page.get(served)
    wait_until(lambda: position(page) > 2.0, "the first page's replay 2 lab seconds in")
    first = page.current_window_handle
    page.switch_to.new_window("tab")
    try:
        page.get(served)
        second = position(page)
        assert second < 2.0, "the second page did not start at the beginning"
        page.switch_to.window(first)
        assert position(page) > second
    finally:
        page.switch_to.window(first)
        for handle in page.window_handles:
            if handle != first:
                page.switch_to.window(handle)
                page.close()
        page.switch_to.window(first)


def test_step_goes_to_the_next_event_and_shows_its_evidence(
    page: Any, exported: Path, document: dict[str, Any], tmp_path: Path
) -> None:
    page.get(exported.as_uri())
    wait_for(page, PLAYER, "the player")
    control(page, "Pause")
    control(page, "Restart")
    run = document["runs"][0]
    # Each Step goes to the next event of the run, in order, and the page lists it as the current one.
    for event in run["events"][:6]:
        control(page, "Step")
        shown = wait_for(
            page,
            "const li = document.querySelector('#replay-events li.current'); return li && li.textContent",
            "the event stepped to",
        )
        assert event["text"] in shown
        where = wait_for(page, PLAYER, "the player")
        assert (float(where["position"]), int(where["sample"])) == (event["t"], event["sample"])
        if event["kind"] == "evidence":
            page.save_screenshot(str(tmp_path / "stepped-to-evidence.png"))
    assert "evidence" in [e["kind"] for e in run["events"][:6]]
    # Step back returns to the one before; the keys do as the buttons.
    control(page, "Step back")
    shown = page.execute_script("return document.querySelector('#replay-events li.current').textContent")
    assert run["events"][4]["text"] in shown
    page.find_element("css selector", "body").send_keys(Keys.ARROW_RIGHT)
    wait_for(
        page,
        "return (document.querySelector('#replay-events li.current')?.textContent || '')"
        f".includes({json.dumps(run['events'][5]['text'])})",
        "the next event, by its key",
    )


def _at(column: Any, i: int) -> Any:
    return column["all"] if isinstance(column, dict) else column[i]


def test_scrubbing_to_a_time_shows_the_recorded_state_then(page: Any, exported: Path, document: dict[str, Any]) -> None:
    page.get(exported.as_uri())
    wait_for(page, PLAYER, "the player")
    control(page, "Pause")
    first, second = document["runs"][0], document["runs"][1]
    start = first["duration"] + 1.0  # the second run starts a gap after the first's end
    for local in (3.05, 12.35, 41.0):
        page.execute_script(
            "const s = document.querySelector('input[aria-label=Position]');"
            "s.value = arguments[0]; s.dispatchEvent(new Event('input'));",
            start + local,
        )
        i = max(k for k, t in enumerate(second["t"]) if t <= local + 1e-9)
        prices = second["destinations"]["/topic/prices"]
        expected = {
            "run": second["name"],
            "held": f"{_at(second['broker']['size'], i):,}",
            "size": f"{_at(prices['size'], i):,}",
            "consumers": f"{_at(prices['consumerCount'], i):,}",
        }
        shown = wait_for(
            page,
            "const row = document.querySelector('#destinations tr[data-destination=\"/topic/prices\"]');"
            "return row && {run: document.getElementById('player').dataset.run,"
            " held: document.querySelector('[data-figure=\"messages held\"] .v').textContent,"
            " size: row.querySelector('[data-key=size]').textContent,"
            " consumers: row.querySelector('[data-key=consumerCount]').textContent};",
            "the destinations at the scrubbed time",
        )
        assert shown == expected, local


def test_the_exported_file_plays_offline_with_the_same_destinations_and_grades(
    page: Any, exported: Path, document: dict[str, Any], tmp_path: Path
) -> None:
    assert exported.stat().st_size < 2 * 1024 * 1024
    page.execute_cdp_cmd(
        "Network.emulateNetworkConditions",
        {"offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0},
    )
    page.get(exported.as_uri())
    wait_for(page, PLAYING, "the replay playing")
    grades = page.execute_script(
        "return [...document.querySelectorAll('#replay-track .phase.run')].map(p => [p.dataset.phase, p.dataset.verdict])"
    )
    assert grades == [[r["name"], r["verdict"]] for r in document["runs"]]
    control(page, "Pause")
    wait_for(page, PAUSED, "the pause")
    # Every run plays: its end shows its destinations and its verdict.
    start = 0.0
    for run in document["runs"]:
        page.execute_script(
            "const s = document.querySelector('input[aria-label=Position]');"
            "s.value = arguments[0]; s.dispatchEvent(new Event('input'));",
            start + run["duration"] + 0.5,
        )
        start += run["duration"] + 1.0
        assert wait_for(page, PLAYER, "the player")["run"] == run["name"]
        names = page.execute_script(
            "return [...document.querySelectorAll('#destinations tbody tr')].map(r => r.dataset.destination)"
        )
        assert names == sorted(n for n, d in run["destinations"].items() if _at(d["present"], len(run["t"]) - 1))
        verdict = page.execute_script("return document.querySelector('#replay-about .grade').textContent")
        assert verdict.startswith(f"verdict: {run['verdict'].upper()}")
        page.save_screenshot(str(tmp_path / f"export-{run['name']}.png"))


def test_the_state_a_run_leaves_is_taken_before_its_broker_stops(results: list[RunResult]) -> None:
    """The last sample is the run's end, its subscribers still there (a broker that stopped
    has none, while its rates still count the last five seconds)."""
    for result in results:
        recording = result.recording
        assert recording is not None
        (prices,) = [d for d in recording.destinations[-1] if d["destinationName"] == "/topic/prices"]
        assert prices["consumerCount"] == 4, result.spec.name
        assert recording.brokers[-1]["connectionCount"] >= 5, result.spec.name


def test_a_verdict_of_another_name_is_shown_as_it_is(page: Any, document: dict[str, Any], tmp_path: Path) -> None:
    """A run's verdict is shown as the run gives it: a third one, neither red nor green."""
    graded = {
        **document,
        "runs": [{**run, "verdict": "mitigated"} if i == 1 else run for i, run in enumerate(document["runs"])],
    }
    path = tmp_path / "graded.html"
    write_export(graded, path)
    page.get(path.as_uri())
    shown = wait_for(
        page,
        "const p = document.querySelector('#replay-track [data-phase=\"limit-above-file\"]');"
        "return p && [p.dataset.verdict, p.querySelector('.grade').textContent, getComputedStyle(p).backgroundColor];",
        "the second run's grade",
    )
    assert shown[:2] == ["mitigated", "MITIGATED"]
    colours = page.execute_script(
        "return [...document.querySelectorAll('#replay-track .phase.run')].map(p => getComputedStyle(p).backgroundColor)"
    )
    assert shown[2] not in (colours[0], colours[2])  # not the pathology's red, not the healthy run's green
