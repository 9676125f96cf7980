"""Running a lab: each configuration, a verdict, the evidence, the promise kept.

A scenario's ``run(lab)`` gets a ``LabRun``: the run's broker configuration, a
fresh data directory, a trace, and ``lab.network()`` to start the broker on
the virtual clock (``VirtualNetwork``). It returns an ``Outcome``: did the
pathology show, a one-line summary, evidence lines and numbers. The verdict
comes from the broker's own statistics and trace, so it prints in seconds;
``--plot DIR`` also writes each run's trace and its analysis (findings,
report, tables, plots; in this process: a lab's traces are far too small for
a JVM to pay), checks the findings against the detectors the lab names for
the run (``minibroker lab run`` then draws the lab's figure: ``clients.labs.figure``). ``--live`` calls ``run_live(lab)`` instead, where the scenario has
one: the real server on real sockets (``lab.live_broker()``); with a
``LabConsole`` (``--console``) those brokers serve the web console
(``clients.labs.console``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from minibroker.config import BrokerConfig
from minibroker.edge import VirtualNetwork

from .console import LabConsole
from .live import LiveBroker
from .looplag import LoopLag
from .model import GRADES, Lab, LabError, RunSpec
from .recording import RunRecorder, RunRecording
from .watch import Phases, Watcher

__all__ = ["LabRun", "Outcome", "RunResult", "run_lab", "run_one"]


@dataclass
class Outcome:
    """What a scenario saw."""

    pathology: bool
    summary: str
    evidence: list[str] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)
    #: A live run whose own figures show the machine, not the configuration, set the pace:
    #: why ("" for a fair run). The verdict is then no evidence either way.
    unfair: str = ""

    @property
    def verdict(self) -> str:
        return "pathology" if self.pathology else "healthy"


@dataclass
class RunResult:
    spec: RunSpec
    outcome: Outcome
    trace_file: Path | None = None
    #: The trace analysis's findings (``--plot``), else None.
    findings: list[dict[str, Any]] | None = None
    #: The series the analysis drew (``--plot``), for the lab's figure.
    series: dict[str, Any] | None = None
    #: A live run: how late the broker's event loop ran (the machine's load), else None.
    loop_lag: LoopLag | None = None
    #: The run's broker, sampled as it ran (``run_lab(record=True)``), else None: what
    #: ``lab run --console`` and ``--export`` play (``clients.labs.recording``); and its configuration.
    recording: RunRecording | None = None
    config: BrokerConfig | None = None
    #: The run's trace events on the virtual clock (``run_one(keep_events=True)``: a sweep's
    #: table), else None.
    events: list[dict[str, Any]] | None = None

    @property
    def too_busy(self) -> bool:
        """A live run on a machine too busy for its timings to be fair: its broker's loop ran
        late, or the run's own figures say so (``Outcome.unfair``)."""
        return bool(self.outcome.unfair) or (self.loop_lag is not None and self.loop_lag.busy())

    @property
    def grade(self) -> str:
        """pathology, mitigated or healthy: the scenario's verdict and the lab's ``[healthy]``
        thresholds (``RunSpec.grade``)."""
        return self.spec.grade(self.outcome.pathology, self.outcome.metrics)[0]

    @property
    def missed(self) -> list[str]:
        """The thresholds a mitigated run missed, each as 'metric value, healthy needs OP N'."""
        return self.spec.grade(self.outcome.pathology, self.outcome.metrics)[1]

    @property
    def as_promised(self) -> bool:
        return self.grade == self.spec.expect

    @property
    def findings_as_expected(self) -> bool:
        """The analysis found what the lab names for this run, and nothing else."""
        return self.findings is None or {f["detector"] for f in self.findings} == set(self.spec.findings)


