"""A lab beside the real ActiveMQ: ``minibroker lab run NAME --against activemq``.

Theory of operation. For every run of the lab, two runs of the same live
scenario with the same clients (our asyncio ``StompClient`` on real
sockets): first against our real server (the scenario's ``run_live``), then
against Debian's ActiveMQ Classic (the scenario's ``run_activemq(lab,
broker)``), started for that run alone by ``clients.activemq`` with the
``activemq.xml`` that ``clients.doctor.write_xml`` writes from the run's TOML
(as the live run changes it: the scenario's ``activemq_config``, if any),
on free loopback ports and a fresh data directory under the run's temporary
directory once our run is over (the two brokers never share the machine), and
stopped when the run ends, whatever happens. The scenario
measures the same outcome from the clients' side (a broker's internals are
not there to read) and gives a verdict by the same rule.

The two verdicts are printed side by side. What ``activemq.xml`` cannot say
(``write_xml``'s departures: the legacy space check of ActiveMQ 5.14 and
older, a slow store on purpose ...) is printed with the run; where the
verdicts differ because of it, the output says which ActiveMQ the pathology
needs. A run whose pathology ActiveMQ cannot be made to show at all says so
in ``lab.toml`` (``activemq_not_run``) and is not started; ``activemq_expect``
is the verdict the lab expects of ActiveMQ (default: the run's own).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minibroker.config import BrokerConfig

from .. import activemq, rabbitmq
from ..activemq import ActiveMQ, free_port
from ..doctor.write_xml import ActiveMQXml, write_xml
from .model import Lab, LabError, RunSpec
from .runner import LabRun, Outcome, RunResult, run_one

__all__ = ["ActiveMQBroker", "Comparison", "run_against_activemq", "run_against_rabbitmq"]

#: The JVM's heap for a lab's broker: the labs' memory limits are a few megabytes.
#: C1 only and the serial collector: a JVM that starts in half the time on a busy machine.
HEAP = "-Xms64M -Xmx256M -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


class ActiveMQBroker:
    """What a scenario's ``run_activemq(lab, broker)`` gets: the running ActiveMQ."""

    def __init__(self, process: ActiveMQ, xml: ActiveMQXml, on_restart: Callable[[], None] | None = None) -> None:
        self._process = process
        self.xml = xml
        self._on_restart = on_restart

    @property
    def port(self) -> int:
        """The STOMP port on 127.0.0.1."""
        return self._process.port

    def restart(self) -> None:
        """Stop and start again on the same data (its persistent messages survive)."""
        self._process.restart()
        if self._on_restart is not None:
            self._on_restart()

    @property
    def data_dir(self) -> Path:
        """ActiveMQ's data directory (``${activemq.data}``: ``kahadb/`` holds its journal files)."""
        return self._process.run_dir / "data"

    def log(self, contains: str = "") -> list[str]:
        """ActiveMQ's own log lines (log4j's, INFO and up), optionally only those containing ``contains``."""
        return self._process.log(contains)


@dataclass
class Comparison:
    """One run of a lab on both brokers."""

    spec: RunSpec
    ours: RunResult | None  # None with theirs: not run against ActiveMQ (``spec.activemq_not_run`` says why)
    theirs: Outcome | None
    departures: tuple[str, ...] = ()
    #: The other broker: "activemq" or "rabbitmq" (its keys in lab.toml: ``activemq_expect`` ...).
    against: str = "activemq"

    def key(self, what: str) -> str:
        """The run's ``<against>_<what>`` key of lab.toml (``expect``, ``not_run``, ``note``)."""
        return str(getattr(self.spec, f"{self.against}_{what}"))

    @property
    def as_expected(self) -> bool:
        """Our verdict as the lab promises, and ActiveMQ's as the lab expects of it."""
        if self.ours is None or self.theirs is None:
            return True  # not compared: the lab says why
        return self.ours.as_promised and self.theirs_as_expected

    @property
    def theirs_as_expected(self) -> bool:
        """ActiveMQ's verdict is the one the lab expects, or its run was not fair (the machine)."""
        return self.theirs is not None and (self.theirs.verdict == self.key("expect") or bool(self.theirs.unfair))


def version_label() -> str:
    """``ActiveMQ 5.17.2`` (the Debian package's upstream version)."""
    full = activemq.version() or ""
    upstream = full.split(":")[-1].split("+")[0].split("-")[0]
    return f"ActiveMQ {upstream}" if upstream else "ActiveMQ"


