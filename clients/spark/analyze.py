"""Analyse broker (and client-side) traces: tables, plots, findings, report (Spark job).

    python -m clients.spark.analyze TRACE... --out DIR
    spark-submit --master spark://HOST:PORT --py-files minibroker-py.zip \\
        clients/spark/analyze.py TRACE... --out DIR

Output under DIR:
    report.md              findings and plots tied together
    findings.json          the findings, as a JSON list (for labs and tests)
    *.png                  plots
    parquet/NAME/          every table, Parquet
    csv/NAME.csv           every table, CSV (nested values as JSON)

Theory of operation: one pass reads the traces with the explicit schema
(``clients.spark.schema``) and caches the columns the analysis uses; the
tables module buckets them by time; the detectors work on the buckets; the
driver collects only small series (coarsened to at most ``MAX_POINTS`` per
line) for matplotlib.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from clients.spark.detectors import FINDING_COLUMNS, Params, find_all
from clients.spark.plots import plot_all
from clients.spark.report import render_report
from clients.spark.schema import CORRUPT, TraceFormatError, check_trace, read_trace
from clients.spark.session import get_session
from clients.spark.tables import USED, Tables, build_tables

__all__ = ["analyze", "main"]

MAX_POINTS = 1000  # per plotted line
TOP_CONSUMERS = 12


def _csv_safe(df: DataFrame) -> DataFrame:
    """CSV holds no arrays, maps or structs: write those as JSON text."""
    complex_types = (T.ArrayType, T.MapType, T.StructType)
    return df.select(*[
        F.to_json(F.col(f.name)).alias(f.name) if isinstance(f.dataType, complex_types)
        else F.col(f.name) for f in df.schema.fields
    ])


def _write(df: DataFrame, out: str, name: str) -> None:
    df.write.mode("overwrite").parquet(f"{out}/parquet/{name}")
    csv_dir = f"{out}/csv/{name}"
    _csv_safe(df).coalesce(1).write.mode("overwrite").option("header", True).csv(csv_dir)
    local = Path(csv_dir.removeprefix("file:"))
    if local.is_dir():  # a single file is friendlier than a directory of one part
        (part,) = local.glob("part-*.csv")
        part.replace(local.with_suffix(".csv"))
        shutil.rmtree(local)


def _series(tb: Tables) -> tuple[dict[str, list[dict[str, Any]]], float]:
    """Small series for the plots: coarsened so no line has more than MAX_POINTS points."""
    factor = max(1, math.ceil(tb.buckets / MAX_POINTS))
    step = tb.bucket * factor
    cb = F.floor(F.col("b") / factor)

    def coarse(df: DataFrame, keys: list[str], sums: list[str], maxes: list[str]) -> list[dict]:
        agg = [F.sum(c).alias(c) for c in sums] + [F.max(c).alias(c) for c in maxes]
        rows = df.groupBy(*keys, cb.alias("cb")).agg(*agg).withColumn("t", F.col("cb") * step)
        return [r.asDict() for r in rows.collect()]

    top = (tb.consumer_rates.groupBy("consumer", "sub").agg(F.sum("received").alias("n"))
           .orderBy(F.desc("n"), "consumer", "sub").limit(TOP_CONSUMERS))
    consumers = tb.consumer_rates.join(top.select("consumer", "sub"), ["consumer", "sub"]).withColumn(
        "label", F.concat_ws("/", "consumer", "sub"))
    return {
        "dest_rates": coarse(tb.dest_rates, ["dest"], ["enqueued", "dispatched", "client_sent", "client_received"],
                             ["backlog"]),
        "consumer_rates": coarse(consumers, ["label"], ["received"], []),
        "usage": coarse(tb.usage, [], [], ["mem_pct", "store_pct", "temp_pct"]),
        "blocked": [r.asDict() for r in tb.blocked.orderBy("start").limit(10_000).collect()],
        "swaps": [r.asDict() for r in tb.swaps.orderBy("t").limit(20_000).collect()],
        "journal_files": [r.asDict() for r in tb.journal_files.collect()],
    }, step


def analyze(spark: SparkSession, inputs: list[str], out: str | Path, params: Params,
            *, plots: bool = True) -> dict[str, Any]:
    """Run the whole analysis; returns {"info", "findings", "plots"}."""
    out = str(out).rstrip("/")
    # parse once: cache only the columns the analysis reads (plus what the check needs)
    raw = read_trace(spark, inputs).select(*USED, "v", CORRUPT).cache()
    info = check_trace(raw)
    if not info["lines"] or info["t0"] is None:
        raise TraceFormatError(f"no trace events in {', '.join(inputs)}")
    tb = build_tables(spark, raw, info["t0"], info["t1"], params.bucket)
    traced_hwm = tb.events.filter(F.col("event") == "page_in_blocked").agg(F.max("hwm")).first()[0]
    if traced_hwm is not None:
        params = replace(params, hwm=traced_hwm)
    findings_df = find_all(tb, params).select(*FINDING_COLUMNS).cache()
    findings = [r.asDict() for r in findings_df.collect()]
    for name, df in tb.outputs().items():
        _write(df, out, name)
    _write(findings_df, out, "findings")
    hwm = params.hwm
    info.update(inputs=list(inputs), span=info["t1"] - info["t0"], bucket=params.bucket,
                min_window=params.min_window, hwm=hwm)
    made: dict[str, str] = {}
    local = Path(out.removeprefix("file:"))
    local.mkdir(parents=True, exist_ok=True)
    if plots:
        series, step = _series(tb)
        made = plot_all(local, series, step, hwm, findings)
    tables = [*tb.outputs(), "findings"]
    (local / "report.md").write_text(render_report(info, findings, made, tables))
    (local / "findings.json").write_text(json.dumps(findings, indent=1) + "\n")
    (local / "info.json").write_text(json.dumps({**info, "params": asdict(params)}, indent=1) + "\n")
    for df in (findings_df, *tb.outputs().values(), raw):
        df.unpersist()
    return {"info": info, "findings": findings, "plots": made}


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``python -m clients.spark.analyze`` and ``minibroker analyze``."""
    d = Params()
    parser = argparse.ArgumentParser(
        prog="minibroker analyze",
        description="Analyse trace files: tables, plots, pathology findings and a report.",
    )
    parser.add_argument("traces", nargs="+", help="trace files (JSON lines) or directories")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--bucket", type=float, default=d.bucket, help="seconds per time bucket")
    parser.add_argument("--min-window", type=float, default=d.min_window,
                        help="shortest starved/idle window to report, seconds")
    parser.add_argument("--hwm", type=int, default=d.hwm,
                        help="cursor high-water mark %% when the trace does not say")
    parser.add_argument("--swap-gap", type=float, default=d.swap_gap)
    parser.add_argument("--swap-min", type=int, default=d.swap_min)
    parser.add_argument("--few-live-fraction", type=float, default=d.few_live_fraction)
    parser.add_argument("--no-plots", action="store_true", help="tables and report only")
    parser.add_argument("--master", help="Spark master when not run by spark-submit "
                        "(default local[*] or $MINIBROKER_SPARK_MASTER)")
    args = parser.parse_args(argv)
    if args.bucket <= 0:
        parser.error("--bucket must be > 0")
    params = Params(bucket=args.bucket, min_window=args.min_window, hwm=args.hwm,
                    swap_gap=args.swap_gap, swap_min=args.swap_min,
                    few_live_fraction=args.few_live_fraction)
    missing = [p for p in args.traces if "://" not in p and not Path(p).exists()]
    if missing:
        print(f"error: no such trace: {', '.join(missing)}", file=sys.stderr)
        return 2
    spark = get_session("minibroker-analyze", master=args.master)
    try:
        result = analyze(spark, args.traces, args.out, params, plots=not args.no_plots)
    except TraceFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for f in result["findings"]:
        print(f"{f['start']:9.1f} {f['end']:9.1f}  {f['detector']}: {f['summary']}")
    print(f"{len(result['findings'])} finding(s); report: {args.out}/report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
