"""What a class does with a lab: one run, a setting changed or swept, the exercises, a check.

``lab run NN --run NAME`` plays one run; ``--set KEY=VALUE`` (repeatable) changes a
configuration key of every run played (``clients.labs.settings``: validated as the file
is); ``--sweep KEY=V1,V2,...`` plays one run (``--run``, default the lab's figure's
pathology run) once per value and prints the outcome against the setting (a plot under
``--plot DIR``); ``--brief`` prints each run's grade and its three most telling lines.
With ``--set`` or ``--sweep`` the exit status is 0 when every run ran: the grades are the
answer, the lab's promises are about its own configurations.

``lab exercises NN`` lists the lab's exercises (``lab exercises NN ID`` prints one);
``lab check NN --config FILE | --client FILE.py | --answer FILE [--exercise ID]`` grades an
answer (``clients.labs.check``) and exits 0 only when it passes (cured, or right).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from minibroker.errors import ConfigError

from ..cli import CommandError
from ..labs import Lab, LabError, RunSpec
from ..labs.check import check, pick_exercise
from ..labs.model import KINDS
from ..labs.runner import student_pages
from ..labs.settings import parse_setting, parse_sweep
from .lab_select import find_lab

__all__ = ["add_run_options", "register_actions", "chosen_specs", "run_sweep", "wants_sweep"]


def add_run_options(run: argparse.ArgumentParser) -> None:
    """``lab run``'s options for a class: --run, --set, --sweep, --brief."""
    run.add_argument("--run", metavar="NAME", dest="only", help="play only the run NAME")
    run.add_argument(
        "--set",
        metavar="KEY=VALUE",
        action="append",
        default=[],
        dest="settings",
        help="change a configuration key of the runs played (e.g. destination_policy[orders.>].max_page_size=100)",
    )
    run.add_argument(
        "--sweep",
        metavar="KEY=V1,V2,...",
        help="play one run once per value of KEY and print the outcome against it (with --plot: drawn)",
    )
    run.add_argument("--brief", action="store_true", help="each run's grade and its three most telling lines")


def register_actions(actions: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``lab exercises`` and ``lab check``."""
    ex = actions.add_parser("exercises", help="list a lab's exercises, or print one")
    ex.add_argument("name", metavar="NAME", help="lab name, directory name or number")
    ex.add_argument("exercise", metavar="ID", nargs="?", help="print this exercise's text")
    ex.add_argument("--labs", metavar="DIR", help="labs directory (default: examples/labs)")
    ex.set_defaults(func=_exercises)
    ch = actions.add_parser("check", help="grade an answer to one of a lab's exercises")
    ch.add_argument("name", metavar="NAME", help="lab name, directory name or number")
    what = ch.add_mutually_exclusive_group(required=True)
    what.add_argument("--config", metavar="FILE", help="a broker configuration: our TOML or an activemq.xml")
    what.add_argument("--client", metavar="FILE.py", help="a consumer, a Python file")
    what.add_argument("--answer", metavar="FILE", help="an answer file: answer = ...")
    ch.add_argument("--exercise", metavar="ID", help="the exercise (needed when several take that option)")
    ch.add_argument("--labs", metavar="DIR", help="labs directory (default: examples/labs)")
    ch.set_defaults(func=_check)


def wants_sweep(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "sweep", None))


def chosen_specs(args: argparse.Namespace, lab: Lab) -> list[RunSpec] | None:
    """The runs ``--run`` and ``--set`` ask for (None: every run, as the lab has them)."""
    if not args.only and not args.settings:
        return None
    try:
        settings = [parse_setting(text) for text in args.settings]
        specs = [lab.run_named(args.only)] if args.only else list(lab.runs)
        return [spec.with_settings(*settings) for spec in specs]
    except (ConfigError, LabError) as exc:
        raise CommandError(str(exc)) from None


def run_sweep(args: argparse.Namespace, lab: Lab) -> int:
    from ..labs.sweep import sweep

    if args.live or args.console is not None or args.against:
        raise CommandError("--sweep runs on the virtual clock (not with --live, --console or --against)")
    try:
        key, values = parse_sweep(args.sweep)
        spec = lab.run_named(args.only or (lab.figure[0] if lab.figure else lab.runs[0].name))
        spec = spec.with_settings(*[parse_setting(text) for text in args.settings])
        sweep(lab, spec, key, values, plot_dir=Path(args.plot) if args.plot else None)
    except (ConfigError, LabError) as exc:
        raise CommandError(str(exc)) from None
    return 0


def _lab(args: argparse.Namespace) -> Lab:
    return find_lab(args)


def _exercises(args: argparse.Namespace) -> int:
    lab = _lab(args)
    if not lab.exercises:
        raise CommandError(f"lab {lab.directory.name} has no exercises")
    if args.exercise is not None:
        found = [e for e in lab.exercises if e.id == args.exercise]
        if not found:
            raise CommandError(
                f"lab {lab.directory.name} has no exercise {args.exercise!r}; its exercises: "
                + ", ".join(e.id for e in lab.exercises)
            )
        print(lab.exercise_text(found[0]))
        print(f"\nCheck it: minibroker lab check {lab.number} --exercise {found[0].id} {found[0].option} FILE")
        return 0
    print(f"Lab {lab.directory.name}: {len(lab.exercises)} exercises ({lab.directory / 'exercises.md'})")
    for line in student_pages(lab):
        print(f"  {line}")
    for e in lab.exercises:
        title = lab.exercise_text(e).split("\n", 1)[0].split(":", 1)[-1].strip()
        print(f"  {e.id:24s} {e.kind:9s} {title}")
        print(f"  {'':24s} {'':9s} minibroker lab check {lab.number} --exercise {e.id} {e.option} FILE")
    return 0


def _check(args: argparse.Namespace) -> int:
    lab = _lab(args)
    option, path = next((f"--{k}", getattr(args, k)) for k in ("config", "client", "answer") if getattr(args, k))
    assert option in KINDS.values()
    try:
        exercise = pick_exercise(lab, args.exercise, option)
        result = check(lab, exercise, Path(path))
    except LabError as exc:
        raise CommandError(str(exc)) from None
    for line in result.lines():
        print(line)
    return 0 if result.passed else 1