class _ActiveMQRun:
    """One run's ActiveMQ: its activemq.xml and broker in a fresh directory, started, played,
    stopped (in the background while the verdicts print; ``wait`` waits for it)."""

    def __init__(self, lab: Lab, spec: RunSpec, label: str, configure: Callable[[BrokerConfig], BrokerConfig]) -> None:
        """``configure``: the run's configuration as its live run uses it (the scenario's
        ``activemq_config``, where the live run changes it)."""
        self.lab, self.spec, self.label = lab, spec, label
        self.workdir = Path(tempfile.mkdtemp(prefix=f"minibroker-lab-{lab.name}-activemq-"))
        self.port = free_port()
        self.xml = write_xml(configure(spec.config()), stomp_port=self.port, openwire_port=free_port())
        conf = self.workdir / "activemq.xml"
        conf.write_text(self.xml.text, encoding="utf-8")
        self.process = ActiveMQ(self.workdir, conf=conf, heap=HEAP, port=self.port, quick_stop=True)
        self._error: BaseException | None = None
        # Events, not Thread.join: a join that a signal interrupts (SIGTERM, Ctrl-C) marks a live
        # thread as ended (CPython's bpo-45274 handling), and a later join would not wait for it.
        self._launched = self._stop_requested = False
        self._started = threading.Event()
        self._stopped = threading.Event()

    def _start(self) -> None:
        try:
            self.process.start()
        except BaseException as exc:  # reported by play()
            self._error = exc
        finally:
            self._started.set()

    def start(self) -> None:
        self._launched = True
        threading.Thread(target=self._start, name=f"activemq-start-{self.spec.name}", daemon=True).start()

    def play(self, scenario_run: Callable[[LabRun, ActiveMQBroker], Outcome]) -> Outcome:
        self._started.wait()
        if self._error is not None:
            raise LabError(f"{self.label} did not start for run {self.spec.name}: {self._error}")
        run = LabRun(self.lab, self.spec, self.workdir)
        run.activemq_xml = self.xml
        run.phases.add(f"{self.label} started on port {self.port}")
        broker = ActiveMQBroker(
            self.process, self.xml, lambda: run.phases.add(f"{self.label} restarted on the same data")
        )
        outcome = scenario_run(run, broker)
        outcome.evidence = run.notes + outcome.evidence
        return outcome

    def stop(self) -> None:
        """Stop the broker in the background (``wait`` waits for it) and remove its directory."""
        self._stop_requested = True

        def stop() -> None:
            try:
                if self._launched:
                    self._started.wait()  # a start under way leaves a pid file to stop
                self.process.stop()
                shutil.rmtree(self.workdir, ignore_errors=True)
            finally:
                self._stopped.set()

        threading.Thread(target=stop, name=f"activemq-stop-{self.spec.name}", daemon=True).start()

    def wait(self) -> None:
        """Until ``stop`` has stopped the broker (at once if it was never asked to)."""
        if self._stop_requested:
            self._stopped.wait()


def _lesson(comparison: Comparison, label: str) -> str:
    """One line on what the two verdicts teach."""
    assert comparison.ours is not None and comparison.theirs is not None
    ours, theirs = comparison.ours.outcome, comparison.theirs
    legacy = any(d.startswith("space_check") for d in comparison.departures)
    if ours.verdict == theirs.verdict:
        agrees = f"{label} agrees" + (", though it has only the current space check" if legacy else "")
        return agrees + (f": {comparison.key('note')}" if comparison.key("note") else ".")
    if legacy and ours.pathology and not theirs.pathology:
        return (
            f"{label} behaves like `current`, not like `legacy`: its only space check lets the consumer "
            "through. This pathology needs ActiveMQ 5.14 or older (AMQ-4467 changed the check in 5.15)."
        )
    return f"the verdicts differ: {comparison.key('note') or f'the reproduction and {label} disagree on this run.'}"


