"""``minibroker doctor``: check a configuration for known traps.

CONFIG is our TOML configuration or an ActiveMQ activemq.xml (recognised by
its .xml name or its leading "<"); without CONFIG the embedded default
configuration is checked. Each finding names its trap, the values that
trigger it, why it matters and the fix, in the file's own syntax.

With --live URL it reads a running broker instead: stomp://[USER:PASS@]HOST:PORT
(ActiveMQ through its statistics plugin, or minibroker), http://[USER:PASS@]HOST:PORT/
(RabbitMQ's management API, or ActiveMQ's Jolokia). It samples about once a
second for --window seconds (or again and again with --watch SECONDS) and
reports each pathology the labs teach that the samples show: the evidence with
times, the public write-up, the fix in the broker's syntax and the lab.

Exit status: 0 no warnings (notes allowed), 1 warnings or errors found,
2 the file cannot be read or holds a bad value (--live: the broker cannot be
read). The checks are described in docs/doctor.md.
"""

from __future__ import annotations

import argparse
import asyncio
import tomllib
from pathlib import Path

from minibroker.config import parse_size

from ..cli import CommandError
from ..doctor import DoctorError, exit_status, format_json, format_text, read, run_checks
from ..doctor.live import format_live_json, format_live_text, live_status, parse_target, run_live
from ._common import parse_float

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check a configuration (ours or activemq.xml), or a running broker (--live), for known traps",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "config",
        metavar="CONFIG",
        nargs="?",
        help="minibroker TOML or ActiveMQ activemq.xml (default: the embedded configuration)",
    )
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument(
        "--heap",
        metavar="SIZE",
        help='JVM heap (-Xmx) for activemq.xml\'s percentOfJvmHeap, e.g. "2 gb" (default: 1 gb)',
    )
    live = parser.add_argument_group("a running broker")
    live.add_argument("--live", metavar="URL", help="read a running broker: stomp://HOST:PORT or http://HOST:PORT/")
    live.add_argument("--window", default="10", metavar="S", help="seconds to sample (default: %(default)s)")
    live.add_argument("--watch", metavar="S", help="keep sampling: a report every S seconds until interrupted")
    live.add_argument(
        "--timeout", default="5", metavar="S", help="seconds to wait for each answer (default: %(default)s)"
    )
    live.add_argument("--user", help="the broker's user (instead of the URL's)")
    live.add_argument("--password", help="the user's password (instead of the URL's)")
    parser.set_defaults(func=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    if args.live is not None:
        return _live(args)
    heap = None
    if args.heap is not None:
        try:
            heap = parse_size(args.heap)
        except ValueError as exc:
            raise CommandError(f"bad --heap {args.heap!r}: {exc}") from None
    if args.config is not None:
        _refuse_a_lab_description(Path(args.config))
    try:
        setup = read(args.config, heap=heap)
    except DoctorError as exc:
        raise CommandError(str(exc)) from None
    findings = run_checks(setup)
    print(format_json(setup, findings) if args.json else format_text(setup, findings))
    return exit_status(findings)


def _refuse_a_lab_description(path: Path) -> None:
    """A lab's ``lab.toml`` describes runs, each with its own configuration:
    say so, and which files to check, rather than "unknown key 'name'"."""
    if path.suffix != ".toml":
        return
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return  # read() says what is wrong with it
    runs = data.get("run")
    if not (isinstance(runs, list) and runs and all(isinstance(r, dict) for r in runs)):
        return
    configs = sorted({str(r["config"]) for r in runs if "config" in r})
    check = " ".join(f"minibroker doctor {path.parent / c}" for c in configs[:1])
    raise CommandError(
        f"{path} is a lab description, not a broker configuration: its runs use "
        f"{', '.join(configs) or 'the embedded configuration'}" + (f" (e.g. {check})" if check else "")
    )


def _live(args: argparse.Namespace) -> int:
    """Sample the broker at ``--live`` and report; every failure to read it is one line, status 2."""
    if args.config is not None:
        raise CommandError("give a configuration file or --live URL, not both")
    window = parse_float(args.watch if args.watch is not None else args.window, "--watch" if args.watch else "--window")
    timeout = parse_float(args.timeout, "--timeout")
    try:
        target = parse_target(args.live, args.user, args.password)
        while True:
            report = asyncio.run(run_live(target, window, timeout=timeout))
            print(format_live_json(report) if args.json else format_live_text(report), flush=True)
            if args.watch is None:
                return live_status(report)
    except DoctorError as exc:
        raise CommandError(str(exc)) from None
    except KeyboardInterrupt:
        return 0
