"""``minibroker analyze``: analyse traces into tables, plots, findings and a report.

The job ``clients.spark.analyze`` reads one or many trace files (the
broker's, from serve --trace, or the client-side trace of minibroker replay
--trace) and writes under --out: report.md, findings.json, PNG plots, and
every table as CSV (csv/NAME.csv; on Spark also Parquet, parquet/NAME/).
Inputs up to about a million events (200 MB) are analysed in this process,
in seconds and without a JVM; larger ones on Spark, in local mode
(local[*]) unless --master or MINIBROKER_SPARK_MASTER says otherwise (on a
cluster run the same job with spark-submit: README, docs/spark.md). The two
engines run the same detectors. A file with no trace line is refused before
either starts. The trace format: docs/trace-schema.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..cli import CommandError
from ._common import USAGE
from .workload import Option, add_options, check_out, job_argv, run_spark_job

__all__ = ["register"]

OPTIONS: list[Option] = [
    ("--bucket", "pos", "S", "seconds per time bucket (default 1)"),
    ("--min-window", "nonneg", "S", "shortest starved or idle window reported, seconds (default 5)"),
    ("--hwm", "pct", "PCT", "cursor high-water mark when the trace does not say (default 70)"),
    ("--swap-gap", "pos", "S", "swaps closer than this belong to one storm (default 5)"),
    ("--swap-min", "int+", "N", "swap_out events that make a storm (default 3)"),
    (
        "--few-live-fraction",
        "frac",
        "F",
        "journal full with live bytes at most this share of capacity is reported (default 0.2)",
    ),
    ("--no-plots", "flag", None, "tables and report only"),
    ("--master", "str", "M", "Spark master (default local[*] or $MINIBROKER_SPARK_MASTER)"),
    (
        "--engine",
        "str",
        "E",
        "auto, spark or inprocess: where to analyse (default auto: in this "
        "process up to about a million events, 200 MB of trace; on Spark above)",
    ),
]


def register(subparsers: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    """Add the ``analyze`` subcommand."""
    parser = subparsers.add_parser(
        "analyze",
        help="analyse traces: tables, plots, findings (Spark)",
        description=__doc__.split("\n\n", 1)[1].replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("traces", nargs="+", metavar="TRACE", help="trace files (JSON lines) or directories of them")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    add_options(parser, OPTIONS)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Run ``minibroker analyze``."""
    argv = job_argv(args, OPTIONS)
    missing = [t for t in args.traces if "://" not in t and not Path(t).exists()]
    if missing:
        raise CommandError(f"no such trace: {', '.join(missing)}", USAGE)
    check_out(args.out)
    local = [t for t in args.traces if "://" not in t]
    if local:  # a file with no trace line: said here, as every command says what is wrong
        from clients.spark.findings import TraceFormatError
        from clients.spark.inprocess_tables import check_inputs

        try:
            check_inputs(local)
        except TraceFormatError as exc:
            raise CommandError(str(exc), USAGE) from None
    return run_spark_job("clients.spark.analyze", [*args.traces, "--out", args.out, *argv])