def _check_runnable(
    lab: Lab, scenario: Any, name: str, label: str, no_run: str, installed_problem: Callable[[], str | None]
) -> None:
    """Refuse, saying why, a lab that cannot run against broker ``name`` (``run_<name>``)."""
    if no_run:
        raise LabError(f"lab {lab.name} has no run against {label}: {no_run}")
    if not hasattr(scenario, "run_live"):
        raise LabError(
            f"lab {lab.name} has no live run ({lab.no_live or 'none written'}), so nothing to run against {label} yet"
        )
    if not hasattr(scenario, f"run_{name}"):
        raise LabError(f"lab {lab.name} has no run against {label} yet (none written)")
    problem = installed_problem()
    if problem:
        raise LabError(f"--against {name} needs Debian's {label}. {problem}")


def run_against_activemq(lab: Lab, *, out: Callable[[str], None] = print) -> list[Comparison]:
    """Every run of ``lab`` on our real server and on ActiveMQ, both verdicts printed side by side."""
    scenario = lab.scenario()
    _check_runnable(lab, scenario, "activemq", "ActiveMQ", lab.no_activemq, activemq.installed_problem)
    label = version_label()
    out(f"Lab {lab.directory.name}: {lab.title}")
    out(f"  source: {lab.citation}")
    out(f"  minibroker: the live server on real sockets; {label}: Debian's package, one broker per run with the")
    out("  activemq.xml written from the run's configuration; the same clients measure both")
    comparisons: list[Comparison] = []
    brokers: list[_ActiveMQRun] = []
    try:
        for spec in lab.runs:
            if spec.activemq_not_run:
                comparisons.append(Comparison(spec, None, None))
                _print_comparison(comparisons[-1], label, out)
                continue
            # One broker at a time: the JVM starts after our run, so neither run shares the
            # machine with the other broker (lab 02's rates would show it); it stops in the background.
            for broker in brokers:
                broker.wait()  # the last run's ActiveMQ is gone before our server starts
            ours = run_one(lab, spec, scenario.run_live)
            theirs = _ActiveMQRun(lab, spec, label, getattr(scenario, "activemq_config", lambda config: config))
            brokers.append(theirs)
            theirs.start()
            try:
                outcome = theirs.play(scenario.run_activemq)
            finally:
                theirs.stop()
            departures = tuple(dict.fromkeys(d.describe() for d in theirs.xml.departures))
            comparisons.append(Comparison(spec, ours, outcome, departures))
            _print_comparison(comparisons[-1], label, out)
    finally:
        for broker in brokers:
            broker.wait()
    _print_table(comparisons, label, out)
    return comparisons


def _verdict_line(outcome: Outcome, promise: str) -> str:
    return f"{outcome.verdict.upper()} ({promise}): {outcome.summary}"


def _print_comparison(c: Comparison, label: str, out: Callable[[str], None]) -> None:
    spec = c.spec
    out("")
    out(f"  [{spec.name}] {spec.about}")
    if c.ours is None or c.theirs is None:
        out(f"    not run against {label}: {c.key('not_run')} (`--live` runs it on minibroker)")
        return
    ours = c.ours
    promise = "as promised" if ours.as_promised else f"NOT as promised (expected {spec.expect.upper()})"
    out(f"    minibroker: {_verdict_line(ours.outcome, promise)}")
    for line in ours.outcome.evidence:
        out(f"      - {line}")
    if ours.too_busy:
        why = ours.outcome.unfair or (ours.loop_lag.summary() if ours.loop_lag is not None else "")
        out(f"      the machine was too busy for a fair run: {why}")
    expected = c.key("expect")
    promise = "as the lab expects" if c.theirs.verdict == expected else f"NOT as the lab expects ({expected.upper()})"
    out(f"    {label}: {_verdict_line(c.theirs, promise)}")
    for line in c.theirs.evidence:
        out(f"      - {line}")
    if c.theirs.unfair:
        out(f"      the machine was too busy for a fair run: {c.theirs.unfair}")
    for line in c.departures:
        out(f"    activemq.xml cannot say {line}")
    out(f"    => {_lesson(c, label)}")


