"""Lab definitions: ``lab.toml`` read and checked.

The format, every key with its default, the three grades (``GRADES``), the
thresholds and the exercises (``KINDS``) are described once, for a lab's
author, in ``docs/labs.md``. This module reads a lab's directory into a
``Lab`` (its ``RunSpec`` runs, ``Exercise`` entries and ``healthy``
thresholds) and refuses, with a ``LabError`` saying what is wrong, a file
that breaks that format.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import operator
import os
import re
import sys
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from minibroker.config import BrokerConfig, load_config

from ..sources import SOURCES
from .settings import Setting, configure, read_toml

__all__ = [
    "Exercise",
    "GRADES",
    "KINDS",
    "Lab",
    "RunSpec",
    "LabError",
    "Threshold",
    "find_labs",
    "labs_directory",
    "load_lab",
    "sibling_module",
]

#: What a scenario decides (``Outcome.verdict``), and what ActiveMQ is expected to show.
VERDICTS = ("pathology", "healthy")
#: What a run is graded, worst first (``RunSpec.grade``).
GRADES = ("pathology", "mitigated", "healthy")

#: The kinds of exercise, and the option of ``lab check`` that grades each.
KINDS = {"predict": "--answer", "config": "--config", "client": "--client", "diagnose": "--answer"}
_EXERCISE_ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")

_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
}
_THRESHOLD = re.compile(r"^\s*(>=|<=|==|>|<)\s*(-?\d+(?:\.\d+)?)\s*(?:%\s+of\s+([A-Za-z_]\w*))?\s*$")


class LabError(Exception):
    """A lab that cannot be found or is badly defined."""


@dataclass(frozen=True)
class Threshold:
    """One number a healthy run must reach: ``processed >= 1000``, ``received_f >= 95% of sent_f``."""

    metric: str
    op: str
    value: float
    #: ``value`` is a percentage of this metric ("" for a plain number).
    of: str = ""

    @classmethod
    def parse(cls, metric: str, text: object) -> Threshold:
        """``Threshold.parse("processed", ">= 1000")``; ValueError says what is wrong."""
        match = _THRESHOLD.match(text) if isinstance(text, str) else None
        if match is None:
            raise ValueError(f"threshold {metric} = {text!r} is not 'OP NUMBER' or 'OP PERCENT% of METRIC'")
        return cls(metric, match.group(1), float(match.group(2)), match.group(3) or "")

    def applies(self, metrics: Mapping[str, Any]) -> bool:
        """The run reports the numbers this threshold names."""
        return _number(metrics.get(self.metric)) and (not self.of or _number(metrics.get(self.of)))

    def failure(self, metrics: Mapping[str, Any]) -> str:
        """Why ``metrics`` miss this threshold, or "" when they reach it (or it does not apply)."""
        if not self.applies(metrics):
            return ""
        actual = metrics[self.metric]
        bound = self.value * metrics[self.of] / 100 if self.of else self.value
        if _OPERATORS[self.op](actual, bound):
            return ""
        return f"{self.metric} {actual:g}, healthy needs {self}"

    def __str__(self) -> str:
        value = f"{self.value:g}"
        return f"{self.op} {value}% of {self.of}" if self.of else f"{self.op} {value}"


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class RunSpec:
    """One configuration a lab runs, and the verdict it promises."""

    name: str
    config_path: Path
    expect: str
    about: str
    #: The trace analysis's detectors this run's findings must come from, exactly (``--plot``).
    findings: tuple[str, ...] = ()
    #: The verdict the lab expects of ActiveMQ (``--against activemq``).
    activemq_expect: str = ""
    #: Why this run is not started against ActiveMQ ("" when it is).
    activemq_not_run: str = ""
    #: What the comparison with ActiveMQ showed (printed with it).
    activemq_note: str = ""
    #: The numbers a run without the pathology must reach to be healthy (else mitigated).
    healthy: tuple[Threshold, ...] = ()
    #: Settings changed from ``config_path``'s (``lab run --set``, ``clients.labs.settings``).
    settings: tuple[Setting, ...] = ()
    #: A configuration given whole (a student's activemq.xml, read), in place of ``config_path``'s.
    given: BrokerConfig | None = None
    #: The same three for RabbitMQ (``--against rabbitmq``).
    rabbitmq_expect: str = ""
    rabbitmq_not_run: str = ""
    rabbitmq_note: str = ""

    def config(self) -> BrokerConfig:
        """The run's broker configuration: its file's, or the one given, with its settings."""
        if self.given is not None:
            return self.given
        if not self.settings:
            return load_config(self.config_path)
        return configure(read_toml(self.config_path), self.settings, f"'{self.config_path}'")

    def with_settings(self, *settings: Setting) -> RunSpec:
        """This run with ``settings`` changed; ConfigError (one line) when one is unknown or bad."""
        spec = dataclasses.replace(self, settings=self.settings + settings)
        spec.config()
        return spec

    def grade(self, pathology: bool, metrics: Mapping[str, Any]) -> tuple[str, list[str]]:
        """The run's grade (one of ``GRADES``) and, when mitigated, the thresholds it missed."""
        if pathology:
            return "pathology", []
        missed = [why for t in self.healthy if (why := t.failure(metrics))]
        return ("mitigated" if missed else "healthy"), missed