class LabRun:
    """What a scenario gets: one run's configuration, data directory and trace."""

    def __init__(
        self,
        lab: Lab,
        spec: RunSpec,
        workdir: Path,
        console: LabConsole | None = None,
        watch: Callable[[str], None] | None = None,
        recorder: RunRecorder | None = None,
    ) -> None:
        self.lab = lab
        #: Samples the run's broker for the console's player, or None (off).
        self.recorder = recorder
        #: Where ``--watch`` frames go while a live broker runs, or None (off).
        self.watch = watch
        #: The run's timeline: brokers started, notes, what the statistics showed.
        self.phases = Phases()
        if recorder is not None:
            recorder.live_clock = self.phases.elapsed
        #: Where the live brokers serve the web console, or None (off).
        self.console = console
        self.spec = spec
        self.name = spec.name
        self.config: BrokerConfig = spec.config()
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.trace: Any = None
        self.notes: list[str] = []
        self._log = _LogCapture()
        self._networks: list[VirtualNetwork] = []
        #: Every live broker's loop, sampled (``live_broker``).
        self.loop_lag: LoopLag | None = None
        #: The activemq.xml a run against ActiveMQ was started with (``clients.labs.against``).
        self.activemq_xml: Any = None

    def finish(self) -> None:
        """The run is over: stop its brokers, so the trace ends where the run did."""
        if self.recorder is not None:
            self.recorder.sample()  # the state the run leaves behind, before its broker stops
        for net in self._networks:
            net.stop()
        self._networks.clear()

    def broker_log(self, contains: str = "") -> list[str]:
        """The broker's log messages (``minibroker.*`` loggers, INFO and up) during this run,
        optionally only those containing ``contains``; they are kept off the console."""
        return [line for line in self._log.lines if contains in line]

    def network(self, config: BrokerConfig | None = None, *, seed: int = 0) -> VirtualNetwork:
        """The broker with this run's configuration on a virtual clock, tracing."""
        net = VirtualNetwork(config or self.config, seed=seed, data_dir=self.data_dir, trace=True)
        self.trace = net.trace
        self._networks.append(net)
        if self.recorder is not None:
            self.recorder.attach(net)
        return net

    def note(self, text: str) -> None:
        """An evidence line shown under the verdict (and a phase of the watched timeline)."""
        self.notes.append(text)
        self.phases.add(text)
        if self.recorder is not None:
            self.recorder.note(text)

    @contextlib.contextmanager
    def live_broker(self, config: BrokerConfig | None = None) -> Iterator[LiveBroker]:
        """The real asyncio server with this configuration, on an ephemeral port."""
        chosen = (
            (config or self.config)
            .on_free_ports()
            .replace(transport={"host": "127.0.0.1"}, broker={"data_dir": str(self.data_dir)})
        )
        if self.console is not None:
            self.console.release(unless=self.workdir)  # the last run's broker gives up the port
            chosen = self.console.configure(chosen)
        live = LiveBroker(chosen, self.loop_lag)
        self.loop_lag = live.lag
        live.start()
        if self.console is not None:
            self.console.started(live, self.name)
        self.phases.add(f"broker started on port {live.port}")

        def restarted(broker: LiveBroker) -> None:
            self.phases.add(f"broker restarted on the same data, port {broker.port}")
            if self.console is not None:
                self.console.show_timeline(broker, self.name, self.phases)

        live.on_restart = restarted
        if self.console is not None:
            self.console.show_timeline(live, self.name, self.phases)
        watcher = None
        if self.watch is not None or self.recorder is not None:
            watcher = Watcher(
                live,
                f"Lab {self.lab.directory.name}: run {self.name} (live)",
                self.phases,
                self.watch,
                on_statistics=self.recorder.statistics if self.recorder is not None else None,
            )
            watcher.start()
        try:
            yield live
        finally:
            if watcher is not None:
                watcher.stop()
            if self.console is not None:
                self.console.keep(live, self.workdir)
            else:
                live.stop()