def _print_table(comparisons: list[Comparison], label: str, out: Callable[[str], None]) -> None:
    width = max(len(c.spec.name) for c in comparisons) + 2
    out("")
    out("  Side by side:")
    out(f"    {'run':{width}}{'minibroker':12}{label}")
    compared = [c for c in comparisons if c.ours is not None and c.theirs is not None]
    for c in comparisons:
        if c.ours is None or c.theirs is None:
            out(f"    {c.spec.name:{width}}{'-':12}not run (see above)")
            continue
        note = ""
        if c.theirs.verdict != c.ours.outcome.verdict:
            legacy = any(d.startswith("space_check") for d in c.departures)
            note = "  (needs ActiveMQ <= 5.14)" if legacy else "  (differs: see above)"
        out(f"    {c.spec.name:{width}}{c.ours.outcome.verdict.upper():12}{c.theirs.verdict.upper()}{note}")
    ours_kept = sum(c.ours.as_promised for c in compared if c.ours is not None)
    theirs_kept = sum(c.theirs_as_expected for c in compared)
    skipped = len(comparisons) - len(compared)
    out(
        f"Result: {len(compared)} run(s) on both brokers: {ours_kept}/{len(compared)} minibroker verdicts as the "
        f"lab promises, {theirs_kept}/{len(compared)} {label} verdicts as the lab expects"
        + (f"; {skipped} not run against {label.split()[0]} (see above)" if skipped else "")
    )


def rabbitmq_label() -> str:
    """``RabbitMQ 3.10.8`` (the Debian package's upstream version)."""
    upstream = (rabbitmq.version() or "").split(":")[-1].split("-")[0]
    return f"RabbitMQ {upstream}" if upstream else "RabbitMQ"


#: The virtual host the labs' clients name (our StompClient's CONNECT says ``host:localhost``;
#: ActiveMQ and minibroker ignore it, RabbitMQ connects the client to that virtual host).
LAB_VHOST = "localhost"


def run_against_rabbitmq(lab: Lab, *, out: Callable[[str], None] = print) -> list[Comparison]:
    """Every run of ``lab`` on our real server and on RabbitMQ, both verdicts printed side by side.

    As ``run_against_activemq``: per run, our live run first, then a RabbitMQ node of
    our own (``clients.rabbitmq``, started for that run alone once ours is over, with the
    scenario's ``rabbitmq_settings(config)`` as ``rabbitmq.conf`` lines, if it has them)
    on which the scenario's ``run_rabbitmq(lab, node)`` plays the same clients; the node
    is stopped by pid when the run ends, whatever happens. Runs whose mechanism RabbitMQ
    lacks say so in lab.toml (``rabbitmq_not_run``). A scenario whose pathology is the
    memory alarm (a connection that publishes and consumes, blocked) moves the alarm's
    threshold within reach of its workload: ``node.set_memory_high_watermark(
    node.memory_used() + margin)``; the node logs "memory resource limit alarm set"."""
    scenario = lab.scenario()
    _check_runnable(lab, scenario, "rabbitmq", "RabbitMQ", lab.no_rabbitmq, rabbitmq.installed_problem)
    label = rabbitmq_label()
    settings: Callable[[BrokerConfig], dict[str, str]] = getattr(scenario, "rabbitmq_settings", lambda config: {})
    out(f"Lab {lab.directory.name}: {lab.title}")
    out(f"  source: {lab.citation}")
    out(f"  minibroker: the live server on real sockets; {label}: Debian's package, one node of our own per run")
    out("  (its STOMP plugin, its defaults unless the run says otherwise); the same clients measure both")
    comparisons: list[Comparison] = []
    for spec in lab.runs:
        if spec.rabbitmq_not_run:
            comparisons.append(Comparison(spec, None, None, against="rabbitmq"))
            _print_comparison(comparisons[-1], label, out)
            continue
        ours = run_one(lab, spec, scenario.run_live)
        workdir = Path(tempfile.mkdtemp(prefix=f"minibroker-lab-{lab.name}-rabbitmq-"))
        node = rabbitmq.RabbitMQ(workdir, name=f"lab-{lab.number}", settings=settings(spec.config()), quick_stop=True)
        try:
            try:
                node.start()
                node.add_vhost(LAB_VHOST)
            except rabbitmq.BrokerStartError as exc:
                raise LabError(f"{label} did not start for run {spec.name}: {exc}") from None
            run = LabRun(lab, spec, workdir)
            run.phases.add(f"{label} started on port {node.port}")
            outcome = scenario.run_rabbitmq(run, node)
            outcome.evidence = run.notes + outcome.evidence
        finally:
            node.stop()
            shutil.rmtree(workdir, ignore_errors=True)
        comparisons.append(Comparison(spec, ours, outcome, against="rabbitmq"))
        _print_comparison(comparisons[-1], label, out)
    _print_table(comparisons, label, out)
    return comparisons