@dataclass(frozen=True)
class Exercise:
    """One exercise of a lab (``[[exercise]]`` in lab.toml), its text in ``exercises.md``."""

    id: str
    kind: str
    run: str
    #: predict: the run's number to predict, or "grade".
    metric: str = ""
    #: predict: how far off a number may be; ``relative``: a percentage of the actual value.
    tolerance: float = 0.0
    relative: bool = False
    #: config: keys of the run's own configuration the student's file cannot change.
    keep: tuple[str, ...] = ()
    #: What a wrong or incomplete answer is told, by grade ("wrong", "mitigated", "still broken").
    hints: Mapping[str, str] = field(default_factory=dict)
    #: diagnose: the detectors a right answer names.
    causes: tuple[str, ...] = ()
    #: diagnose: what ``doctor --live`` calls the same cause, also a right answer.
    doctor_names: tuple[str, ...] = ()

    @property
    def option(self) -> str:
        """The option of ``lab check`` that takes this exercise's answer."""
        return KINDS[self.kind]


@dataclass(frozen=True)
class Lab:
    """A lab directory, read."""

    directory: Path
    name: str
    title: str
    source: str
    runs: tuple[RunSpec, ...]
    scenario_path: Path
    #: The pathology run and the cure run the lab's figure puts side by side (``--plot``).
    figure: tuple[str, ...] = ()
    #: Why ``--live`` cannot run this lab ("" when its scenario has ``run_live``).
    no_live: str = ""
    #: Why ``--against activemq`` cannot run this lab ("" when its scenario has ``run_activemq``).
    no_activemq: str = ""
    exercises: tuple[Exercise, ...] = ()
    #: Its virtual-clock runs fsync as their configurations say (a lab about durability).
    virtual_fsync: bool = True

    def run_named(self, name: str) -> RunSpec:
        """The run called ``name``; LabError names the runs there are."""
        for spec in self.runs:
            if spec.name == name:
                return spec
        raise LabError(
            f"lab {self.directory.name} has no run {name!r}; its runs: {', '.join(r.name for r in self.runs)}"
        )

    def exercise_text(self, exercise: Exercise) -> str:
        """The exercise's section of ``exercises.md``, heading included."""
        text = (self.directory / "exercises.md").read_text(encoding="utf-8")
        match = re.search(rf"^## {re.escape(exercise.id)}:.*?(?=^## |\Z)", text, flags=re.M | re.S)
        return match.group(0).rstrip() if match else ""

    #: Why ``--against rabbitmq`` cannot run this lab ("" when its scenario has ``run_rabbitmq``).
    no_rabbitmq: str = ""

    @property
    def citation(self) -> str:
        """The public document the lab reproduces, by title and date."""
        return SOURCES[self.source].citation()

    @property
    def number(self) -> str:
        return self.directory.name.split("-", 1)[0]

    def scenario(self) -> ModuleType:
        """The lab's scenario module (``run(lab)``, optionally ``run_live(lab)``)."""
        spec = importlib.util.spec_from_file_location(
            f"minibroker_lab_{self.name.replace('-', '_')}", self.scenario_path
        )
        if spec is None or spec.loader is None:
            raise LabError(f"cannot load {self.scenario_path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # so the scenario may use dataclasses and the like
        spec.loader.exec_module(module)
        if not hasattr(module, "run"):
            raise LabError(f"{self.scenario_path} has no run(lab) function")
        return module


def sibling_module(scenario_file: str, name: str) -> ModuleType:
    """The module ``name.py`` beside a lab's scenario (labs are loaded from their files,
    not as packages), loaded once: ``sibling_module(__file__, "live")``."""
    directory = Path(scenario_file).resolve().parent
    qualified = f"minibroker_lab_{directory.name.replace('-', '_')}_{name}"
    if qualified not in sys.modules:
        spec = importlib.util.spec_from_file_location(qualified, directory / f"{name}.py")
        if spec is None or spec.loader is None:
            raise LabError(f"cannot load {directory / f'{name}.py'}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[qualified] = module
        spec.loader.exec_module(module)
    return sys.modules[qualified]


def labs_directory() -> Path:
    """Where the labs are: ``$MINIBROKER_LABS``, or ``examples/labs`` of this checkout."""
    env = os.environ.get("MINIBROKER_LABS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "examples" / "labs"


def load_lab(directory: Path) -> Lab:
    """Read ``directory/lab.toml``."""
    path = directory / "lab.toml"
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise LabError(f"cannot read {path}: {exc}") from None
    missing = [k for k in ("name", "title", "source", "run") if k not in data]
    if missing:
        raise LabError(f"{path} lacks {', '.join(missing)}")
    if data["source"] not in SOURCES:
        raise LabError(f"{path}: source must be one of {sorted(SOURCES)}, not {data['source']!r}")
    lab_healthy = _thresholds(path, "[healthy]", data.get("healthy", {}))
    runs = []
    for i, run in enumerate(data["run"]):
        if run.get("expect") not in GRADES:
            raise LabError(f"{path}: run[{i}].expect must be one of {GRADES}, not {run.get('expect')!r}")
        own = _thresholds(path, f"run[{i}].healthy", run.get("healthy", {}))
        healthy = {t.metric: t for t in lab_healthy} | {t.metric: t for t in own}
        config = directory / run["config"]
        if not config.exists():
            raise LabError(f"{path}: run[{i}].config {config.name} does not exist")
        findings = run.get("findings", [])
        if not isinstance(findings, list) or not all(isinstance(f, str) for f in findings):
            raise LabError(f"{path}: run[{i}].findings must be a list of detector names")
        amq_expect = run.get("activemq_expect", "healthy" if run["expect"] == "mitigated" else run["expect"])
        if amq_expect not in VERDICTS:
            raise LabError(f"{path}: run[{i}].activemq_expect must be one of {VERDICTS}, not {amq_expect!r}")
        rabbit_expect = run.get("rabbitmq_expect", "healthy" if run["expect"] == "mitigated" else run["expect"])
        if rabbit_expect not in VERDICTS:
            raise LabError(f"{path}: run[{i}].rabbitmq_expect must be one of {VERDICTS}, not {rabbit_expect!r}")
        runs.append(
            RunSpec(
                run["name"],
                config,
                run["expect"],
                run.get("about", ""),
                tuple(findings),
                amq_expect,
                str(run.get("activemq_not_run", "")),
                str(run.get("activemq_note", "")),
                tuple(healthy.values()),
                rabbitmq_expect=rabbit_expect,
                rabbitmq_not_run=str(run.get("rabbitmq_not_run", "")),
                rabbitmq_note=str(run.get("rabbitmq_note", "")),
            )
        )
    figure = tuple(data.get("figure", ()))
    unknown = [n for n in figure if n not in {r.name for r in runs}]
    if unknown or len(figure) not in (0, 2):
        raise LabError(f"{path}: figure must name two of its runs (the pathology, the cure), not {list(figure)}")
    return Lab(
        directory,
        data["name"],
        data["title"],
        data["source"],
        tuple(runs),
        directory / data.get("scenario", "scenario.py"),
        figure,
        str(data.get("no_live", "")),
        str(data.get("no_activemq", "")),
        tuple(_exercise(path, i, e, {r.name: r for r in runs}) for i, e in enumerate(data.get("exercise", []))),
        bool(data.get("virtual_fsync", True)),
        no_rabbitmq=str(data.get("no_rabbitmq", "")),
    )


def _exercise(path: Path, i: int, data: dict[str, Any], runs: dict[str, RunSpec]) -> Exercise:
    where = f"{path}: exercise[{i}]"
    if not _EXERCISE_ID.match(str(data.get("id", ""))):
        raise LabError(f"{where}.id must be lower-case letters, digits and '-', not {data.get('id')!r}")
    if data.get("kind") not in KINDS:
        raise LabError(f"{where}.kind must be one of {tuple(KINDS)}, not {data.get('kind')!r}")
    if data.get("run") not in runs:
        raise LabError(f"{where}.run must name one of the lab's runs, not {data.get('run')!r}")
    causes = (data["cause"],) if "cause" in data else runs[data["run"]].findings
    if data["kind"] == "diagnose" and not (causes and set(causes) <= set(runs[data["run"]].findings)):
        raise LabError(f"{where}: a diagnose exercise's run must have findings, and its cause be one of them")
    if data["kind"] == "predict" and not data.get("metric"):
        raise LabError(f'{where}: a predict exercise names the metric to predict (or "grade")')
    doctor_names = data.get("doctor_names", [])
    if not isinstance(doctor_names, list) or not all(isinstance(n, str) for n in doctor_names):
        raise LabError(f"{where}.doctor_names must be a list of names")
    keep = data.get("keep", [])
    if not isinstance(keep, list) or not all(isinstance(k, str) and re.match(r"^\w+\.\w+$", k) for k in keep):
        raise LabError(f"{where}.keep must be a list of SECTION.KEY settings")
    tolerance = str(data.get("tolerance", 0))
    try:
        amount = float(tolerance.removesuffix("%"))
    except ValueError:
        raise LabError(f"{where}.tolerance must be a number or 'N%', not {tolerance!r}") from None
    hints = dict(data.get("hints", {}))
    if "hint" in data:
        hints["wrong"] = str(data["hint"])
    return Exercise(
        data["id"],
        data["kind"],
        data["run"],
        str(data.get("metric", "")),
        amount,
        tolerance.endswith("%"),
        tuple(keep),
        hints,
        tuple(causes),
        tuple(doctor_names),
    )


def _thresholds(path: Path, where: str, table: object) -> list[Threshold]:
    if not isinstance(table, dict):
        raise LabError(f'{path}: {where} must be a table of METRIC = "OP NUMBER"')
    try:
        return [Threshold.parse(metric, text) for metric, text in table.items()]
    except ValueError as exc:
        raise LabError(f"{path}: {where}: {exc}") from None


def find_labs(root: Path | None = None) -> list[Lab]:
    """Every lab under ``root`` (default: ``labs_directory()``), in directory order."""
    base = root or labs_directory()
    if not base.is_dir():
        raise LabError(f"no labs directory at {base}")
    return [load_lab(d) for d in sorted(base.iterdir()) if (d / "lab.toml").exists()]
