"""``doctor --live`` on the real brokers while a lab's workload runs on them.

Lab 02's live workload (``live.play_on``: a producer, three fast subscribers and
a slow or stuck one on /topic/ticks, 10 s) is played against the real server
and against ActiveMQ (a process of its own, started with the ``activemq.xml``
that ``write_xml`` writes from the run's configuration, as ``lab run 02
--against activemq`` does) while the doctor samples the broker: on ActiveMQ
over STOMP (its statistics plugin) and over Jolokia (its MBeans, served at
/api/jolokia by Debian's Jetty and Jolokia as its web console would) at once.
The doctor must name the pathology in the pathology run and find nothing in
the cure run, through every reader.
ActiveMQ 5.17 shows the pathologies of labs 02, 06 and 07 (their ``--against``
runs: labs 00, 01 and 05 are healthy on it, 03's stall needs a slow store, 04
is Qpid's); labs 06 and 07 on ActiveMQ are
``test_doctor_live_activemq_labs``. The real server shows them all, and the
other labs are its own tests.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from clients.doctor.live import LiveReport, parse_target, run_live
from clients.labs.model import labs_directory, load_lab, sibling_module
from tests.broker_support import RunningBroker
from tests.doctor_live_support import activemq_for

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("doctor-live-brokers")]  # one JVM or Erlang broker at a time

LAB = load_lab(labs_directory() / "02-slow-consumer-policies")
LIVE = sibling_module(str(LAB.scenario_path), "live")

#: (run, what the doctor must find: a pathology, or nothing)
RUNS = [
    ("block", "slow_consumer"),
    ("spool", None),
    ("stuck-socket", "stalled_socket"),
    ("stuck-socket-write-timeout", None),
]


def _config(run: str) -> Any:
    spec = next(r for r in LAB.runs if r.name == run)
    return LIVE.live_config(spec.config(), None)


#: The workload's length here: the lab's 10 s leave a pathology that starts at t=3 s too short a
#: window on a busy machine, so it plays longer (its rates are the lab's).
SECONDS = 16.0
#: ... and on ActiveMQ, whose JVM (its JIT held at the first tier) takes longer to reach the
#: pathology on a busy machine.
ACTIVEMQ_SECONDS = 20.0


def _doctor_during_workload(
    port: int, stuck: bool, monkeypatch: pytest.MonkeyPatch, *urls: str, seconds: float = SECONDS
) -> tuple[LiveReport, ...]:
    """Sample the broker on ``port`` over STOMP (and at each of ``urls`` at once) while lab 02's
    workload plays on it: one report each."""
    monkeypatch.setattr(LIVE, "SECONDS", seconds)
    done = threading.Event()
    failure: list[BaseException] = []

    def workload() -> None:
        try:
            LIVE.play_on(port, stuck)
        except BaseException as exc:  # reported by the test
            failure.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=workload, daemon=True)
    thread.start()
    try:
        targets = [parse_target(url) for url in (f"stomp://127.0.0.1:{port}", *urls)]

        async def sample_all() -> tuple[LiveReport, ...]:
            return tuple(await asyncio.gather(*(run_live(t, window=seconds - 2, timeout=15) for t in targets)))

        reports = asyncio.run(sample_all())
    finally:
        assert done.wait(60), "the workload did not end"
    assert not failure, failure
    return reports


def _check(report: LiveReport, expected: str | None) -> None:
    found = sorted({f.pathology for f in report.findings})
    if expected is None:
        assert found == [], [f.headline for f in report.findings]
    else:
        assert expected in found, found
        finding = next(f for f in report.findings if f.pathology == expected)
        assert finding.fix.lab == "02-slow-consumer-policies"
        assert finding.end - finding.start >= 5 and finding.series


@pytest.mark.parametrize(("run", "expected"), RUNS)
def test_minibroker(run: str, expected: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    broker = RunningBroker(_config(run)).start()
    try:
        (report,) = _doctor_during_workload(broker.port, run.startswith("stuck-socket"), monkeypatch)
    finally:
        broker.stop()
    assert report.broker == "minibroker"
    _check(report, expected)


@pytest.mark.parametrize(("run", "expected"), RUNS)
def test_activemq(run: str, expected: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over STOMP (the statistics plugin) and, at the same time, over Jolokia (the MBeans, as
    ActiveMQ's web console serves them): both readers find the same."""
    with activemq_for(_config(run), tmp_path) as amq:
        reports = _doctor_during_workload(
            amq.port, run.startswith("stuck-socket"), monkeypatch, amq.jolokia, seconds=ACTIVEMQ_SECONDS
        )
    for report in reports:
        assert (report.broker, report.version) == ("activemq", "5.17.2"), report.target
        _check(report, expected)
