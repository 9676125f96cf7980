"""The Spark side of the trace contract: an explicit schema and the reader.

The schema is derived from ``minibroker.trace.FIELDS`` (one type per field
name), so the broker's table is the single source. Fields the table does not
know are dropped on read, as the contract promises. Lines that are not JSON,
or whose values do not fit the types, land in ``_corrupt`` and are counted.
A trace's Parquet segments (``minibroker.trace.parquet``: the same columns,
typed alike) are read with the same schema; they have no corrupt lines.
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from clients.spark.findings import TraceFormatError
from minibroker.trace import COMMON, FIELDS, SCHEMA_VERSION

__all__ = [
    "footer_check",
    "trace_schema",
    "read_trace",
    "read_parquet_trace",
    "read_inputs",
    "check_trace",
    "TraceFormatError",
    "CORRUPT",
    "SOURCE",
]

CORRUPT = "_corrupt"
SOURCE = "_source"  # the input file of each line

_TYPES = {
    "str": T.StringType(),
    "int": T.LongType(),
    "float": T.DoubleType(),
    "bool": T.BooleanType(),
    "map<str,int>": T.MapType(T.StringType(), T.LongType()),
}


def trace_schema(with_corrupt: bool = False) -> T.StructType:
    """Every known field, nullable; common fields first."""
    names = list(COMMON) + [n for n in FIELDS if n not in COMMON]
    fields = [T.StructField(n, _TYPES[FIELDS[n]], True) for n in names]
    if with_corrupt:
        fields.append(T.StructField(CORRUPT, T.StringType(), True))
    return T.StructType(fields)


def read_trace(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """Read trace files (JSON lines) with the explicit schema.

    Adds ``_source`` (the input path) for ordering events from several files
    by ``(ts, _source, seq)``. Corrupt lines are kept with ``_corrupt`` set; callers
    count and drop them (``check_trace``).
    """
    return (
        spark.read.schema(trace_schema(with_corrupt=True))
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .json(list(paths))
        .withColumn(SOURCE, F.input_file_name())
    )


def read_parquet_trace(spark: SparkSession, directories: Sequence[str]) -> DataFrame:
    """Read Parquet segments directories with the explicit schema: the columns of
    ``read_trace`` (``_corrupt`` always null), nothing inferred."""
    return (
        spark.read.schema(trace_schema())
        .parquet(*[str(d) for d in directories])
        .withColumn(CORRUPT, F.lit(None).cast(T.StringType()))
        .withColumn(SOURCE, F.input_file_name())
    )


def read_inputs(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """Read traces in either form (``clients.spark.inputs.is_parquet`` tells them
    apart): JSON lines with ``read_trace``, segments with ``read_parquet_trace``."""
    from clients.spark.inputs import is_parquet

    parquet = [p for p in paths if is_parquet(p)]
    jsonl = [p for p in paths if not is_parquet(p)]
    frames = ([read_trace(spark, jsonl)] if jsonl else []) + ([read_parquet_trace(spark, parquet)] if parquet else [])
    df = frames[0]
    for other in frames[1:]:
        df = df.unionByName(other)
    return df


def footer_check(paths: Sequence[str]) -> dict[str, float | int | None] | None:
    """``check_trace``'s answer for local Parquet segments, from their footers (row counts
    and statistics) without a Spark job; None when it cannot tell (not all local
    segments, a statistic missing, versions other than ours: then ``check_trace``)."""
    from clients.spark.inputs import is_parquet

    if not paths or any("://" in p or not is_parquet(p) for p in paths):
        return None
    from minibroker.trace.parquet import footer_summary

    lines = corrupt = 0
    t0 = t1 = None
    for p in paths:
        s = footer_summary(p)
        if s is None or s["versions"] not in ((SCHEMA_VERSION, SCHEMA_VERSION), (None, None)):
            return None
        lines += s["rows"]
        corrupt += s["no_event"]
        if s["t0"] is not None:
            t0 = s["t0"] if t0 is None else min(t0, s["t0"])
            t1 = s["t1"] if t1 is None else max(t1, s["t1"])
    return {"lines": lines, "corrupt": corrupt, "t0": t0, "t1": t1}


def check_trace(df: DataFrame) -> dict[str, float | int | None]:
    """One pass: line count, corrupt lines, time span; refuses unknown versions.

    ``df`` should be cached: Spark refuses a query on raw JSON that reads only
    the corrupt-record column.
    """
    row = df.agg(
        F.count(F.lit(1)).alias("lines"),
        F.sum(F.when(F.col(CORRUPT).isNotNull() | F.col("event").isNull(), 1).otherwise(0)).alias("corrupt"),
        F.sum(F.when(F.col("v") != SCHEMA_VERSION, 1).otherwise(0)).alias("other_versions"),
        F.min("ts").alias("t0"),
        F.max("ts").alias("t1"),
    ).collect()[0]
    if row["other_versions"]:
        raise TraceFormatError(f"{row['other_versions']} lines have a schema version other than {SCHEMA_VERSION}")
    return {
        "lines": row["lines"],
        "corrupt": row["corrupt"] or 0,
        "t0": row["t0"],
        "t1": row["t1"],
    }
