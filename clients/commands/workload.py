"""``minibroker workload generate``: expand a workload file into an action table.

Two engines write the same table: in this process (numpy and pyarrow, no
JVM; the default on one machine) or the Spark job ``clients.spark.workload``
(--engine spark, or when --master or MINIBROKER_SPARK_MASTER names a Spark
master; on a cluster run the same job with spark-submit:
docs/spark.md). The file is checked first, so a bad file costs no JVM
start. Output: OUT/actions.parquet/ (what minibroker replay
plays), OUT/summary.json, and with --format parquet,jsonl OUT/actions.jsonl/
too (the same rows as JSON lines). The format of the file and of
the table: docs/workloads.md.
"""

from __future__ import annotations

import argparse
import importlib
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from clients.spark.session import spark_error

from ..cli import SPARK_EXTRA_HINT, CommandError
from ._common import FAILURE, USAGE

__all__ = ["register", "run_spark_job", "job_argv", "Option"]

#: One option passed through to a Spark job: (flag, kind, metavar, help). ``kind`` is
#: how it is checked (``KINDS``), or "flag" (no value) or "str" (as is).
Option = tuple[str, str, str | None, str]

OPTIONS: list[Option] = [
    ("--scale", "pos", "N", "multiply every group's client count (default 1)"),
    ("--seed", "int", "S", "override [workload].seed"),
    ("--format", "str", "F", "comma-separated: parquet, jsonl (default parquet; replay reads either)"),
    ("--engine", "engine", "E", "auto (default), inprocess or spark: where the table is made; the same table"),
    ("--partitions", "int+", "N", "Spark partitions for the expansion"),
    ("--chunk", "int+", "N", "messages per task chunk (default 100000)"),
    ("--part-rows", "int+", "N", "in process: about N rows per part file (default 1000000)"),
    ("--master", "str", "M", "Spark master (default local[*] or $MINIBROKER_SPARK_MASTER)"),
]
FORMATS = ("parquet", "jsonl")
ENGINES = ("auto", "inprocess", "spark")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``workload`` subcommand and its ``generate`` action."""
    parser = subparsers.add_parser(
        "workload",
        help="generate a workload's action table (in process, or on Spark)",
        description=__doc__.split("\n\n", 1)[1].replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    gen = actions.add_parser(
        "generate",
        help="expand WORKLOAD.toml into an action table",
        description=__doc__.split("\n\n", 1)[1].replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    gen.add_argument("workload", metavar="WORKLOAD.toml", help="the workload file")
    gen.add_argument("--out", required=True, metavar="DIR", help="output directory")
    add_options(gen, OPTIONS)
    gen.set_defaults(func=generate)


def add_options(parser: argparse.ArgumentParser, options: Sequence[Option]) -> None:
    for flag, kind, metavar, text in options:
        if kind == "flag":
            parser.add_argument(flag, action="store_true", help=text)
        else:
            parser.add_argument(flag, metavar=metavar, help=text)


#: kind -> (what it wants, how to read it, the test it must pass)
KINDS: dict[str, tuple[str, Callable[[str], float], Callable[[float], bool]]] = {
    "pos": ("a number > 0", float, lambda n: n > 0),
    "nonneg": ("a number >= 0", float, lambda n: n >= 0),
    "frac": ("a number > 0 and <= 1", float, lambda n: 0 < n <= 1),
    "int": ("an integer", int, lambda n: True),
    "int+": ("an integer >= 1", int, lambda n: n >= 1),
    "pct": ("an integer from 0 to 100", int, lambda n: 0 <= n <= 100),
}


def _check(flag: str, kind: str, value: str) -> None:
    """A one-line ``CommandError`` when ``value`` is not what ``kind`` wants."""
    if kind == "engine":
        if value not in ENGINES:
            raise CommandError(f"bad {flag} {value!r}: expected {', '.join(ENGINES)}", USAGE)
        return
    if kind not in KINDS:
        return
    wanted, read, test = KINDS[kind]
    try:
        number = read(value)
        ok = math.isfinite(number) and test(number)
    except ValueError:
        ok = False
    if not ok:
        raise CommandError(f"bad {flag} {value!r}: expected {wanted}", USAGE)


def job_argv(args: argparse.Namespace, options: Sequence[Option]) -> list[str]:
    """The checked options of ``args`` as the Spark job's own command line."""
    argv: list[str] = []
    for flag, kind, _metavar, _text in options:
        value: Any = getattr(args, flag[2:].replace("-", "_"))
        if kind == "flag":
            argv += [flag] if value else []
        elif value is not None:
            _check(flag, kind, value)
            argv += [flag, value]
    return argv


def check_out(out: str) -> None:
    """Refuse an output directory that is a file, or lies under one."""
    if "://" in out:
        return
    for place in (Path(out), *Path(out).parents):
        if place.exists():
            if not place.is_dir():
                what = "" if place == Path(out) else f": {str(place)!r}"
                raise CommandError(f"--out {out!r} is a file, not a directory{what}", USAGE)
            return


def run_spark_job(module: str, argv: list[str]) -> int:
    """Run ``module.main(argv)`` (a Spark job); its failures become one line.

    PySpark is imported here, never when the command line is parsed.
    """
    try:
        job = importlib.import_module(module)
        from clients.spark.session import spark_errors

        failures: tuple[type[BaseException], ...] = (*spark_errors(), OSError)
    except ImportError as exc:
        raise CommandError(
            f"needs the spark extra ({exc.name} is not installed): {SPARK_EXTRA_HINT}", FAILURE
        ) from None
    try:
        return int(job.main(argv) or 0)
    except SystemExit as exc:  # the job's own argument parser
        return exc.code if isinstance(exc.code, int) else USAGE
    except failures as exc:
        raise CommandError(f"Spark failed: {spark_error(exc)}", FAILURE) from None


def generate(args: argparse.Namespace) -> int:
    """Run ``minibroker workload generate``."""
    from clients.spark.workload_spec import WorkloadError, load_workload

    argv = job_argv(args, OPTIONS)
    if args.format is not None:
        formats = {f.strip() for f in args.format.split(",") if f.strip()}
        if not formats or formats - set(FORMATS):
            raise CommandError(f"bad --format {args.format!r}: expected parquet, jsonl or parquet,jsonl", USAGE)
    check_out(args.out)
    if args.engine == "inprocess":
        from clients.spark.workload_engine import inprocess_refusal

        refusal = inprocess_refusal(args.out, args.master)
        if refusal:
            raise CommandError(refusal, USAGE)
    try:  # check the file without starting a JVM
        load_workload(args.workload, scale=float(args.scale or 1))
    except FileNotFoundError:
        raise CommandError(f"no such workload file: {args.workload}", USAGE) from None
    except OSError as exc:
        raise CommandError(f"cannot read {args.workload}: {exc.strerror or exc}", USAGE) from None
    except WorkloadError as exc:
        raise CommandError(str(exc), USAGE) from None
    return run_spark_job("clients.spark.workload", [args.workload, "--out", args.out, *argv])
