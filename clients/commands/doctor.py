"""``minibroker doctor``: check a configuration for the seeds' traps.

CONFIG is our TOML configuration or an ActiveMQ activemq.xml (recognised by
its .xml name or its leading "<"); without CONFIG the embedded default
configuration is checked. Each finding names its seed, the values that
trigger it, why it matters and the fix, in the file's own syntax.

Exit status: 0 no warnings (notes allowed), 1 warnings or errors found,
2 the file cannot be read or holds a bad value. The checks are described in
docs/doctor.md.
"""
from __future__ import annotations

import argparse

from minibroker.config import parse_size

from ..cli import CommandError
from ..doctor import DoctorError, exit_status, format_json, format_text, read, run_checks

__all__ = ["register"]


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    parser = subparsers.add_parser("doctor", help="check a configuration (ours or activemq.xml) for known traps",
                                   description=(__doc__ or "").replace("``", ""), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", metavar="CONFIG", nargs="?",
                        help="minibroker TOML or ActiveMQ activemq.xml (default: the embedded configuration)")
    parser.add_argument("--json", action="store_true", help="print the findings as JSON")
    parser.add_argument("--heap", metavar="SIZE",
                        help="JVM heap (-Xmx) for activemq.xml's percentOfJvmHeap, e.g. \"2 gb\" (default: 1 gb)")
    parser.set_defaults(func=_doctor)


def _doctor(args: argparse.Namespace) -> int:
    heap = None
    if args.heap is not None:
        try:
            heap = parse_size(args.heap)
        except ValueError as exc:
            raise CommandError(f"bad --heap {args.heap!r}: {exc}") from None
    try:
        setup = read(args.config, heap=heap)
    except DoctorError as exc:
        raise CommandError(str(exc)) from None
    findings = run_checks(setup)
    print(format_json(setup, findings) if args.json else format_text(setup, findings))
    return exit_status(findings)
