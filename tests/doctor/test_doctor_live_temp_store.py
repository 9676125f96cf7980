"""``doctor --live`` on the real server while lab 01's live workload runs: the temp store over its limit, and its cure.

Lab 01's workload (``play_on``): two slow and two fast subscribers on
/topic/prices (file cursor), a producer that sends until it is held, the
subscribers drain, then one more SEND. With the temp limit below one temp
file (``deadlock``) that SEND waits with nothing left to spool: the doctor must
name the topic's producers blocked while its consumers have nothing to do; with
the limit above four files (``limit-above-file``) the SEND is receipted at once
and the doctor finds nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from clients.doctor.live import LiveReport
from clients.labs.model import labs_directory, load_lab
from tests.doctor_live_support import doctor_during_run

pytestmark = pytest.mark.slow

LAB = load_lab(labs_directory() / "01-temp-storage-deadlock")
SCENARIO = LAB.scenario()

#: The doctor's window: the workload's first phases (a few seconds) and the shortest finding (5 s) after them.
WINDOW = 10.0


def _doctor_during_workload(run: str, monkeypatch: pytest.MonkeyPatch) -> tuple[LiveReport, dict[str, Any]]:
    # The last SEND waits until the window is over (the lab's own run gives up after 1.5 s).
    monkeypatch.setattr(SCENARIO, "LIVE_HANG", WINDOW + 1)
    return doctor_during_run(LAB, run, lambda broker: SCENARIO.play_on(broker.port, lambda: {}), WINDOW)


def test_temp_store_over_its_limit_blocks_the_producer_with_nothing_to_spool(monkeypatch: pytest.MonkeyPatch) -> None:
    report, played = _doctor_during_workload("deadlock", monkeypatch)
    assert played["stuck"]
    found = [f for f in report.findings if f.pathology == "blocked_producer_idle_consumers"]
    assert [f.subject for f in found] == [SCENARIO.TOPIC], [f.headline for f in report.findings]
    finding = found[0]
    assert finding.fix.lab == "01-temp-storage-deadlock"
    assert finding.end - finding.start >= 5
    assert all(v["temp_pct"] >= 99 and v["dequeued"] == 0 and v["waiting"] <= 0 for _, v in finding.series)


def test_temp_limit_above_the_file_cure_nothing_found(monkeypatch: pytest.MonkeyPatch) -> None:
    report, played = _doctor_during_workload("limit-above-file", monkeypatch)
    assert not played["stuck"]
    assert report.findings == (), [f.headline for f in report.findings]
