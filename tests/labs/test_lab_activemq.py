"""``minibroker lab run N --against activemq``: the labs' live runs on Debian's ActiveMQ too.

The runs start real ActiveMQ brokers (``make test`` installs Debian's package as
root; without it the slow tests skip and say so). Every JVM a test starts has
the test's own temporary directory in its command line; the fixture checks that
none is left running, and ends any that is (a failed run must not leave one).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from against_support import only_suite_runs, run_checked, tempdir_left_clean
from clients import activemq
from clients.cli import main as cli
from clients.labs import find_labs
from clients.labs.against import run_against_activemq
from clients.rabbitmq import processes_under

LABS = find_labs()
AGAINST = [lab for lab in LABS if hasattr(lab.scenario(), "run_activemq")]
NOT_INSTALLED = activemq.installed_problem()
#: Lab 02's eight runs take 10 s on each broker: the suite plays three of them (the
#: pathology, the abort ActiveMQ does not tell a STOMP client of, the write timeout).
SUITE_RUNS = {
    "02": ("block", "abort-subscription", "stuck-socket-write-timeout"),
    # Lab 06: the pathology and the cure that needs KahaDB's cleanup within the run (cleanupInterval).
    "06": ("old-message", "drained"),
    # Lab 07: the defaults (no redeliveryPlugin) and every cure (the plugin and the individual DLQ).
    "07": ("activemq-defaults", "back-off"),
}


def _our_jvms(marker: str) -> list[int]:
    """Pids of the ActiveMQ JVMs whose command line names ``marker`` (a test's directory)."""
    return processes_under(marker, "activemq.jar")


@pytest.fixture
def own_tempdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The runs' directories under this test's tmp_path; afterwards no JVM of this test may be running."""
    yield from tempdir_left_clean(tmp_path, monkeypatch, _our_jvms, "ActiveMQ JVMs")


@pytest.mark.slow
@pytest.mark.skipif(NOT_INSTALLED is not None, reason=f"ActiveMQ is needed: {NOT_INSTALLED}")
@pytest.mark.parametrize("lab", AGAINST, ids=lambda lab: lab.directory.name)
def test_each_live_run_gives_activemqs_verdict_beside_ours(lab, own_tempdir: Path) -> None:
    comparisons, output = run_checked(only_suite_runs(lab, SUITE_RUNS), run_against_activemq)
    if lab.number == "00":
        # The lesson: 5.17 has only the current space check, so the legacy recipe does not starve there.
        legacy = next(c for c in comparisons if c.spec.name == "restart-legacy")
        assert legacy.ours is not None and legacy.ours.outcome.pathology and not legacy.theirs.pathology
        assert "behaves like `current`, not like `legacy`" in output
        assert "needs ActiveMQ 5.14 or older" in output
    if lab.number == "02":
        # ActiveMQ aborts the slow subscription (its log says so) without telling the STOMP client.
        abort = next(c for c in comparisons if c.spec.name == "abort-subscription")
        assert "aborting slow consumer" in output
        assert abort.ours is not None and abort.ours.outcome.metrics["aborted"] == 1
    if lab.number == "06":
        # KahaDB keeps the chain of db-N.log files behind one unread message until storeUsage holds the
        # shop; drained, its next cleanup frees them.
        held = next(c for c in comparisons if c.spec.name == "old-message")
        drained = next(c for c in comparisons if c.spec.name == "drained")
        assert held.theirs is not None and drained.theirs is not None
        assert "Persistent store is Full" in output and "cleanupInterval 1000 ms" in output
        if not held.theirs.unfair:
            assert held.theirs.metrics["files"] >= 12 and held.theirs.metrics["held"] == 1, output
        assert drained.theirs.metrics["store_pct"] < 100, output
    if lab.number == "07":
        # A STOMP NACK dead-letters at once on ActiveMQ: one delivery, into the shared DLQ with the expired quotes.
        defaults = next(c for c in comparisons if c.spec.name == "activemq-defaults")
        assert defaults.ours is not None and defaults.ours.outcome.metrics["poison_deliveries"] == 7
        assert defaults.theirs is not None and defaults.theirs.metrics["poison_deliveries"] == 1
        assert "/queue/ActiveMQ.DLQ: " in output and "expired" in output
        # The redeliveryPlugin spreads the redeliveries (1 s apart at least), then the queue's own DLQ.
        back_off = next(c for c in comparisons if c.spec.name == "back-off")
        assert back_off.theirs is not None and "ActiveMQ's redeliveryPlugin: 6 redeliveries" in output
        if not back_off.theirs.unfair:
            assert back_off.theirs.metrics["poison_deliveries"] == 7, output
            assert back_off.theirs.metrics["dlq_messages"] == {"/queue/ActiveMQ.DLQ.Queue.orders": 1}, output
    assert not _our_jvms(str(own_tempdir))  # stopped by the run itself, not by the fixture


@pytest.mark.slow
@pytest.mark.skipif(NOT_INSTALLED is not None, reason=f"ActiveMQ is needed: {NOT_INSTALLED}")
def test_a_failing_scenario_stops_its_activemq(own_tempdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run whose scenario raises still stops the JVM it started."""
    lab = next(lab for lab in AGAINST if lab.number == "03")
    spec = next(s for s in lab.runs if not s.activemq_not_run)
    scenario = lab.scenario()
    seen: list[int] = []

    def broken(run, broker):
        seen.extend(_our_jvms(str(own_tempdir)))
        raise RuntimeError("the scenario failed")

    monkeypatch.setattr(scenario, "run_activemq", broken)
    monkeypatch.setattr(type(lab), "scenario", lambda self: scenario)
    with pytest.raises(RuntimeError, match="the scenario failed"):
        run_against_activemq(dataclasses.replace(lab, runs=(spec,)), out=lambda line: None)
    assert seen, "the broker was running while the scenario played"
    deadline = time.monotonic() + 30
    while _our_jvms(str(own_tempdir)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _our_jvms(str(own_tempdir))


def test_without_activemq_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setattr(activemq, "AMQ_JAR", tmp_path / "no-such" / "activemq.jar")
    assert cli(["lab", "run", "00", "--against", "activemq"]) != 0
    err = capsys.readouterr().err
    assert "ActiveMQ is not installed" in err and "apt-get install -y activemq" in err


def test_a_lab_without_a_run_against_activemq_says_why(capsys) -> None:
    for lab in LABS:
        assert hasattr(lab.scenario(), "run_activemq") != bool(lab.no_activemq), lab.directory.name
        if lab in AGAINST:
            continue
        assert cli(["lab", "run", lab.number, "--against", "activemq"]) != 0
        err = capsys.readouterr().err
        assert f"has no run against ActiveMQ: {lab.no_activemq}" in err, err
    assert cli(["lab", "list"]) == 0
    out = capsys.readouterr().out
    assert out.count("against ActiveMQ: yes (--against activemq)") == len(AGAINST)
    assert out.count("against ActiveMQ: no: ") == len(LABS) - len(AGAINST)


@pytest.mark.slow
@pytest.mark.skipif(NOT_INSTALLED is not None, reason=f"ActiveMQ is needed: {NOT_INSTALLED}")
def test_a_terminated_command_stops_its_activemq(tmp_path: Path) -> None:
    """SIGTERM to `lab run --against activemq` while its ActiveMQ runs: the JVM goes too."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-m", "clients.cli", "lab", "run", "03", "--against", "activemq"],
        env=dict(os.environ, TMPDIR=str(tmp_path)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 180
        while not _our_jvms(str(tmp_path)):
            assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            assert time.monotonic() < deadline, "no ActiveMQ started"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 128 + signal.SIGTERM
        assert not _our_jvms(str(tmp_path)), proc.stderr.read() if proc.stderr else ""
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in _our_jvms(str(tmp_path)):
            os.kill(pid, signal.SIGKILL)


def test_activemqs_slow_pace_without_a_blocked_dispatch_is_the_machines(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Lab 02 on ActiveMQ: fast consumers under the line while ActiveMQ logged no blocked dispatch
    and the producer went on is an unfair run, not a PATHOLOGY; with the log line it is one."""
    from clients.labs import LabRun, sibling_module

    lab = next(lab for lab in LABS if lab.number == "02")
    scenario = lab.scenario()
    live = sibling_module(str(scenario.__file__), "live")
    figures = {
        "producer_rate": 34.0,
        "fast_rate": 34.0,
        "slow_rate": 30.0,
        "sent": 300,
        "slow_closed": False,
        "slow_errors": [],
    }
    monkeypatch.setattr(live, "play_on", lambda port, stuck: dict(figures))

    class Broker:
        port = 1

        def __init__(self, lines: list[str]) -> None:
            self.lines = lines

        def log(self, contains: str = "") -> list[str]:
            return [line for line in self.lines if contains in line]

    spec = next(s for s in lab.runs if s.name == "spool")
    quiet = scenario.run_activemq(LabRun(lab, spec, tmp_path), Broker([]))
    assert quiet.pathology and quiet.unfair and "logged no blocked dispatch" in quiet.unfair
    line = "x | INFO | Pending message cursor [VMPendingMessageCursor] is full, blocking message add() pending | y"
    blocked = scenario.run_activemq(LabRun(lab, spec, tmp_path), Broker([line]))
    assert blocked.pathology and not blocked.unfair
