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
Lab 02 is the lab whose pathologies ActiveMQ 5.17 shows (its ``--against``
runs: labs 00 and 01 are healthy on it, 03's stall needs a slow store, 04 is
Qpid's); the real server shows them all, and labs 00 and 01 are its own tests.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clients.activemq import JOLOKIA_CLASSPATH, ActiveMQ, free_port, installed_problem, jolokia_problem
from clients.doctor.live import LiveReport, parse_target, run_live
from clients.doctor.write_xml import write_xml
from clients.labs.model import labs_directory, load_lab, sibling_module
from tests.broker_support import RunningBroker

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


@pytest.fixture
def activemq_dir(tmp_path: Path) -> Iterator[Path]:
    problem = installed_problem() or jolokia_problem()
    if problem:
        pytest.fail(problem)
    yield tmp_path


@pytest.mark.parametrize(("run", "expected"), RUNS)
def test_activemq(run: str, expected: str | None, activemq_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over STOMP (the statistics plugin) and, at the same time, over Jolokia (the MBeans, as
    ActiveMQ's web console serves them): both readers find the same."""
    port, jolokia = free_port(), free_port()
    xml = write_xml(_config(run), stomp_port=port, openwire_port=free_port(), jolokia_port=jolokia)
    conf = activemq_dir / "activemq.xml"
    conf.write_text(xml.text)
    broker = ActiveMQ(
        activemq_dir,
        conf=conf,
        heap="-Xms64M -Xmx256M -XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        port=port,
        classpath=JOLOKIA_CLASSPATH,
    )
    broker.start()
    try:
        for url in (f"stomp://127.0.0.1:{port}", f"http://127.0.0.1:{jolokia}/"):  # the JVM's first answers are slow
            asyncio.run(run_live(parse_target(url), window=0, timeout=30))
        reports = _doctor_during_workload(
            port, run.startswith("stuck-socket"), monkeypatch, f"http://127.0.0.1:{jolokia}/", seconds=ACTIVEMQ_SECONDS
        )
    finally:
        broker.stop()
    for report in reports:
        assert (report.broker, report.version) == ("activemq", "5.17.2"), report.target
        _check(report, expected)
