"""``doctor --live`` on the real server while lab 05's live workload runs: the shared-connection deadlock, and its cure.

Lab 05's workload (``play_on``): a feeder floods /queue/requests; a worker takes
each request (client-individual), sends a reply to /queue/replies, then ACKs
the request; an auditor consumes the replies; broker memory 256 KB. When the
worker sends and ACKs on one connection (``shared-connection``), producer flow
control holds its reply and its ACKs behind it: the doctor must name that
connection, blocked while it holds unacknowledged requests. With one connection
to consume and another to send (``separate-connections``) every request is
handled and the doctor finds nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from clients.doctor.live import LiveReport
from clients.labs.model import labs_directory, load_lab
from tests.doctor_live_support import doctor_during_run

pytestmark = pytest.mark.slow

LAB = load_lab(labs_directory() / "05-shared-connection-deadlock")
SCENARIO = LAB.scenario()

#: The doctor's window: one more second than the shortest finding (5 s).
WINDOW = 6.0


def _doctor_during_workload(run: str, monkeypatch: pytest.MonkeyPatch) -> tuple[LiveReport, dict[str, Any]]:
    # The workload gives up on a worker stuck for LIVE_STALL seconds: here it stays until the window is over.
    monkeypatch.setattr(SCENARIO, "LIVE_STALL", WINDOW + 1)
    return doctor_during_run(LAB, run, lambda broker: SCENARIO.play_on(broker.port, lambda tags: {}, run), WINDOW)


def test_shared_connection_blocked_holding_its_unacknowledged_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    report, played = _doctor_during_workload("shared-connection", monkeypatch)
    assert played["stuck"]
    assert [f.pathology for f in report.findings] == ["blocked_holding_unacked"], [f.headline for f in report.findings]
    finding = report.findings[0]
    assert finding.fix.lab == "05-shared-connection-deadlock"
    assert finding.end - finding.start >= 5
    assert all(values["blocked"] and values["unacked"] > 0 for _, values in finding.series)


def test_separate_connections_cure_nothing_found(monkeypatch: pytest.MonkeyPatch) -> None:
    report, played = _doctor_during_workload("separate-connections", monkeypatch)
    assert not played["stuck"] and played["handled"] == SCENARIO.LIVE_TOTAL
    assert report.findings == (), [f.headline for f in report.findings]