class _LogCapture(logging.Handler):
    """Collects the broker's log records while a lab run is active (without printing them)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self._saved: tuple[int, bool] = (logging.NOTSET, True)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def __enter__(self) -> _LogCapture:
        logger = logging.getLogger("minibroker")
        self._saved = (logger.level, logger.propagate)
        logger.setLevel(logging.INFO)
        logger.propagate = False
        logger.addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logger = logging.getLogger("minibroker")
        logger.removeHandler(self)
        logger.setLevel(self._saved[0])
        logger.propagate = self._saved[1]


def run_lab(
    lab: Lab,
    *,
    live: bool = False,
    plot_dir: Path | None = None,
    out: Callable[[str], None] = print,
    console: LabConsole | None = None,
    watch: Callable[[str], None] | None = None,
    record: bool = False,
    specs: Sequence[RunSpec] | None = None,
    brief: bool = False,
    draw: bool = True,
) -> list[RunResult]:
    """Run every configuration of ``lab`` (or ``specs``: ``--run``, ``--set``), print verdicts
    (``brief``: each run's grade and its three most telling lines), return the results.
    With ``plot_dir`` each run's trace is analysed there; ``draw=False`` keeps each run's
    series (for the lab's figure) but draws none of its plots.

    With ``console`` the live brokers serve the web console there, and the last
    one is kept serving (the caller's ``console.hold()`` ends it); ``record`` samples
    each virtual run's broker into its result's ``recording`` (for the console's player)."""
    scenario = lab.scenario()
    if live and not hasattr(scenario, "run_live"):
        raise LabError(f"lab {lab.name} has no live run ({lab.no_live or 'none written'}); run it without --live")
    entry = scenario.run_live if live else scenario.run
    out(f"Lab {lab.directory.name}: {lab.title}")
    out(f"  source: {lab.citation}")
    out(f"  {'live server, real sockets' if live else 'virtual clock'}")
    for line in student_pages(lab):
        out(f"  {line}")
    results = []
    for spec in lab.runs if specs is None else specs:
        result = run_one(
            lab,
            spec,
            entry,
            console=console,
            watch=watch if live else None,
            record=record,
            plot_dir=plot_dir,
            virtual=not live,
            draw=draw,
        )
        results.append(result)
        (_print_brief if brief else _print_result)(result, out)
    kept = sum(r.as_promised for r in results)
    busy = sum(r.too_busy for r in results)
    counts = ", ".join(f"{sum(r.grade == g for r in results)} {g}" for g in GRADES)
    changed = any(r.spec.settings for r in results)
    out(
        (
            f"Result: {len(results)} run(s) with settings changed: {counts}"
            if changed
            else f"Result: {kept}/{len(results)} verdicts as the lab promises ({counts})"
        )
        + (f" ({busy} run(s) on a machine too busy for a fair run: see above)" if busy else "")
    )
    if plot_dir is not None:
        analysed = [r for r in results if r.findings is not None]
        agree = sum(r.findings_as_expected for r in analysed)
        out(f"Trace analysis: {agree}/{len(analysed)} runs found what the lab expects; written to {plot_dir}")
    return results


def run_one(
    lab: Lab,
    spec: RunSpec,
    entry: Callable[[LabRun], Outcome],
    *,
    console: LabConsole | None = None,
    watch: Callable[[str], None] | None = None,
    record: bool = False,
    plot_dir: Path | None = None,
    virtual: bool = False,
    keep_events: bool = False,
    draw: bool = True,
) -> RunResult:
    """One run of ``lab``: ``entry`` (the scenario's ``run``, ``run_live`` ...) in a fresh
    working directory, which is removed afterwards (unless the console still serves it).
    ``virtual``: the run is on the virtual clock, where a lab that does not teach durability
    does not fsync (``on_virtual_clock``); ``plot_dir`` and ``draw`` as ``run_lab``'s."""
    workdir = Path(tempfile.mkdtemp(prefix=f"minibroker-lab-{lab.name}-"))
    try:
        recording = RunRecording(spec.name, spec.about, spec.expect) if record else None
        run = LabRun(
            lab,
            on_virtual_clock(lab, spec) if virtual else spec,
            workdir,
            console,
            watch,
            RunRecorder(recording) if recording is not None else None,
        )
        with run._log:
            try:
                outcome: Outcome = entry(run)
            finally:
                run.finish()
        outcome.evidence = run.notes + outcome.evidence
        result = RunResult(
            spec,
            outcome,
            loop_lag=run.loop_lag,
            recording=recording,
            config=run.config,
            events=run.trace.events() if keep_events and run.trace is not None else None,
        )
        if recording is not None:
            recording.verdict, recording.summary = result.grade, outcome.summary
        if plot_dir is not None and run.trace is not None:
            _analyse(run, result, plot_dir / spec.name, draw)
    finally:
        if console is None or not console.holds(workdir):
            shutil.rmtree(workdir, ignore_errors=True)
    return result


def on_virtual_clock(lab: Lab, spec: RunSpec) -> RunSpec:
    """``spec`` as the virtual clock plays it: a lab that declares ``virtual_fsync = false``
    (it does not teach durability) gets ``store.fsync = "never"``, unless the run sets it itself:
    its journals are still real files, but a run costs CPU, not thousands of fsyncs."""
    if lab.virtual_fsync or any(key == "store.fsync" for key, _ in spec.settings):
        return spec
    if spec.given is not None:
        return dataclasses.replace(spec, given=spec.given.replace(store={"fsync": "never"}))
    return dataclasses.replace(spec, settings=(("store.fsync", "never"), *spec.settings))


def student_pages(lab: Lab) -> list[str]:
    """Where a student reads first: the lab's handout and the glossary of every lab."""
    root = lab.directory.parents[2]
    pages = [("handout", lab.directory / "handout.md"), ("glossary", root / "docs" / "glossary.md")]
    shown = []
    for what, path in pages:
        if path.exists():
            shown.append(f"{what}: {path.relative_to(root) if path.is_relative_to(root) else path}")
    return ["; ".join(shown)] if shown else []


def telling_lines(result: RunResult, count: int = 3) -> list[str]:
    """A run's most telling evidence: what a mitigated run missed, then its last evidence lines
    (a scenario notes the setup first and what came of it last)."""
    lines = [f"not healthy: {why}" for why in result.missed] + result.outcome.evidence[::-1]
    return lines[:count]


def _promise(result: RunResult) -> str:
    """Whether the run kept the lab's promise; with settings changed (``--set``), what the lab
    promises of its own configuration."""
    spec = result.spec
    if spec.settings or spec.given is not None:
        changed = ", ".join(f"{key}={value}" for key, value in spec.settings) or "a configuration of yours"
        return f"with {changed}; the lab's own configuration: {spec.expect.upper()}"
    return "as promised" if result.as_promised else f"NOT as promised (expected {spec.expect.upper()})"


def _print_brief(result: RunResult, out: Callable[[str], None]) -> None:
    promise = _promise(result)
    out(f"  [{result.spec.name}] {result.grade.upper()} ({promise}): {result.outcome.summary}")
    for line in telling_lines(result):
        out(f"      - {line}")


def _print_result(result: RunResult, out: Callable[[str], None]) -> None:
    spec, outcome = result.spec, result.outcome
    promise = _promise(result)
    out("")
    out(f"  [{spec.name}] {spec.about}")
    out(f"    verdict: {result.grade.upper()} ({promise}): {outcome.summary}")
    if result.missed:
        out(f"      not healthy: {'; '.join(result.missed)}")
    for line in outcome.evidence:
        out(f"      - {line}")
    if outcome.metrics:
        out("      numbers: " + ", ".join(f"{k}={v}" for k, v in outcome.metrics.items()))
    if outcome.unfair:
        out(f"    the machine was too busy for a fair run: {outcome.unfair}")
    if result.loop_lag is not None:
        fair = "the machine was too busy for a fair run: " if result.loop_lag.busy() else "machine load: "
        out(f"    {fair}{result.loop_lag.summary()}")
    if result.findings is not None and result.trace_file is not None:
        expected = ", ".join(spec.findings) or "none"
        verdict = "as the lab expects" if result.findings_as_expected else f"NOT as the lab expects ({expected})"
        out(f"    trace analysis: {len(result.findings)} finding(s), {verdict}; {result.trace_file.parent}")
        for f in result.findings:
            out(f"      {f['start']:6.1f}-{f['end']:<6.1f} s  {f['detector']}: {f['summary']}")


def _analyse(run: LabRun, result: RunResult, directory: Path, draw: bool = True) -> None:
    """Write the run's trace and analyse it: in this process when it is small (a lab's
    always is), else on Spark (one session for every run of the lab). ``draw=False``:
    the series only, no plot (in process)."""
    from clients.spark.analyze import analyze, analyze_inprocess, choose_engine
    from clients.spark.findings import Params

    directory.mkdir(parents=True, exist_ok=True)
    trace_file = directory / "trace.jsonl"
    assert run.trace is not None
    run.trace.dump(trace_file)
    if choose_engine([str(trace_file)]) == "inprocess":
        analysis = analyze_inprocess([str(trace_file)], directory, Params(), draw=draw)
    else:
        from clients.spark.session import get_session

        analysis = analyze(get_session("minibroker-lab"), [str(trace_file)], directory, Params())
    result.trace_file = trace_file
    result.findings = analysis["findings"]
    result.series = analysis["series"]
