"""Lab definitions: ``lab.toml`` read and checked.

::

    name = "starving-consumers"
    title = "Starving consumers when no destination has a memory limit"
    source = "destination-limits"     # the public document, a key of clients.sources.SOURCES
    scenario = "scenario.py"          # default
    no_live = "why"                   # only for a lab without run_live: why it has no --live
    figure = ["legacy", "cure"]       # the runs the lab's figure compares (default: the first
                                      # pathology run and the first healthy one)

    [[run]]
    name = "legacy"                   # passed to the scenario as run.name
    config = "legacy.toml"            # broker configuration, beside lab.toml
    expect = "pathology"              # or "healthy"
    about = "ActiveMQ <= 5.14 space check, no destination limits"
    findings = ["starved_consumer"]   # what the trace analysis must find (default: nothing)
    activemq_expect = "healthy"       # the verdict expected of ActiveMQ 5.17 (--against activemq;
                                      # default: the run's own expect)
    activemq_not_run = "why"          # a run ActiveMQ cannot be made to show: not started
    activemq_note = "what"            # what the comparison with ActiveMQ showed, printed with it
    rabbitmq_expect, rabbitmq_not_run, rabbitmq_note   # the same for RabbitMQ 3.10 (--against rabbitmq)

A lab whose scenario has no ``run_activemq`` says why with ``no_activemq = "why"``;
one without ``run_rabbitmq``, with ``no_rabbitmq = "why"``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from minibroker.config import BrokerConfig, load_config

from ..sources import SOURCES

__all__ = ["Lab", "RunSpec", "LabError", "find_labs", "labs_directory", "load_lab", "sibling_module"]

VERDICTS = ("pathology", "healthy")


class LabError(Exception):
    """A lab that cannot be found or is badly defined."""


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
    #: The same three for RabbitMQ (``--against rabbitmq``).
    rabbitmq_expect: str = ""
    rabbitmq_not_run: str = ""
    rabbitmq_note: str = ""

    def config(self) -> BrokerConfig:
        return load_config(self.config_path)


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
    runs = []
    for i, run in enumerate(data["run"]):
        if run.get("expect") not in VERDICTS:
            raise LabError(f"{path}: run[{i}].expect must be one of {VERDICTS}, not {run.get('expect')!r}")
        config = directory / run["config"]
        if not config.exists():
            raise LabError(f"{path}: run[{i}].config {config.name} does not exist")
        findings = run.get("findings", [])
        if not isinstance(findings, list) or not all(isinstance(f, str) for f in findings):
            raise LabError(f"{path}: run[{i}].findings must be a list of detector names")
        amq_expect = run.get("activemq_expect", run["expect"])
        if amq_expect not in VERDICTS:
            raise LabError(f"{path}: run[{i}].activemq_expect must be one of {VERDICTS}, not {amq_expect!r}")
        rabbit_expect = run.get("rabbitmq_expect", run["expect"])
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
        no_rabbitmq=str(data.get("no_rabbitmq", "")),
    )


def find_labs(root: Path | None = None) -> list[Lab]:
    """Every lab under ``root`` (default: ``labs_directory()``), in directory order."""
    base = root or labs_directory()
    if not base.is_dir():
        raise LabError(f"no labs directory at {base}")
    return [load_lab(d) for d in sorted(base.iterdir()) if (d / "lab.toml").exists()]
