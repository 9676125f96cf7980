"""``minibroker bench``: the side-by-side benchmark (``bench/compare.py``).

Runs the shared STOMP harness against minibroker and, with ``--with-activemq``,
against Debian's ActiveMQ started beside it, alternating rep by rep, and
prints msg/s, p50/p99 latency, CPU and RSS for each with the ratio
ours/ActiveMQ. Every option is passed to ``bench/compare.py`` (see its
``--help``); ``make bench BENCH_ARGS=...`` does the same.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

from ..cli import CommandError

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="benchmark against ActiveMQ",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
    )
    parser.add_argument("options", nargs=argparse.REMAINDER, help="options for bench/compare.py (try --help)")
    parser.set_defaults(func=main, passthrough=True)


def main(args: argparse.Namespace) -> int:
    script = Path(__file__).resolve().parents[2] / "bench" / "compare.py"
    if not script.exists():
        raise CommandError(f"the benchmark is not here ({script}): run it from a checkout of the repository")
    return subprocess.call([sys.executable, str(script), *args.options])
