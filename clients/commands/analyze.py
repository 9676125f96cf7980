"""``minibroker analyze``: analyse traces into tables, plots, findings and a report.

The job ``clients.spark.analyze`` reads one or many trace files (the
broker's, from serve --trace, or the client-side trace of minibroker replay
--trace) and writes under --out: report.md, findings.json, PNG plots, and
every table as CSV (csv/NAME.csv; on Spark also Parquet, parquet/NAME/).
Inputs up to about a million events (200 MB) are analysed in this process,
in seconds and without a JVM; larger ones on Spark, in local mode
(local[*]) unless --master or MINIBROKER_SPARK_MASTER says otherwise (on a
cluster run the same job with spark-submit: docs/spark.md). The two
engines run the same detectors. A trace file whose Parquet twin (FILE.parquet/,
broker.trace_format) holds segments is read from the twin, and a segments
directory may be named itself; each trace's line says which form was read
(--input-format jsonl reads the JSON lines even then). A file with no trace
line is refused before either engine starts. The trace format:
docs/trace-schema.md.
"""

from __future__ import annotations

import argparse

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
    (
        "--poison-deliveries",
        "int+",
        "N",
        "redeliveries of one message within --poison-window that make a loop (default 10)",
    ),
    ("--poison-window", "pos", "S", "seconds in which --poison-deliveries are counted (default 60)"),
    ("--no-plots", "flag", None, "tables and report only"),
    ("--no-tables", "flag", None, "findings, report and plots only (no csv/, parquet/)"),
    ("--master", "str", "M", "Spark master (default local[*] or $MINIBROKER_SPARK_MASTER)"),
    (
        "--engine",
        "str",
        "E",
        "auto, spark or inprocess: where to analyse (default auto: in this "
        "process up to about a million events, 200 MB of trace; on Spark above)",
    ),
    (
        "--input-format",
        "str",
        "F",
        "auto, jsonl or parquet: auto reads a trace's Parquet twin (FILE.parquet/) when it has "
        "segments, jsonl the file even then, parquet the segments or an error (default auto)",
    ),
]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``analyze`` subcommand."""
    parser = subparsers.add_parser(
        "analyze",
        help="analyse traces: tables, plots, findings (Spark)",
        description=__doc__.split("\n\n", 1)[1].replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "traces",
        nargs="+",
        metavar="TRACE",
        help="trace files (JSON lines), directories of them, or Parquet segments directories",
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    add_options(parser, OPTIONS)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """Run ``minibroker analyze``."""
    from clients.spark.findings import TraceFormatError
    from clients.spark.inputs import INPUT_FORMATS, missing_inputs, resolve_inputs

    argv = job_argv(args, OPTIONS)
    missing = missing_inputs(args.traces)
    if missing:
        raise CommandError(f"no such trace: {', '.join(missing)}", USAGE)
    if args.input_format not in (None, *INPUT_FORMATS):
        raise CommandError(f"--input-format takes {', '.join(INPUT_FORMATS)}, not {args.input_format!r}", USAGE)
    check_out(args.out)
    try:
        local = [i.path for i in resolve_inputs(args.traces, args.input_format or "auto") if "://" not in i.path]
        if local:  # a file with no trace line: said here, as every command says what is wrong
            from clients.spark.inprocess_tables import check_inputs

            check_inputs(local)
    except TraceFormatError as exc:
        raise CommandError(str(exc), USAGE) from None
    return run_spark_job("clients.spark.analyze", [*args.traces, "--out", args.out, *argv])
