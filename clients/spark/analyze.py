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

Two engines, the same detectors (a test holds their findings equal):
inputs up to ``INPROCESS_MAX_BYTES`` (about a million events) are analysed
in this process (``clients.spark.inprocess``: no JVM, a lab run's trace in
well under a second; tables as CSV only), larger ones (or ``--engine spark``,
a ``--master``, spark-submit) on Spark. Inputs are checked before either
starts: a file with no trace line is refused at once.

Inputs: JSON-lines files (or directories of them) and Parquet segments
directories (``minibroker.trace.parquet``); a trace file whose Parquet twin
holds segments is read from the twin unless ``--input-format jsonl``
(``clients.spark.inputs``), and each trace's line says which form was read.
Both forms give the same tables and findings (a test holds them equal).

Theory of operation (Spark): one pass reads the traces with the explicit
schema (``clients.spark.schema``: JSON parsed, or Parquet columns pruned) and caches the columns the analysis uses;
the tables module buckets them by time; the detectors work on the buckets;
the driver collects only small series (coarsened to at most ``MAX_POINTS``
per line) for matplotlib.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clients.spark import inprocess
from clients.spark.findings import Params, TraceFormatError
from clients.spark.inputs import INPUT_FORMATS, describe_inputs, missing_inputs, resolve_inputs
from clients.spark.plots import plot_all
from clients.spark.report import render_report

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from clients.spark.tables import Tables

__all__ = ["analyze", "analyze_inprocess", "choose_engine", "main"]


MAX_POINTS = 1000  # per plotted line
TOP_CONSUMERS = 12


