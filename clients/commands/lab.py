"""``minibroker lab``: list the labs, run one.

``lab list`` names every lab under ``examples/labs`` with its title and the public
document it reproduces.
``lab run NAME`` runs both (or all) of its configurations on the virtual
clock, in seconds, and prints a verdict per configuration with the evidence
from the broker's statistics and trace; it exits 0 only when every verdict
is the one the lab promises. ``--plot DIR`` also writes each run's trace and
its analysis (findings, tables, PNG plots, report) under DIR, and the lab's
figure, the pathology beside its cure, as DIR/<lab>.png; ``--live`` runs the
lab against the real server with real sockets, where the lab supports it;
``--live --console [PORT]`` has those brokers serve the web console (8161 when
free, else a free port; the address is printed) so a class watches the run,
and keeps the last one serving until Ctrl-C (or ``--console-hold SECONDS``);
without ``--live``, ``--console`` replays the recorded runs in the console after
the verdicts, ``--speed`` lab seconds per second to start with (default 1): each
page plays the runs with its own controls (play, pause, step from one event to
the next, scrub, speed). ``--export FILE.html`` writes the same replay as one
self-contained file, which plays offline with no broker; with ``--live``, of the
live runs, as the broker's statistics showed them every 0.3 s.
``--against activemq`` plays each live run
on our server and on Debian's ActiveMQ, started with the run's configuration
written as activemq.xml, and prints both verdicts side by side (and what
activemq.xml cannot say, such as the space check of ActiveMQ 5.14 and older);
``--against rabbitmq`` does the same with a RabbitMQ 3.10 node of our own (Debian's).
``lab run NN --run NAME`` plays one run, ``--set KEY=VALUE`` changes a configuration key,
``--sweep KEY=V1,V2,...`` plays a run once per value and tabulates the outcome, ``--brief``
prints each run's grade and three lines of evidence; ``lab exercises NN`` lists a lab's
exercises and ``lab check NN --config FILE | --client FILE.py | --answer FILE`` grades an
answer (exit 0 only when it passes). Every run is graded pathology, mitigated or healthy
(the thresholds in the lab's lab.toml; docs/labs.md). NAME is the lab's name, its directory name, or its number.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..cli import CommandError
from ..labs import LabError, run_lab
from ..labs.console import LabConsole
from ..labs.export import ExportError, write_export
from ..labs.replay import RecordedReplay, replay_document
from . import lab_class
from .lab_select import all_labs, find_lab

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "lab",
        help="list and run the labs",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    lst = actions.add_parser("list", help="name every lab")
    lst.add_argument("--labs", metavar="DIR", help="labs directory (default: examples/labs)")
    lst.set_defaults(func=_list)
    run = actions.add_parser("run", help="run a lab and print its verdicts")
    run.add_argument("name", metavar="NAME", help="lab name, directory name or number")
    run.add_argument("--plot", metavar="DIR", help="also write traces, their analysis and the lab's figure under DIR")
    run.add_argument("--live", action="store_true", help="run against the real server instead of the virtual clock")
    run.add_argument(
        "--watch",
        action="store_true",
        help="with --live: show the broker's statistics and the run's timeline while each run goes",
    )
    run.add_argument(
        "--console",
        metavar="PORT",
        nargs="?",
        type=_port,
        const=-1,
        default=None,
        help="serve the web console for the run (PORT: default 8161 if free, else a free one; 0 = any free port)",
    )
    run.add_argument(
        "--console-hold",
        metavar="SECONDS",
        type=float,
        default=None,
        help="with --console: keep serving this long after the last run, or the replay's end (default: until Ctrl-C)",
    )
    run.add_argument(
        "--speed",
        metavar="X",
        type=float,
        default=None,
        help="with --console on the virtual clock: lab seconds replayed per second (default 1)",
    )
    # The replay and its export.
    run.add_argument(
        "--export",
        metavar="FILE.html",
        help="also write the runs' replay as one self-contained HTML file that plays offline (no broker, no network)",
    )
    run.add_argument(
        "--against",
        choices=AGAINST,
        help="also run each live run against Debian's ActiveMQ (started with the run's configuration as "
        "activemq.xml) or RabbitMQ (a node of our own), and print both verdicts side by side",
    )
    run.add_argument("--labs", metavar="DIR", help="labs directory (default: examples/labs)")
    run.set_defaults(func=_run)
    # A class's options and actions (--run, --set, --sweep, --brief; exercises, check): lab_class.py
    lab_class.add_run_options(run)
    lab_class.register_actions(actions)


#: The brokers ``lab run --against`` compares with.
AGAINST = ("activemq", "rabbitmq")


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -2
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r} (0 to 65535; 0 = any free port)")
    return port


def _list(args: argparse.Namespace) -> int:
    for lab in all_labs(args):
        print(f"{lab.directory.name:32s} {lab.title}")
        print(f"{'':32s} source: {lab.citation}")
        print(f"{'':32s} live: {'no: ' + lab.no_live if lab.no_live else 'yes (--live)'}")
        print(
            f"{'':32s} against ActiveMQ: {'no: ' + lab.no_activemq if lab.no_activemq else 'yes (--against activemq)'}"
        )
        rabbit = "no: " + lab.no_rabbitmq if lab.no_rabbitmq else "yes (--against rabbitmq)"
        print(f"{'':32s} against RabbitMQ: {rabbit}")
    return 0


def _run(args: argparse.Namespace) -> int:
    matches = [find_lab(args)]
    if lab_class.wants_sweep(args):
        return lab_class.run_sweep(args, matches[0])
    specs = lab_class.chosen_specs(args, matches[0])
    if args.against is not None:
        return _against(args, matches[0])
    plot_dir = Path(args.plot) if args.plot else None
    console = None
    if args.console is not None:
        if args.live and args.speed is not None:
            raise CommandError("--speed is for the replay on the virtual clock; a --live run goes at its own pace")
        if args.speed is not None and args.speed <= 0:
            raise CommandError(f"--speed must be above 0, not {args.speed:g}")
        console = LabConsole(None if args.console == -1 else args.console)
    elif args.console_hold is not None or args.speed is not None:
        raise CommandError("--console-hold and --speed need --console")
    if args.watch and not args.live:
        raise CommandError("--watch needs --live (it watches the real server)")
    export = _export_path(args)
    replaying = not args.live and console is not None
    if replaying or export is not None:
        _say_what_runs(matches[0], args.live, replaying, export)
    watch = _terminal_writer() if args.watch else None
    try:
        results = run_lab(
            matches[0],
            live=args.live,
            plot_dir=plot_dir,
            console=console if args.live else None,
            record=replaying or export is not None,
            watch=watch,
            specs=specs,
            brief=args.brief,
        )
    except LabError as exc:
        if console is not None:
            console.release()
        raise CommandError(str(exc)) from None
    except BaseException:
        if console is not None:
            console.release()
        raise
    if plot_dir is not None:
        from ..labs.figure import lab_figure

        drawn = lab_figure(matches[0], results, plot_dir)
        if drawn is not None:
            print(f"The lab's figure, {' and '.join(drawn.runs)} side by side: {drawn.path}")
    recordings = [r.recording for r in results if r.recording is not None and r.recording.times]
    if (export is not None or replaying) and not recordings:
        if console is not None:
            console.release()
        raise CommandError("no run of the lab was recorded: there is nothing to replay")
    if export is not None:
        try:
            size = write_export(replay_document(matches[0], recordings, args.speed or 1.0), export)
        except (ExportError, OSError) as exc:
            if console is not None:
                console.release()
            raise CommandError(f"cannot write {export}: {exc}") from None
        print(f"The replay, one file that plays offline: {export} ({size / 1024:.0f} KiB)", flush=True)
    if console is not None:
        if not args.live:
            replay = RecordedReplay(matches[0], recordings, args.speed or 1.0)
            console.replay(replay, Path(tempfile.mkdtemp(prefix="minibroker-lab-replay-")))
        console.hold(args.console_hold)
    if args.settings:
        return 0  # a changed configuration: the grades are the answer, not the lab's promises
    return 0 if all(r.as_promised for r in results) else 1


def _export_path(args: argparse.Namespace) -> Path | None:
    """Where ``--export`` writes, checked before the lab runs."""
    if args.export is None:
        return None
    path = Path(args.export)
    if not path.parent.is_dir():
        raise CommandError(f"--export {args.export}: no directory {str(path.parent)!r} to write it in")
    return path


def _say_what_runs(lab, live: bool, console: bool, export: Path | None) -> None:
    """Before the runs (which take a while): what the command does, and what comes after."""
    runs = len(lab.runs)
    then = [
        w for w, on in (("the console replays them", console), (f"the replay is written to {export}", export)) if on
    ]
    print(
        f"running the lab: {runs} run{'s' if runs != 1 else ''} {'live' if live else 'on the virtual clock'} "
        f"({', '.join(spec.name for spec in lab.runs)}); then {' and '.join(then)}",
        flush=True,
    )


def _against(args: argparse.Namespace, lab) -> int:
    """``--against activemq`` or ``rabbitmq``: both brokers, the verdicts side by side."""
    from ..labs.against import run_against_activemq, run_against_rabbitmq

    others = [
        opt
        for opt, on in (
            ("--plot", args.plot),
            ("--console", args.console is not None),
            ("--watch", args.watch),
            ("--export", args.export),
        )
        if on
    ]
    if others:
        raise CommandError(f"--against {args.against} runs alone (not with {', '.join(others)})")
    import signal

    def terminated(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)  # unwinds through the runs' finally blocks: every broker is stopped

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        comparisons = (run_against_rabbitmq if args.against == "rabbitmq" else run_against_activemq)(lab)
    except LabError as exc:
        raise CommandError(str(exc)) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0 if all(c.as_expected for c in comparisons) else 1


def _terminal_writer() -> Callable[[str], None]:
    """Frames go to the terminal (stderr), so stdout keeps only the verdicts."""

    def write(frame: str) -> None:
        sys.stderr.write(frame)
        sys.stderr.flush()

    return write
