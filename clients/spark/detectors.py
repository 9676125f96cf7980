"""Pathology detectors: each turns the bucketed tables into findings.

A finding is one row of ``FINDING_COLUMNS``: the detector's name, its time
window (seconds since the trace's first event), where it happened
(destination, session, subscription), a one-line summary and the evidence as
a JSON object. Each detector names the seed it comes from:

- ``starved_consumer`` (seed 000): a queue consumer receives nothing for a
  window while its queue has a backlog, broker memory is at or over the
  cursor high-water mark and the queue's own memory is below it (its cursor
  cannot page in; it is not merely a full queue with a stuck consumer).
- ``blocked_producer_idle_consumers`` (seed 001): a producer stays blocked by
  flow control while the destination's consumers have nothing to do.
- ``swap_storm`` (seed 001): file cursors swap to the temp store again and
  again within a short time.
- ``slow_consumer`` (seed 002): the broker marked a subscription slow.
- ``stalled_socket`` (seed 003): a write to a client was stuck until the
  write timeout closed it, or (no write timeout) its connection samples show
  bytes queued and nothing drained for a window; with the reconnects refused
  meanwhile (the same client-id).
- ``journal_full_few_live`` (seed 004): enqueues were refused as the journal
  was full while it held few live messages, each pinning a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from clients.spark.tables import Tables, islands

__all__ = ["Params", "FINDING_COLUMNS", "DETECTORS", "find_all"]

FINDING_COLUMNS = ["detector", "start", "end", "duration", "dest", "session", "sub", "summary",
                   "evidence"]


@dataclass(frozen=True)
class Params:
    bucket: float = 1.0  # seconds per bucket
    min_window: float = 5.0  # shortest starved / idle window reported, seconds
    hwm: int = 70  # cursor high-water mark (analyze takes it from page_in_blocked when there)
    swap_gap: float = 5.0  # swaps closer than this belong to one storm
    swap_min: int = 3  # swap_out events that make a storm
    episode_gap: float = 10.0  # journal_full events closer than this are one episode
    few_live_fraction: float = 0.2  # "few": live bytes at most this share of capacity
    few_live_per_file: float = 10.0  # ... or, without sizes, live messages per journal file
    reconnect_window: float = 60.0  # refused reconnects this soon after a write timeout


def _finding(df: DataFrame, detector: str, summary: Column, evidence: list[Column],
             dest: Column | None = None, session: Column | None = None,
             sub: Column | None = None) -> DataFrame:
    none = F.lit(None).cast("string")
    return df.select(
        F.lit(detector).alias("detector"),
        F.col("start").cast("double").alias("start"),
        F.col("end").cast("double").alias("end"),
        (F.col("end") - F.col("start")).cast("double").alias("duration"),
        (dest if dest is not None else none).alias("dest"),
        (session if session is not None else none).alias("session"),
        (sub if sub is not None else none).alias("sub"),
        summary.alias("summary"),
        F.to_json(F.struct(*evidence), {"ignoreNullFields": "false"}).alias("evidence"),
    )


def _buckets_within(start: Column, end: Column, bucket: float) -> Column:
    """The whole buckets inside [start, end) (callers keep only non-empty ranges)."""
    return F.sequence(F.ceil(start / bucket).cast("long"), (F.floor(end / bucket) - 1).cast("long"))


def _nonempty(start: Column, end: Column, bucket: float) -> Column:
    return F.ceil(start / bucket) <= F.floor(end / bucket) - 1


def _window_bounds(p: Params) -> list[Column]:
    return [(F.min("b") * p.bucket).alias("start"), ((F.max("b") + 1) * p.bucket).alias("end")]


def starved_consumer(tb: Tables, p: Params) -> DataFrame:
    subs = tb.subscriptions.filter(F.col("dest").startswith("/queue/") &
                                   _nonempty(F.col("start"), F.col("end"), p.bucket))
    grid = subs.select("session", "sub", "dest",
                       F.explode(_buckets_within(F.col("start"), F.col("end"), p.bucket)).alias("b"))
    received = (
        tb.consumer_rates.filter(F.col("source") == "broker")
        .groupBy(F.col("consumer").alias("session"), "sub", "b")
        .agg(F.sum("received").alias("received"))
    )
    backlog0 = F.col("backlog") - F.col("recovered") - F.col("enqueued") + F.col("removed")
    flagged = (
        grid.join(tb.dest_rates, ["dest", "b"])
        .join(tb.usage.select("b", "mem_pct"), "b")
        .join(received, ["session", "sub", "b"], "left")
        # the seed's tell: the broker is at the mark but the queue's own memory is not
        .filter((F.coalesce("received", F.lit(0)) == 0) & (F.col("backlog") > 0) & (backlog0 > 0) &
                (F.col("mem_pct") >= p.hwm) & (F.col("dest_mem_pct") < p.hwm))
    )
    keys = ["session", "sub", "island"]
    flagged = islands(flagged, ["session", "sub"])
    windows = (
        flagged.groupBy(*keys, "dest")
        .agg(*_window_bounds(p), F.min("backlog").alias("backlog_min"),
             F.max("backlog").alias("backlog_max"), F.min("mem_pct").alias("mem_pct_min"),
             F.max("mem_pct").alias("mem_pct_max"), F.max("dest_mem_pct").alias("dest_mem_pct"),
             F.sum("page_in_blocked").alias("page_in_blocked"))
        .filter(F.col("end") - F.col("start") >= p.min_window)
    )
    # who holds the memory: the other destinations' highest own percent in the window
    others = tb.dest_rates.filter(F.col("dest_mem_pct") > 0).select(
        F.col("dest").alias("holder"), "b", F.col("dest_mem_pct").alias("pct"))
    holders = (
        flagged.select(*keys, "dest", "b").join(others, "b")
        .filter(F.col("holder") != F.col("dest"))
        .groupBy(*keys, "holder").agg(F.max("pct").alias("pct"))
        .groupBy(*keys)
        .agg(F.slice(F.sort_array(F.collect_list(F.struct((-F.col("pct")).alias("neg"),
                                                          F.col("holder").alias("dest"), "pct"))),
                     1, 3).alias("h"))
        .select(*keys, F.transform("h", lambda x: F.struct(x["dest"].alias("dest"),
                                                           x["pct"].alias("dest_mem_pct")))
                .alias("memory_holders"))
    )
    out = windows.join(holders, keys, "left")
    return _finding(
        out, "starved_consumer",
        F.format_string(
            "consumer %s/%s got nothing from %s for %.0f s: backlog %d-%d, broker memory %d-%d%% "
            "(high-water mark %d%%), the queue's own memory %s%%",
            "session", "sub", "dest", F.col("end") - F.col("start"), "backlog_min", "backlog_max",
            "mem_pct_min", "mem_pct_max", F.lit(p.hwm),
            F.coalesce(F.col("dest_mem_pct").cast("string"), F.lit("?"))),
        [F.col("backlog_min"), F.col("backlog_max"), F.col("mem_pct_min"), F.col("mem_pct_max"),
         F.lit(p.hwm).alias("hwm"), F.col("dest_mem_pct"), F.col("page_in_blocked"),
         F.col("memory_holders")],
        dest=F.col("dest"), session=F.col("session"), sub=F.col("sub"),
    )


def blocked_producer_idle_consumers(tb: Tables, p: Params) -> DataFrame:
    blk = tb.blocked.filter(_nonempty(F.col("start"), F.col("end"), p.bucket))
    keys = ["session", "dest", "start"]
    grid = blk.select(*keys, "usage", "pct", "open", F.col("end").alias("blocked_end"),
                      F.explode(_buckets_within(F.col("start"), F.col("end"), p.bucket)).alias("b"))
    flagged = (
        grid.join(tb.dest_rates.select("dest", "b", "dispatched", "backlog"), ["dest", "b"], "left")
        .join(tb.usage, "b")
        .filter((F.coalesce("dispatched", F.lit(0)) == 0) & (F.coalesce("backlog", F.lit(0)) <= 0))
    )
    windows = (
        islands(flagged.withColumnRenamed("start", "blocked_start"),
                ["session", "dest", "blocked_start"])
        .groupBy("session", "dest", "blocked_start", "island")
        .agg(*_window_bounds(p), F.first("usage").alias("usage"), F.first("pct").alias("pct"),
             F.first("open").alias("never_unblocked"), F.first("blocked_end").alias("blocked_end"),
             F.min("temp_pct").alias("temp_pct_min"), F.max("temp_pct").alias("temp_pct_max"),
             F.max("mem_pct").alias("mem_pct_max"), F.max("store_pct").alias("store_pct_max"))
        .filter(F.col("end") - F.col("start") >= p.min_window)
    )
    subs = tb.subscriptions.select(F.col("dest").alias("sdest"), F.col("start").alias("s0"),
                                   F.col("end").alias("s1"))
    consumers = (
        windows.join(subs, (F.col("sdest") == F.col("dest")) & (F.col("s0") < F.col("end")) &
                     (F.col("s1") > F.col("start")))
        .groupBy("session", "dest", "start").agg(F.count(F.lit(1)).alias("consumers"))
    )
    out = windows.join(consumers, ["session", "dest", "start"])  # idle consumers must exist
    return _finding(
        out, "blocked_producer_idle_consumers",
        F.format_string(
            "producer %s blocked on %s usage (%d%%) sending to %s while its %d consumer(s) had "
            "nothing to do for %.0f s; temp %d-%d%%%s",
            "session", "usage", "pct", "dest", "consumers", F.col("end") - F.col("start"),
            "temp_pct_min", "temp_pct_max",
            F.when(F.col("never_unblocked"), F.lit("; never unblocked")).otherwise(F.lit(""))),
        [F.col("usage"), F.col("pct"), F.col("consumers"), F.col("never_unblocked"),
         F.col("blocked_start"), F.col("blocked_end"), F.col("temp_pct_min"),
         F.col("temp_pct_max"), F.col("mem_pct_max"), F.col("store_pct_max")],
        dest=F.col("dest"), session=F.col("session"),
    )


def _episodes(df: DataFrame, keys: list[str], gap: float) -> DataFrame:
    """Number runs of events per ``keys`` where consecutive events are at most ``gap`` apart."""
    w = Window.partitionBy(*keys).orderBy("t")
    new = F.when(F.lag("t").over(w).isNull() | (F.col("t") - F.lag("t").over(w) > gap), 1).otherwise(0)
    return df.withColumn("new", new).withColumn("episode", F.sum("new").over(w))


def swap_storm(tb: Tables, p: Params) -> DataFrame:
    swaps = _episodes(tb.swaps.filter(F.col("event") == "swap_out").withColumn("all", F.lit(1)),
                      ["all"], p.swap_gap)
    storms = (
        swaps.groupBy("episode")
        .agg(F.min("t").alias("start"), F.max("t").alias("last"), F.count(F.lit(1)).alias("swaps"),
             F.sum("count").alias("messages"), F.sum("bytes").alias("bytes"),
             F.max("temp_pct").alias("temp_pct_max"), F.max("mem_pct").alias("mem_pct_max"),
             F.sort_array(F.collect_set("dest")).alias("dests"),
             F.size(F.collect_set(F.struct("session", "sub"))).alias("subscriptions"))
        .filter(F.col("swaps") >= p.swap_min)
        .withColumn("end", F.col("last") + p.bucket)
    )
    return _finding(
        storms, "swap_storm",
        F.format_string("%d swaps to the temp store within %.0f s (%d messages from %d "
                        "subscription(s) on %s), temp usage up to %s%%",
                        "swaps", F.col("end") - F.col("start"), "messages", "subscriptions",
                        F.array_join("dests", ", "),
                        F.coalesce(F.col("temp_pct_max").cast("string"), F.lit("?"))),
        [F.col("swaps"), F.col("messages"), F.col("bytes"), F.col("subscriptions"),
         F.col("dests"), F.col("temp_pct_max"), F.col("mem_pct_max")],
        dest=F.element_at("dests", 1),
    )


def slow_consumer(tb: Tables, p: Params) -> DataFrame:
    w = Window.partitionBy("session", "sub").orderBy("t", "seq")
    marks = tb.events.filter(F.col("event") == "slow_consumer")
    change = F.when(F.lag("slow").over(w).isNull() | (F.lag("slow").over(w) != F.col("slow")), 1).otherwise(0)
    runs = (
        marks.withColumn("change", change).withColumn("run", F.sum("change").over(w))
        .groupBy("session", "sub", "run")
        .agg(F.first("dest").alias("dest"), F.first("slow").alias("slow"), F.min("t").alias("start"),
             F.max("pending").alias("pending_max"), F.max("prefetch").alias("prefetch"))
    )
    wr = Window.partitionBy("session", "sub").orderBy("run")
    slow = (
        runs.withColumn("end", F.coalesce(F.lead("start").over(wr), F.lit(tb.t1 - tb.t0)))
        .withColumn("recovered", F.lead("start").over(wr).isNotNull())
        .filter("slow")
    )
    keys = ["session", "sub", "start"]
    b_in = (F.col("r.b") >= F.floor(F.col("s.start") / p.bucket)) & (F.col("r.b") * p.bucket < F.col("s.end"))
    got = (
        slow.alias("s").join(tb.consumer_rates.alias("r"),
                             (F.col("r.consumer") == F.col("s.session")) &
                             (F.col("r.sub") == F.col("s.sub")) & b_in)
        .groupBy("s.session", "s.sub", "s.start")
        .agg(F.sum("r.received").alias("received"), F.sum("r.acked").alias("acked"))
    )
    enq = (
        slow.alias("s").join(tb.dest_rates.alias("r"), (F.col("r.dest") == F.col("s.dest")) & b_in)
        .groupBy("s.session", "s.sub", "s.start").agg(F.sum("r.enqueued").alias("enqueued"))
    )
    out = slow.join(got, keys, "left").join(enq, keys, "left").fillna(0, subset=["received", "acked",
                                                                                   "enqueued"])
    return _finding(
        out, "slow_consumer",
        F.format_string("the broker marked %s/%s on %s slow for %.0f s%s: up to %d pending, "
                        "%d received and %d acked while %d were enqueued",
                        "session", "sub", "dest", F.col("end") - F.col("start"),
                        F.when(F.col("recovered"), F.lit("")).otherwise(F.lit(" (to the end)")),
                        F.coalesce("pending_max", F.lit(0)), "received", "acked", "enqueued"),
        [F.col("pending_max"), F.col("prefetch"), F.col("received"), F.col("acked"),
         F.col("enqueued"), F.col("recovered")],
        dest=F.col("dest"), session=F.col("session"), sub=F.col("sub"),
    )


def stalled_socket(tb: Tables, p: Params) -> DataFrame:
    ev = tb.events
    timed_out = ev.filter(F.col("event") == "write_timeout").select(
        "session", "client_id", "waited", "pending_bytes", F.col("t").alias("end"),
        (F.col("t") - F.coalesce("waited", F.lit(0.0))).alias("start"))
    # A stall no write timeout ended (the seed's own case): the connection samples show
    # bytes queued for a socket that has not drained for at least min_window seconds.
    sampled = (
        ev.filter((F.col("event") == "connection") & (F.col("idle_write") >= p.min_window)
                  & (F.col("pending_bytes") > 0))
        .groupBy("session")
        .agg(F.max("client_id").alias("client_id"), F.max("idle_write").alias("waited"),
             F.max("pending_bytes").alias("pending_bytes"), F.max("t").alias("end"),
             F.min(F.col("t") - F.col("idle_write")).alias("start"))
        .join(timed_out.select("session"), "session", "left_anti")
        .select("session", "client_id", "waited", "pending_bytes", "end", "start")
    )
    stuck = timed_out.unionByName(sampled)
    refused = ev.filter((F.col("event") == "error") & (F.col("code") == "client_id_in_use")).select(
        F.col("client_id").alias("rid"), F.col("t").alias("rt"))
    keys = ["session", "start"]
    reconnects = (
        stuck.join(refused, (F.col("rid") == F.col("client_id")) & (F.col("rt") >= F.col("start")) &
                   (F.col("rt") <= F.col("end") + p.reconnect_window))
        .groupBy(*keys).agg(F.count(F.lit(1)).alias("refused_reconnects"))
    )
    b_in = (F.col("r.b") >= F.floor(F.col("s.start") / p.bucket)) & (F.col("r.b") * p.bucket <= F.col("s.end"))
    traffic = (
        stuck.alias("s").join(tb.consumer_rates.alias("r"),
                              (F.col("r.consumer") == F.col("s.session")) & b_in)
        .groupBy("s.session", "s.start")
        .agg(F.sum("r.received").alias("dispatched"), F.sum("r.acked").alias("acked"))
    )
    out = (stuck.join(reconnects, keys, "left").join(traffic, keys, "left")
           .fillna(0, subset=["refused_reconnects", "dispatched", "acked"]))
    return _finding(
        out, "stalled_socket",
        F.format_string("writes to %s (client-id %s) were stuck for %.1f s with %d bytes queued; "
                        "%d messages dispatched, %d acked meanwhile; %d reconnect(s) refused",
                        "session", F.coalesce("client_id", F.lit("-")), "waited",
                        F.coalesce("pending_bytes", F.lit(0)), "dispatched", "acked",
                        "refused_reconnects"),
        [F.col("client_id"), F.col("waited"), F.col("pending_bytes"), F.col("dispatched"),
         F.col("acked"), F.col("refused_reconnects")],
        session=F.col("session"),
    )


def journal_full_few_live(tb: Tables, p: Params) -> DataFrame:
    full = tb.events.filter(F.col("event") == "journal_full").withColumn(
        "pinned", F.size(F.map_filter("file_live", lambda k, v: v > 0)))
    eps = (
        _episodes(full, ["store"], p.episode_gap)
        .groupBy("store", "episode")
        .agg(F.min("t").alias("start"), F.max("t").alias("last"), F.count(F.lit(1)).alias("refused"),
             F.first("layout").alias("layout"), F.first("dest", ignorenulls=True).alias("dest"),
             F.max_by(F.struct("live", "files", "pinned", "live_bytes", "capacity", "file_live"),
                      "t").alias("x"))
        .select("*", "x.*").drop("x")
        .withColumn("end", F.col("last") + p.bucket)
    )
    few = F.when(F.col("live_bytes").isNotNull() & (F.col("capacity") > 0),
                 F.col("live_bytes") <= F.col("capacity") * p.few_live_fraction
                 ).otherwise(F.col("live") <= F.col("files") * p.few_live_per_file)
    out = eps.filter(few)
    return _finding(
        out, "journal_full_few_live",
        F.format_string("journal %s (%s) refused %d enqueue(s) as full while it held only %d live "
                        "message(s), pinning %d of %d files",
                        "store", "layout", "refused", "live", "pinned", "files"),
        [F.col("refused"), F.col("live"), F.col("live_bytes"), F.col("capacity"), F.col("files"),
         F.col("pinned"), F.col("file_live")],
        dest=F.coalesce("dest", "store"),
    )


DETECTORS = {
    "starved_consumer": starved_consumer,
    "blocked_producer_idle_consumers": blocked_producer_idle_consumers,
    "swap_storm": swap_storm,
    "slow_consumer": slow_consumer,
    "stalled_socket": stalled_socket,
    "journal_full_few_live": journal_full_few_live,
}


def find_all(tb: Tables, p: Params) -> DataFrame:
    """Every detector's findings, one DataFrame ordered by window start."""
    parts = [detect(tb, p) for detect in DETECTORS.values()]
    return reduce(DataFrame.unionByName, parts).orderBy("start", "detector", "session", "sub")