def _csv_safe(df: DataFrame) -> DataFrame:
    """CSV holds no arrays, maps or structs: write those as JSON text."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    complex_types = (T.ArrayType, T.MapType, T.StructType)
    return df.select(
        *[
            F.to_json(F.col(f.name)).alias(f.name) if isinstance(f.dataType, complex_types) else F.col(f.name)
            for f in df.schema.fields
        ]
    )


def _write(df: DataFrame, out: str, name: str) -> None:
    df.write.mode("overwrite").parquet(f"{out}/parquet/{name}")
    csv_dir = f"{out}/csv/{name}"
    _csv_safe(df).coalesce(1).write.mode("overwrite").option("header", True).csv(csv_dir)
    local = Path(csv_dir.removeprefix("file:"))
    if local.is_dir():  # a single file is friendlier than a directory of one part
        (part,) = local.glob("part-*.csv")
        part.replace(local.with_suffix(".csv"))
        shutil.rmtree(local)


def _series(
    tb: Tables, findings: list[dict[str, Any]], names: dict[str, str]
) -> tuple[dict[str, list[dict[str, Any]]], float]:
    """Small series for the plots: coarsened so no line has more than MAX_POINTS points."""
    from pyspark.sql import functions as F

    factor = max(1, math.ceil(tb.buckets / MAX_POINTS))
    step = tb.bucket * factor
    cb = F.floor(F.col("b") / factor)

    def coarse(df: DataFrame, keys: list[str], sums: list[str], maxes: list[str]) -> list[dict]:
        agg = [F.sum(c).alias(c) for c in sums] + [F.max(c).alias(c) for c in maxes]
        rows = df.groupBy(*keys, cb.alias("cb")).agg(*agg).withColumn("t", F.col("cb") * step)
        return [r.asDict() for r in rows.collect()]

    # the busiest consumers, and always those a finding names (a starved one receives nothing)
    named = {(f["session"], f["sub"]) for f in findings if f["session"] and f["sub"]}
    # the broker's own counts; a client trace (replay --trace) has only the clients'
    by_broker = tb.consumer_rates.filter(F.col("source") == "broker").limit(1).count() > 0
    source = "broker" if by_broker else "client"
    totals = (
        tb.consumer_rates.filter(F.col("source") == source)
        .groupBy("consumer", "sub")
        .agg(F.sum("received").alias("n"))
        .collect()
    )  # one row per subscription: few, beside the events
    subs = [r.asDict() for r in tb.subscriptions.collect()]
    keep = inprocess.busiest_by_name({(r["consumer"], r["sub"]): r["n"] for r in totals}, subs, names, TOP_CONSUMERS)
    keep |= named
    keep |= {(s["session"], s["sub"]) for s in subs if len(subs) <= TOP_CONSUMERS}
    wanted = F.lit(False)
    for consumer, sub in keep:
        wanted = wanted | ((F.col("consumer") == consumer) & (F.col("sub") == sub))
    consumers = tb.consumer_rates.filter(wanted & (F.col("source") == source))
    rows = coarse(consumers, ["consumer", "sub", "dest"], ["received"], [])
    return {
        "dest_rates": coarse(
            tb.dest_rates, ["dest"], ["enqueued", "sent", "dispatched", "client_sent", "client_received"], ["backlog"]
        ),
        "consumer_rates": rows,
        "subscriptions": [s for s in subs if (s["session"], s["sub"]) in keep],
        "usage": coarse(tb.usage, [], [], ["mem_pct", "store_pct", "temp_pct"]),
        "blocked": [r.asDict() for r in tb.blocked.orderBy("start").limit(10_000).collect()],
        "swaps": [r.asDict() for r in tb.swaps.orderBy("t").limit(20_000).collect()],
        "journal": [r.asDict() for r in tb.journal.orderBy("t").limit(20_000).collect()],
        "journal_files": [r.asDict() for r in tb.journal_files.collect()],
    }, step


def _names(rows: list[Any]) -> dict[str, str]:
    """session -> the name a reader knows the client by: its client-id, or its address when
    that is a name (a lab's client) rather than host:port."""
    names = {}
    for r in rows:
        r = r if isinstance(r, dict) else r.asDict()
        addr = r.get("addr") or ""
        name = r.get("client_id") or (addr if addr and ":" not in addr else None)
        if name and r.get("session"):
            names[r["session"]] = name
    return names


def named(finding: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """``finding`` with its summary naming its client as the client names itself (a lab's
    ``consumer-a``, a client-id) instead of by its broker session (``localhost-2265b1-2``);
    the ``session`` field keeps the id, which the tables join on."""
    session, summary = finding.get("session"), finding.get("summary")
    name = names.get(session or "")
    if not name or not summary or not session or session.isdigit():  # a bare number could be any figure
        return finding
    summary = re.sub(rf"(?<![\w-]){re.escape(session)}(?![\w-])", name, summary)
    return {**finding, "summary": summary.replace(f"{name} (client-id {name})", name)}


def analyze(
    spark: SparkSession, inputs: list[str], out: str | Path, params: Params, *, plots: bool = True, tables: bool = True
) -> dict[str, Any]:
    """Run the whole analysis on Spark; returns {"info", "findings", "plots"}.
    ``tables=False`` skips writing the tables (the findings, report and plots only)."""
    from pyspark.sql import functions as F

    from clients.spark.detectors import FINDING_COLUMNS, find_all
    from clients.spark.inputs import is_parquet
    from clients.spark.schema import CORRUPT, check_trace, footer_check, read_inputs
    from clients.spark.tables import USED, build_tables

    out = str(out).rstrip("/")
    # JSON lines: parse once, and cache only the columns the analysis reads (plus what the
    # check needs). Parquet: no cache, each scan reads just its columns (cheaper than
    # building the cache); local segments are checked from their footers, without a job.
    raw = read_inputs(spark, inputs).select(*USED, "v", CORRUPT)
    if not all(is_parquet(p) for p in inputs):
        raw = raw.cache()
    info: dict[str, Any] = footer_check(inputs) or check_trace(raw)
    t0, t1 = info["t0"], info["t1"]
    if not info["lines"] or t0 is None:
        raise TraceFormatError(f"no trace events in {', '.join(inputs)}")
    tb = build_tables(spark, raw, t0, t1, params.bucket)
    highest = tb.events.filter(F.col("event") == "page_in_blocked").agg(F.max("hwm")).first()
    traced_hwm = highest[0] if highest is not None else None  # an aggregate has its one row
    if traced_hwm is not None:
        params = replace(params, hwm=traced_hwm)
    findings_df = find_all(tb, params).select(*FINDING_COLUMNS).cache()
    findings = [r.asDict() for r in findings_df.collect()]
    if tables:
        for name, df in tb.outputs().items():
            _write(df, out, name)
        _write(findings_df, out, "findings")
    info.update(engine="spark")
    names = _names(tb.events.filter(F.col("event") == "connect").select("session", "client_id", "addr").collect())
    series, step = _series(tb, findings, names) if plots else ({}, params.bucket)
    result = _finish(
        Path(out.removeprefix("file:")),
        info,
        inputs,
        params,
        findings,
        series,
        step,
        [*tb.outputs(), "findings"] if tables else [],
        names,
    )
    tb.unpersist()
    for df in (findings_df, raw):
        df.unpersist()
    return result


def _finish(
    local: Path,
    info: dict[str, Any],
    inputs: list[str],
    params: Params,
    findings: list[dict[str, Any]],
    series: dict[str, Any],
    step: float,
    tables: list[str],
    names: dict[str, str],
    draw: bool = True,
) -> dict[str, Any]:
    """What both engines write: plots, report.md, findings.json, info.json. ``names``
    (session -> the client's name) name the clients in the findings' summaries and plots;
    ``draw=False`` returns the series without drawing them."""
    findings = [named(f, names) for f in findings]
    info.update(
        inputs=list(inputs),
        span=info["t1"] - info["t0"],
        bucket=params.bucket,
        min_window=params.min_window,
        hwm=params.hwm,
    )
    local.mkdir(parents=True, exist_ok=True)
    if series:
        series["hwm"] = params.hwm
        series["names"] = names
    made = plot_all(local, series, step, params.hwm, findings) if series and draw else {}
    (local / "report.md").write_text(render_report(info, findings, made, tables))
    (local / "findings.json").write_text(json.dumps(findings, indent=1) + "\n")
    (local / "info.json").write_text(json.dumps({**info, "params": asdict(params)}, indent=1) + "\n")
    return {"info": info, "findings": findings, "plots": made, "series": series}


def inprocess_findings(
    inputs: list[str], params: Params
) -> tuple[inprocess.Tables, Params, list[dict[str, Any]], dict[str, Any]]:
    """Read and analyse ``inputs`` in this process: (tables, params in force, findings, info)."""
    events, info = inprocess.read_events(inputs)
    if not events or info["t0"] is None:
        raise TraceFormatError(f"no trace events in {', '.join(inputs)}")
    tb = inprocess.build_tables(events, info["t0"], info["t1"], params.bucket)
    hwm = inprocess.traced_hwm(tb)
    if hwm is not None:
        params = replace(params, hwm=hwm)
    return tb, params, inprocess.find_all(tb, params), info


def analyze_inprocess(
    inputs: list[str],
    out: str | Path,
    params: Params,
    *,
    plots: bool = True,
    tables: bool = True,
    draw: bool = True,
) -> dict[str, Any]:
    """The analysis in this process (no JVM): the same findings, report and plots as
    ``analyze``; the tables as CSV only. ``plots=False``: neither the plots nor their
    series; ``draw=False``: the series (returned, for a figure of the caller's), no plot."""
    tb, params, findings, info = inprocess_findings(inputs, params)
    local = Path(out)
    if tables:
        inprocess.write_csv(tb, findings, local / "csv")
    info.update(engine="inprocess")
    names = _names([e for e in tb.events if e["event"] == "connect"])
    series = inprocess.series(tb, findings, TOP_CONSUMERS, names) if plots else {}
    return _finish(
        local,
        info,
        inputs,
        params,
        findings,
        series,
        tb.bucket,
        [*tb.outputs(), "findings"] if tables else [],
        names,
        draw,
    )


def choose_engine(inputs: list[str], engine: str = "auto", master: str | None = None) -> str:
    """ "inprocess" or "spark": what ``--engine auto`` picks for these inputs."""
    if engine != "auto":
        return engine
    from clients.spark.session import launched_by_spark_submit

    if master or launched_by_spark_submit() or any("://" in i for i in inputs):
        return "spark"
    return "inprocess" if inprocess.fits_in_process(inputs) else "spark"


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``python -m clients.spark.analyze`` and ``minibroker analyze``."""
    d = Params()
    parser = argparse.ArgumentParser(
        prog="minibroker analyze",
        description="Analyse trace files: tables, plots, pathology findings and a report.",
    )
    parser.add_argument(
        "traces", nargs="+", help="trace files (JSON lines), directories of them, or Parquet segments directories"
    )
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--bucket", type=float, default=d.bucket, help="seconds per time bucket")
    parser.add_argument(
        "--min-window", type=float, default=d.min_window, help="shortest starved/idle window to report, seconds"
    )
    parser.add_argument("--hwm", type=int, default=d.hwm, help="cursor high-water mark %% when the trace does not say")
    parser.add_argument("--swap-gap", type=float, default=d.swap_gap)
    parser.add_argument("--swap-min", type=int, default=d.swap_min)
    parser.add_argument("--few-live-fraction", type=float, default=d.few_live_fraction)
    parser.add_argument(
        "--poison-deliveries",
        type=int,
        default=d.poison_deliveries,
        help="redeliveries of one message within --poison-window that make a redelivery loop (more than this)",
    )
    parser.add_argument("--poison-window", type=float, default=d.poison_window, help="seconds")
    parser.add_argument("--no-plots", action="store_true", help="tables and report only")
    parser.add_argument("--no-tables", action="store_true", help="findings, report and plots only (no csv/, parquet/)")
    parser.add_argument(
        "--master", help="Spark master when not run by spark-submit (default local[*] or $MINIBROKER_SPARK_MASTER)"
    )
    parser.add_argument(
        "--engine",
        choices=("auto", "spark", "inprocess"),
        default="auto",
        help="where to analyse: in this process (small inputs) or on Spark "
        "(default auto: in process up to about a million events)",
    )
    parser.add_argument(
        "--input-format",
        choices=INPUT_FORMATS,
        default="auto",
        help="auto: a trace file's Parquet twin (FILE.parquet/) when it has segments, else the file; "
        "jsonl: the file even then; parquet: the segments or an error",
    )
    args = parser.parse_args(argv)
    if args.bucket <= 0:
        parser.error("--bucket must be > 0")
    params = Params(
        bucket=args.bucket,
        min_window=args.min_window,
        hwm=args.hwm,
        swap_gap=args.swap_gap,
        swap_min=args.swap_min,
        few_live_fraction=args.few_live_fraction,
        poison_deliveries=args.poison_deliveries,
        poison_window=args.poison_window,
    )
    missing = missing_inputs(args.traces)
    if missing:
        print(f"error: no such trace: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:
        resolved = resolve_inputs(args.traces, args.input_format)
        paths = [i.path for i in resolved]
        for line in describe_inputs(resolved):
            print(line, flush=True)
        engine = choose_engine(paths, args.engine, args.master)
        if all("://" not in p for p in paths):
            inprocess.check_inputs(paths)  # refused before a JVM starts
        if engine == "inprocess":
            result = analyze_inprocess(paths, args.out, params, plots=not args.no_plots, tables=not args.no_tables)
        else:
            from clients.spark.session import QUICK_JVM, get_session

            quick = all(i.form == "parquet" for i in resolved)  # no JSON to parse: the quick JIT pays
            spark = get_session("minibroker-analyze", master=args.master, conf=QUICK_JVM if quick else None)
            result = analyze(spark, paths, args.out, params, plots=not args.no_plots, tables=not args.no_tables)
    except TraceFormatError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for f in result["findings"]:
        print(f"{f['start']:9.1f} {f['end']:9.1f}  {f['detector']}: {f['summary']}")
    print(f"{len(result['findings'])} finding(s); report: {args.out}/report.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
