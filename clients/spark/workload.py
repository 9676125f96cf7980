"""Expand a workload file into a timed action table (Spark job).

    python -m clients.spark.workload WORKLOAD.toml --out DIR [--scale N] [--engine auto|inprocess|spark]
    spark-submit --master spark://HOST:PORT clients/spark/workload.py WORKLOAD.toml --out DIR

Two engines write the same table, row for row (a test holds them equal):
Spark (this module) and ``clients.spark.workload_inprocess`` (numpy and
pyarrow in this process, no JVM; five times faster on one machine).
``--engine auto`` runs the in-process one unless Spark is asked for: a
``--master``, ``$MINIBROKER_SPARK_MASTER``, spark-submit, or an output URL.

Theory of operation
-------------------
The driver plans in pure Python (``workload_spec``, ``workload_table``):
clients, their control actions (connect, subscribe, pace, unsubscribe,
disconnect: a handful per client) and, for each producer client, rate segments with exact message
counts. Segments are cut into chunks of at most ``--chunk`` messages; Spark
explodes each chunk into one row per message. Nothing random depends on
where a row is computed: every random draw is ``xxhash64(seed, salt, client,
k)`` for the client's k-th message, so the same file and seed give the same
table whatever the partitioning. The table is sorted by ``(t, client, seq)``
within each part file and written as Parquet (``actions.parquet/``), with
``summary.json`` beside it; ``clients.spark.actions`` streams it in time
order without Spark (pyarrow). Sorted JSON lines (``actions.jsonl/``, read
with the standard library alone) are written only when asked (``--format
parquet,jsonl`` or ``jsonl``): text costs more to write than the whole
expansion.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from functools import reduce
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from clients.spark.session import get_session
from clients.spark.workload_engine import choose_engine, inprocess_refusal
from clients.spark.workload_spec import (
    Dist,
    ProducerGroup,
    Workload,
    WorkloadError,
    chunk_plan,
    load_workload,
)
from clients.spark.workload_table import ACTION_SCHEMA, control_rows, remove_stale_formats, summarize

__all__ = ["build_actions", "generate", "main"]

_CHUNK_SCHEMA = T.StructType(
    [
        T.StructField("gidx", T.IntegerType(), False),
        T.StructField("client", T.StringType(), False),
        T.StructField("a", T.DoubleType(), False),
        T.StructField("b", T.DoubleType(), False),
        T.StructField("rate", T.DoubleType(), False),
        T.StructField("offset", T.DoubleType(), False),
        T.StructField("j0", T.LongType(), False),  # first index within the segment
        T.StructField("k0", T.LongType(), False),  # the client's message index of j0
        T.StructField("n", T.LongType(), False),
    ]
)

_TWO53 = float(2**53)


# --- sends: one row per message, exploded by Spark ------------------------------------


def _uniform(seed: int, salt: str) -> Column:
    """A value in [0, 1) from the top 53 bits of xxhash64(seed, salt, client, k)."""
    h = F.xxhash64(F.lit(seed), F.lit(salt), F.col("client"), F.col("k"))
    return F.shiftrightunsigned(h, 11).cast("double") / F.lit(_TWO53)


def _choice(u: Column, dist: Dist, cast: str | None) -> Column:
    total = sum(dist.weights)
    expr, acc = None, 0.0
    for value, weight in zip(dist.values[:-1], dist.weights[:-1], strict=True):
        acc += weight / total
        lit = F.lit(value)
        expr = F.when(u < F.lit(acc), lit) if expr is None else expr.when(u < F.lit(acc), lit)
    last = F.lit(dist.values[-1])
    col = last if expr is None else expr.otherwise(last)
    return col.cast(cast) if cast else col


def _dist_column(dist: Dist, seed: int, salt: str, cast: str) -> Column:
    if dist.kind == "fixed":
        return F.lit(dist.value).cast(cast)
    u = _uniform(seed, salt)
    if dist.kind == "uniform":
        return (F.lit(dist.lo) + F.floor(u * F.lit(dist.hi - dist.lo + 1))).cast(cast)
    if dist.kind == "choice":
        return _choice(u, dist, cast)
    if dist.kind == "lognormal":  # Box-Muller on two independent draws
        u1 = F.greatest(u, F.lit(1e-300))
        u2 = _uniform(seed, salt + "/2")
        z = F.sqrt(F.lit(-2.0) * F.log(u1)) * F.cos(F.lit(2 * math.pi) * u2)
        value = F.round(F.lit(dist.median) * F.exp(F.lit(dist.sigma) * z))
        return F.least(F.greatest(value, F.lit(dist.lo)), F.lit(dist.hi)).cast(cast)
    raise AssertionError(dist.kind)


def _send_columns(g: ProducerGroup, seed: int) -> dict[str, Column]:
    salt = g.name
    if g.arrival == "even":
        t = F.col("a") + (F.col("j").cast("double") + F.col("offset")) / F.col("rate")
    else:
        t = F.col("a") + (F.col("b") - F.col("a")) * _uniform(seed, salt + "/t")
    if g.persistent in (0.0, 1.0):
        persistent = F.lit(g.persistent == 1.0)
    else:
        persistent = _uniform(seed, salt + "/persistent") < F.lit(g.persistent)
    headers = None
    if g.headers:
        parts = []
        for name, dist in g.headers.items():
            value = (
                F.lit(str(dist.value))
                if dist.kind == "fixed"
                else _choice(
                    _uniform(seed, f"{salt}/h/{name}"),
                    Dist("choice", values=tuple(str(v) for v in dist.values), weights=dist.weights),
                    None,
                )
            )
            parts += [F.lit(name), value]
        headers = F.create_map(*parts)
    return {
        "t": t,
        "size": _dist_column(g.size, seed, salt + "/size", "long"),
        "priority": _dist_column(g.priority, seed, salt + "/priority", "int"),
        "persistent": persistent,
        "headers": headers if headers is not None else F.lit(None).cast(ACTION_SCHEMA["headers"].dataType),
        "dest": F.lit(g.dest),
        "group": F.lit(g.name),
    }


def _by_group(groups: list[ProducerGroup], exprs: list[dict[str, Column]], name: str) -> Column:
    if len(groups) == 1:
        return exprs[0][name]
    col = F.when(F.col("gidx") == F.lit(0), exprs[0][name])
    for i, e in enumerate(exprs[1:], 1):
        col = col.when(F.col("gidx") == F.lit(i), e[name])
    return col


def build_actions(
    spark: SparkSession, workload: Workload, *, partitions: int | None = None, chunk: int = 100_000
) -> DataFrame:
    """The unsorted action table for ``workload``."""
    partitions = partitions or spark.sparkContext.defaultParallelism
    control = spark.createDataFrame(control_rows(workload), ACTION_SCHEMA)
    chunks = [
        (gidx, s.client, s.start, s.stop, s.rate, s.offset, j0, s.first + j0, n)
        for gidx, s, j0, n in chunk_plan(workload, chunk)
    ]
    if not chunks:
        return control
    groups = list(workload.producers)
    exprs = [_send_columns(g, workload.seed) for g in groups]
    exploded = (
        spark.createDataFrame(chunks, _CHUNK_SCHEMA)
        .repartition(partitions)
        .withColumn("i", F.explode(F.sequence(F.lit(0).cast("long"), F.col("n") - 1)))
        .withColumn("j", F.col("j0") + F.col("i"))
        .withColumn("k", F.col("k0") + F.col("i"))
    )
    cols = {name: _by_group(groups, exprs, name) for name in exprs[0]}
    sends = exploded.select(
        cols["t"].alias("t"),
        F.col("client"),
        (F.col("k") + 1).alias("seq"),
        F.lit("send").alias("action"),
        cols["group"].alias("group"),
        cols["dest"].alias("dest"),
        F.lit(None).cast("string").alias("sub"),
        cols["size"].alias("size"),
        cols["priority"].alias("priority"),
        cols["persistent"].alias("persistent"),
        cols["headers"].alias("headers"),
        *[
            F.lit(None).cast(ACTION_SCHEMA[c].dataType).alias(c)
            for c in ("selector", "ack", "prefetch", "process", "client_id")
        ],
    )
    return reduce(DataFrame.unionByName, [sends, control])


def generate(
    spark: SparkSession,
    workload: Workload,
    out: str | Path,
    *,
    formats: tuple[str, ...] = ("parquet",),
    partitions: int | None = None,
    chunk: int = 100_000,
) -> dict[str, Any]:
    """Write the sorted action table under ``out``; return the summary."""
    out = str(out).rstrip("/")
    table = build_actions(spark, workload, partitions=partitions, chunk=chunk)
    table = table.sortWithinPartitions("t", "client", "seq")
    if "parquet" in formats:
        table.write.mode("overwrite").parquet(f"{out}/actions.parquet")
    if "jsonl" in formats:
        table.write.mode("overwrite").json(f"{out}/actions.jsonl")
    summary = summarize(workload)
    summary["formats"] = list(formats)
    summary["engine"] = "spark"
    if "://" not in out or out.startswith("file:"):
        local = Path(out.removeprefix("file:"))
        remove_stale_formats(local, formats)
        (local / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    """Entry point for ``python -m clients.spark.workload`` and ``minibroker workload generate``."""
    parser = argparse.ArgumentParser(
        prog="minibroker workload generate",
        description="Expand a workload file (TOML) into a timed action table.",
    )
    parser.add_argument("workload", help="the workload file (TOML)")
    parser.add_argument("--out", required=True, help="output directory")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every group's client count (default 1)")
    parser.add_argument("--seed", type=int, help="override [workload].seed")
    parser.add_argument(
        "--format", default="parquet", help="comma-separated: parquet, jsonl (default parquet; replay reads either)"
    )
    parser.add_argument(
        "--engine",
        choices=("auto", "inprocess", "spark"),
        default="auto",
        help="inprocess: numpy and pyarrow, no JVM; spark: a Spark job (auto: spark when a master or"
        " spark-submit asks for it, else inprocess); both write the same table",
    )
    parser.add_argument("--partitions", type=int, help="Spark partitions for the expansion")
    parser.add_argument("--chunk", type=int, default=100_000, help="messages per task chunk")
    parser.add_argument(
        "--part-rows",
        type=int,
        default=1_000_000,
        help="inprocess: about this many rows per part file (a chunk is never split; the control rows are a"
        " part of their own; memory grows with it; default %(default)s)",
    )
    parser.add_argument(
        "--master", help="Spark master when not run by spark-submit (default local[*] or $MINIBROKER_SPARK_MASTER)"
    )
    args = parser.parse_args(argv)
    formats = tuple(f.strip() for f in args.format.split(",") if f.strip())
    if not formats or set(formats) - {"parquet", "jsonl"}:
        parser.error("--format takes parquet, jsonl or parquet,jsonl")
    try:
        workload = load_workload(args.workload, scale=args.scale)
    except (OSError, WorkloadError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.seed is not None:
        workload = dataclasses.replace(workload, seed=args.seed)
    if args.chunk < 1 or args.part_rows < 1:
        parser.error("--chunk and --part-rows take a positive number")
    engine = choose_engine(args.engine, args.master, args.out)
    if engine == "inprocess":
        refusal = inprocess_refusal(args.out, args.master)
        if refusal:
            parser.error(refusal)
        from clients.spark.workload_inprocess import generate_inprocess

        try:
            summary = generate_inprocess(
                workload, args.out, formats=formats, part_rows=args.part_rows, chunk=args.chunk
            )
        except OSError as exc:
            print(f"error: cannot write the table under {args.out}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    else:
        spark = get_session("minibroker-workload", master=args.master)
        summary = generate(spark, workload, args.out, formats=formats, partitions=args.partitions, chunk=args.chunk)
    where = "in process" if engine == "inprocess" else "on Spark"
    print(
        f"{summary['rows']} actions for {len(summary['clients'])} clients over {summary['duration']:g} s "
        f"-> {args.out} ({where})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
