"""Trace -> time-bucketed tables: the analysis's working set.

Every table's time is ``t``, seconds since the first event of the input
(``t0``), and ``b``, the bucket number ``floor(t / bucket)``. Bucketed
tables are dense where a detector needs "nothing happened" to be a row
(destinations and broker usage have a row for every bucket); event-like
tables (blocked intervals, swaps, journal events) keep one row per interval
or event. All are small next to the trace, so they are kept once built, as
local checkpoints rather than cached plans: a checkpoint is a leaf, so every
later query over it (the detectors, the series) is small to analyse and
plan, where a cached table's whole plan is carried into each query and
matched against the cache at every step. That planning was most of a small
analysis's CPU (a 20,000-event trace: 36 -> 27 CPU seconds). The price: a
lost executor loses a checkpoint (local mode has one, the driver).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from clients.spark.columns import DEST_COUNTS, DEST_EVENTS, JOURNAL_COLUMNS, SWAP_COLUMNS, USAGE_PCTS, TableSet
from clients.spark.findings import REMOVALS
from clients.spark.schema import CORRUPT

__all__ = ["Tables", "build_tables", "islands"]

# Columns the analysis reads; the scan is pruned to these.
USED = [
    "seq",
    "ts",
    "event",
    "session",
    "client",
    "client_id",
    "sub",
    "dest",
    "count",
    "pending",
    "mem_pct",
    "dest_mem_pct",
    "store_pct",
    "temp_pct",
    "hwm",
    "usage",
    "pct",
    "waited",
    "slow",
    "prefetch",
    "pending_bytes",
    "idle_read",
    "idle_write",
    "store",
    "layout",
    "file",
    "files",
    "live",
    "live_bytes",
    "capacity",
    "file_live",
    "code",
    "message",
    "bytes",
    "redeliveries",
    "msg",
    "reason",
    "heart_beat",
    "addr",
]


@dataclass(kw_only=True)
class Tables(TableSet[DataFrame]):
    """The working set of one analysis on Spark (the derived tables are kept: local
    checkpoints). ``events`` are the events that are not per message (not ``HOT``),
    pruned to the columns used."""

    sends: DataFrame  # every send: t, dest, msg (not cached: read only when a detector needs it)
    counts: DataFrame  # events per (event, dest, session, client, sub, b, epoch): n, count, dest_mem_pct (kept)

    def unpersist(self) -> None:
        """Free every kept table (the caller's scan is the caller's)."""
        for df in (self.events, self.counts, *self.outputs().values()):
            df.unpersist()


# The per-message events: all but a few thousand of a busy trace's lines. They are
# read once, into per-bucket counts (``build_tables``); every other question is
# asked of the remaining events, kept apart (``Tables.events``).
HOT = ("send", "enqueue", "dispatch", "ack", "sent", "received", "acked")


def islands(df: DataFrame, keys: list[str], b: str = "b") -> DataFrame:
    """Label runs of consecutive buckets per ``keys`` with ``island`` (gaps-and-islands)."""
    w = Window.partitionBy(*keys).orderBy(b)
    return df.withColumn("island", F.col(b) - F.row_number().over(w))


def _bucket_t(bucket: float) -> Column:
    return (F.col("b") * F.lit(bucket)).alias("t")


def build_tables(spark: SparkSession, raw: DataFrame, t0: float, t1: float, bucket: float) -> Tables:
    ev = (
        raw.filter(F.col(CORRUPT).isNull() & F.col("event").isNotNull())
        .select(*USED)
        .withColumn("t", F.col("ts") - F.lit(t0))
        .withColumn("b", F.floor(F.col("t") / F.lit(bucket)).cast("long"))
    )
    nb = int((t1 - t0) // bucket) + 1
    grid = spark.range(0, nb).withColumnRenamed("id", "b")
    e = F.col("event")

    # per destination and bucket: counts, backlog (queues), own memory percent, blocked page-ins
    # (``columns.DEST_EVENTS``)
    # Theory of operation: the input is scanned twice after the caller's parse (cached for JSON lines). Once
    # for the events that are not per message (kept: every later question about
    # subscriptions, usage, flow control, swaps, journals and connections reads only them),
    # and once for ``counts_df``: events per (event, dest, session, client, sub, bucket,
    # epoch), of which the destination and consumer tables are sums. A busy trace's
    # millions of lines become thousands of rows in each.
    rare = ev.filter(~e.isin(*HOT)).localCheckpoint()
    # A backlog starts again at each `start` (a restart): the queue holds what its `recover`
    # says, not that plus what was enqueued before. The starts are few: collected, they
    # number each event's epoch and each bucket's last epoch.
    starts = [(r["t"], r["seq"] or 0) for r in rare.filter(e == "start").select("t", "seq").collect()]
    epoch = (
        sum(((F.col("t") > t) | ((F.col("t") == t) & (F.col("seq") > q))).cast("int") for t, q in starts)
        if starts
        else F.lit(0)
    )
    last_epoch = sum((F.col("b") >= math.floor(t / bucket)).cast("int") for t, _ in starts) if starts else F.lit(0)
    counts_df = (
        ev.filter(e.isin(*DEST_EVENTS))
        .withColumn("epoch", epoch)
        .groupBy("event", "dest", "session", "client", "sub", "b", "epoch")
        .agg(
            F.count(F.lit(1)).alias("n"),
            F.sum("count").alias("count"),
            F.max("dest_mem_pct").alias("dest_mem_pct"),
        )
        .localCheckpoint()
    )
    n = F.col("n")

    def n_if(cond: Column) -> Column:
        return F.sum(F.when(cond, n).otherwise(0))

    change = F.when(e == "enqueue", n).when(e == "recover", F.col("count")).when(e.isin(*REMOVALS), -n).otherwise(0)
    dev = counts_df.filter(F.col("dest").isNotNull())
    per_dest = dev.groupBy("dest", "b").agg(
        n_if(e == "enqueue").alias("enqueued"),
        n_if(e == "send").alias("sent"),
        n_if(e == "dispatch").alias("dispatched"),
        n_if(e == "ack").alias("acked"),
        n_if(e.isin(*REMOVALS)).alias("removed"),
        F.sum(F.when(e == "recover", F.col("count")).otherwise(0)).alias("recovered"),
        F.sum(F.when(e == "swap_out", F.col("count")).otherwise(0)).alias("spooled"),
        n_if(e == "page_in_blocked").alias("page_in_blocked"),
        n_if(e == "sent").alias("client_sent"),
        n_if(e == "received").alias("client_received"),
        n_if(e == "acked").alias("client_acked"),
    )
    # The backlog's change and the destination's memory in each (bucket, epoch): a restart
    # starts both again (a restarted broker holds nothing in memory until it says so).
    changes = dev.groupBy("dest", "b", "epoch").agg(
        F.sum(change).alias("change"), F.max(F.when(e == "usage", F.col("dest_mem_pct"))).alias("mem")
    )
    dests = per_dest.select("dest").distinct()
    counts = list(DEST_COUNTS)
    we = Window.partitionBy("dest", "epoch").orderBy("b").rowsBetween(Window.unboundedPreceding, 0)
    queue = F.col("dest").startswith("/queue/")
    dest_rates = (
        dests.crossJoin(grid)
        .withColumn("epoch", last_epoch)
        .join(per_dest, ["dest", "b"], "left")
        .join(changes, ["dest", "b", "epoch"], "left")  # the change in the bucket's last epoch
        .fillna(0, subset=[*counts, "change"])
        .withColumn("backlog", F.when(queue, F.sum("change").over(we)))
        .withColumn("backlog_start", F.when(queue, F.col("backlog") - F.col("change")))
        .withColumn(
            "dest_mem_pct",  # a destination's memory is 0% (in each epoch) until it reports otherwise
            F.coalesce(F.last("mem", ignorenulls=True).over(we), F.lit(0)),
        )
        .select("dest", "b", _bucket_t(bucket), *counts, "backlog", "backlog_start", "dest_mem_pct")
        .localCheckpoint()
    )

    # per consumer and bucket: broker dispatches (session) or client receipts (client)
    consumer_rates = (
        counts_df.filter(e.isin("dispatch", "ack", "received", "acked"))
        .withColumn("consumer", F.coalesce("session", "client"))
        .withColumn("source", F.when(e.isin("dispatch", "ack"), "broker").otherwise("client"))
        .groupBy("consumer", "sub", "dest", "source", "b")
        .agg(
            n_if(e.isin("dispatch", "received")).alias("received"),
            n_if(e.isin("ack", "acked")).alias("acked"),
        )
        .select("consumer", "sub", "dest", "source", "b", _bucket_t(bucket), "received", "acked")
        .localCheckpoint()
    )

    # broker-wide usage: the highest value in a bucket, else the last one known
    pcts = USAGE_PCTS
    per_b = rare.filter(e == "usage").groupBy("b").agg(*[F.max(c).alias(c) for c in pcts])
    wf = Window.orderBy("b").rowsBetween(Window.unboundedPreceding, 0)
    usage = (
        grid.join(per_b, "b", "left")
        .select(
            "b", _bucket_t(bucket), *[F.coalesce(F.last(c, ignorenulls=True).over(wf), F.lit(0)).alias(c) for c in pcts]
        )
        .localCheckpoint()
    )
    subscriptions = _subscriptions(rare, t1 - t0).localCheckpoint()
    blocked = _blocked(rare, t1 - t0).localCheckpoint()
    swaps = rare.filter(e.isin("swap_out", "swap_in")).select(*SWAP_COLUMNS).localCheckpoint()
    jev = rare.filter(e.isin("journal_roll", "journal_full", "journal_state"))
    journal = jev.select(
        *JOURNAL_COLUMNS, F.size(F.map_filter("file_live", lambda k, v: v > 0)).alias("pinned")
    ).localCheckpoint()
    latest = (
        jev.filter(F.col("file_live").isNotNull())
        .groupBy("store")
        .agg(F.max_by(F.struct("t", "file_live"), F.struct("t", "seq")).alias("last"))
    )
    journal_files = latest.select(
        "store", F.col("last.t").alias("t"), F.explode("last.file_live").alias("file", "live")
    ).localCheckpoint()
    sends = ev.filter(e == "send").select("t", "dest", "msg")
    return Tables(
        t0=t0,
        t1=t1,
        bucket=bucket,
        buckets=nb,
        events=rare,
        sends=sends,
        dest_rates=dest_rates,
        consumer_rates=consumer_rates,
        usage=usage,
        subscriptions=subscriptions,
        blocked=blocked,
        swaps=swaps,
        journal=journal,
        journal_files=journal_files,
        counts=counts_df,
    )


def _subscriptions(ev: DataFrame, end: float) -> DataFrame:
    """One row per (session, sub): from subscribe to unsubscribe, disconnect or trace end."""
    e = F.col("event")
    subs = (
        ev.filter(e.isin("subscribe", "unsubscribe") & F.col("session").isNotNull())
        .groupBy("session", "sub")
        .agg(
            F.min(F.when(e == "subscribe", F.col("t"))).alias("start"),
            F.max(F.when(e == "unsubscribe", F.col("t"))).alias("unsub"),
            F.first(F.when(e == "subscribe", F.col("dest")), ignorenulls=True).alias("dest"),
            F.max(F.when(e == "subscribe", F.col("prefetch"))).alias("prefetch"),
        )
        .filter(F.col("start").isNotNull())
    )
    gone = ev.filter(e == "disconnect").groupBy("session").agg(F.min("t").alias("gone"))
    return subs.join(gone, "session", "left").select(
        "session",
        "sub",
        "dest",
        "start",
        F.least(F.coalesce("unsub", F.lit(end)), F.coalesce("gone", F.lit(end))).alias("end"),
        "prefetch",
    )


def _blocked(ev: DataFrame, end: float) -> DataFrame:
    """flow_block -> the next flow_unblock of the same (session, dest); open ones last to the end."""
    w = Window.partitionBy("session", "dest").orderBy("t", "seq")
    flow = ev.filter(F.col("event").isin("flow_block", "flow_unblock")).select(
        "session",
        "dest",
        "event",
        "t",
        "seq",
        "usage",
        "pct",
        "msg",
        F.lead("event").over(w).alias("next_event"),
        F.lead("t").over(w).alias("next_t"),
    )
    return (
        flow.filter(F.col("event") == "flow_block")
        .select(
            "session",
            "dest",
            "usage",
            "pct",
            F.col("t").alias("start"),
            F.coalesce("next_t", F.lit(end)).alias("end"),
            F.col("next_t").isNull().alias("open"),
            "msg",
        )
        .withColumn("duration", F.col("end") - F.col("start"))
    )
