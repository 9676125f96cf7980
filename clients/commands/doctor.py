"""``minibroker doctor``: check a configuration for known traps.

CONFIG is our TOML configuration or an ActiveMQ activemq.xml (recognised by
its .xml name or its leading "<"); without CONFIG the embedded default
configuration is checked. Each finding names its trap, the values that
trigger it, why it matters and the fix, in the file's own syntax.

Exit status: 0 no warnings (notes allowed), 1 warnings or errors found,
2 the file cannot be read or holds a bad value. The checks are described in
docs/doctor.md.
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

from minibroker.config import parse_size

from ..cli import CommandError
from ..doctor import DoctorError, exit_status, format_json, format_text, read, run_checks

__all__ = ["register"]


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check a configuration (ours or activemq.xml) for known traps",
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
    parser.set_defaults(func=_doctor)


def _doctor(args: argparse.Namespace) -> int:
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
