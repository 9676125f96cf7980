"""The ``minibroker`` command: one entry point, one subcommand per job.

Every subcommand lives in ``clients.commands.<name>``. Errors the user can fix
(a bad value, a broker that refuses or cannot be reached) are printed as one
line naming the bad value and exit non-zero; they never show a traceback.
Output piped into a reader that stops early (``minibroker stat | head -1``)
ends the command quietly, as it ends ``cat``: no traceback, status 141
(128 + SIGPIPE, what a shell reports for a tool killed by SIGPIPE).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence

from minibroker.errors import BrokerError

from .commands import COMMANDS

__all__ = ["main", "build_parser", "command_named", "CommandError", "silence_stdout", "CLOSED_OUTPUT"]

#: Exit status when stdout was closed under us (as a shell reports SIGPIPE).
CLOSED_OUTPUT = 128 + signal.SIGPIPE
#: The modules of the ``spark`` extra (PySpark and what the trace and workload jobs read
#: and draw with), which ``make run`` does not install.
SPARK_EXTRA_MODULES = ("pyspark", "py4j", "pyarrow", "numpy", "matplotlib")
#: How to install them, said in one line by a command that needs them.
SPARK_EXTRA_HINT = "make spark (or pip install 'minibroker[spark]'; Spark jobs also need Java 17)"


class CommandError(Exception):
    """A failure the user can act on; printed as ``minibroker <cmd>: <text>``."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered, or only the one
    named ``only`` (what a run of that command needs: the others' modules are
    not imported, which keeps ``serve``'s start short)."""
    parser = argparse.ArgumentParser(
        prog="minibroker",
        description="A teaching STOMP broker and its tools.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMANDS if only is None else [only]:
        module = importlib.import_module(f"clients.commands.{name}")
        module.register(subparsers)
    return parser


def command_named(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` runs, when its first word names one; else None
    (``--help``, no command, a misspelt one: the full parser answers)."""
    return argv[0] if argv and argv[0] in COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``minibroker`` with ``argv`` (default: ``sys.argv[1:]``)."""
    try:
        try:
            return _dispatch(argv)
        finally:  # also after --help: a closed pipe must fail here, not in the exit's flush
            sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()
        return CLOSED_OUTPUT


def _dispatch(argv: Sequence[str] | None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(command_named(words))
    args, extra = parser.parse_known_args(words)
    if extra:
        if not getattr(args, "passthrough", False):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.options = [*extra, *getattr(args, "options", [])]
    try:
        return int(args.func(args) or 0)
    except CommandError as exc:
        print(f"minibroker {args.command}: {exc}", file=sys.stderr)
        return exc.status
    except BrokerError as exc:
        print(f"minibroker {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in SPARK_EXTRA_MODULES:
            raise
        print(
            f"minibroker {args.command}: needs the spark extra ({exc.name} is not installed): {SPARK_EXTRA_HINT}",
            file=sys.stderr,
        )
        return 1


def silence_stdout() -> None:
    """Point stdout's descriptor at /dev/null, so that whatever is still
    buffered (and the interpreter's flush at exit) goes nowhere instead of
    raising ``BrokenPipeError`` again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    # Run as ``python -m clients.cli``: use the package's module, not this
    # ``__main__`` copy, so its CommandError is the one the commands raise.
    from clients.cli import main as package_main

    sys.exit(package_main())
