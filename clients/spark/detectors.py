"""Pathology detectors: each turns the bucketed tables into findings.

A finding is one row of ``FINDING_COLUMNS``: the detector's name, its time
window (seconds since the trace's first event), where it happened
(destination, session, subscription), a one-line summary and the evidence as
a JSON object. What each finding means is ``clients.spark.findings.WHAT``;
``clients.spark.inprocess`` runs the same detectors without Spark (a test
holds the two equal over every lab run):

- ``starved_consumer``: a queue consumer receives nothing for a window while
  its queue has a backlog, broker memory is at or over the cursor high-water
  mark and the queue's own memory is below it (its cursor cannot page in; it
  is not merely a full queue with a stuck consumer).
- ``blocked_producer_idle_consumers``: a producer stays blocked by flow
  control while the destination's consumers have nothing to do.
- ``swap_storm``: file cursors swap to the temp store again and again within
  a short time.
- ``slow_consumer``: a subscription the broker marked slow held the producer
  back (a flow-control block overlaps its slow episode).
- ``stalled_socket``: the connection samples show bytes queued and nothing
  drained for a window, and the broker did not end it itself (no write
  timeout, no heart-beats watching it); with the reconnects refused
  meanwhile (the same client-id).
- ``journal_full_few_live``: enqueues were refused as the journal was full
  while it held few live messages, each pinning a file.
"""

from __future__ import annotations

from functools import reduce

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from clients.signatures import REFUSED, idle_while_blocked, starving
from clients.spark.findings import CURED_BY, FINDING_COLUMNS, SUMMARY, Params
from clients.spark.findings import DETECTORS as NAMES
from clients.spark.tables import Tables, islands

__all__ = ["Params", "FINDING_COLUMNS", "DETECTORS", "find_all"]


def _finding(
    df: DataFrame,
    detector: str,
    summary: list[Column | str],
    evidence: list[Column | str],
    dest: Column | None = None,
    session: Column | None = None,
    sub: Column | None = None,
) -> DataFrame:
    """``df``'s rows as findings of ``detector``: ``summary`` fills the detector's
    ``SUMMARY`` format, ``evidence`` (columns, or column names) becomes its JSON."""
    none = F.lit(None).cast("string")
    return df.select(
        F.lit(detector).alias("detector"),
        F.col("start").cast("double").alias("start"),
        F.col("end").cast("double").alias("end"),
        _duration().cast("double").alias("duration"),
        (dest if dest is not None else none).alias("dest"),
        (session if session is not None else none).alias("session"),
        (sub if sub is not None else none).alias("sub"),
        F.format_string(SUMMARY[detector], *summary).alias("summary"),
        F.to_json(F.struct(*evidence), {"ignoreNullFields": "false"}).alias("evidence"),
    )


def _duration() -> Column:
    """A window's length: ``end - start``."""
    return F.col("end") - F.col("start")


def _long_enough(p: Params) -> Column:
    """The window lasts at least ``p.min_window`` seconds."""
    return _duration() >= p.min_window


def _never_unblocked(open_: str) -> Column:
    """The summary's note for a block still open at the trace's end."""
    return F.when(F.col(open_), F.lit("; never unblocked")).otherwise(F.lit(""))


def _spread(name: str) -> list[Column]:
    """``name``'s least and greatest value, as ``name_min`` and ``name_max``."""
    return [F.min(name).alias(f"{name}_min"), F.max(name).alias(f"{name}_max")]


def _buckets_within(start: Column, end: Column, bucket: float) -> Column:
    """The whole buckets inside [start, end) (callers keep only non-empty ranges)."""
    return F.sequence(F.ceil(start / bucket).cast("long"), (F.floor(end / bucket) - 1).cast("long"))


def _nonempty(start: Column, end: Column, bucket: float) -> Column:
    return F.ceil(start / bucket) <= F.floor(end / bucket) - 1


def _window_bounds(p: Params) -> list[Column]:
    return [(F.min("b") * p.bucket).alias("start"), ((F.max("b") + 1) * p.bucket).alias("end")]


def starved_consumer(tb: Tables, p: Params) -> DataFrame:
    subs = tb.subscriptions.filter(
        F.col("dest").startswith("/queue/") & _nonempty(F.col("start"), F.col("end"), p.bucket)
    )
    grid = subs.select(
        "session", "sub", "dest", F.explode(_buckets_within(F.col("start"), F.col("end"), p.bucket)).alias("b")
    )
    received = (
        tb.consumer_rates.filter(F.col("source") == "broker")
        .groupBy(F.col("consumer").alias("session"), "sub", "b")
        .agg(F.sum("received").alias("received"))
    )
    total = received.groupBy("session", "sub").agg(F.sum("received").alias("received_all"))
    flagged = (
        grid.join(tb.dest_rates, ["dest", "b"])
        .join(tb.usage.select("b", "mem_pct"), "b")
        .join(received, ["session", "sub", "b"], "left")
        # the seed's tell: the broker is at the mark but the queue's own memory is not
        .filter(
            (F.col("backlog_start") > 0)
            & starving(
                F.coalesce("received", F.lit(0)), F.col("backlog"), F.col("mem_pct"), F.col("dest_mem_pct"), p.hwm
            )
        )
    )
    keys = ["session", "sub", "island"]
    flagged = islands(flagged, ["session", "sub"])
    windows = (
        flagged.groupBy(*keys, "dest")
        .agg(
            *_window_bounds(p),
            *_spread("backlog"),
            *_spread("mem_pct"),
            F.max("dest_mem_pct").alias("dest_mem_pct"),
            F.sum("page_in_blocked").alias("page_in_blocked"),
        )
        .filter(_long_enough(p))
    )
    # who holds the memory: the other destinations' highest own percent in the window
    others = tb.dest_rates.filter(F.col("dest_mem_pct") > 0).select(
        F.col("dest").alias("holder"), "b", F.col("dest_mem_pct").alias("pct")
    )
    holders = (
        flagged.select(*keys, "dest", "b")
        .join(others, "b")
        .filter(F.col("holder") != F.col("dest"))
        .groupBy(*keys, "holder")
        .agg(F.max("pct").alias("pct"))
        .groupBy(*keys)
        .agg(
            F.slice(
                F.sort_array(
                    F.collect_list(F.struct((-F.col("pct")).alias("neg"), F.col("holder").alias("dest"), "pct"))
                ),
                1,
                3,
            ).alias("h")
        )
        .select(
            *keys,
            F.transform("h", lambda x: F.struct(x["dest"].alias("dest"), x["pct"].alias("dest_mem_pct"))).alias(
                "memory_holders"
            ),
        )
    )
    out = (
        windows.join(holders, keys, "left")
        .join(total, ["session", "sub"], "left")
        .withColumn("received", F.coalesce("received_all", F.lit(0)))
    )
    return _finding(
        out,
        "starved_consumer",
        [
            "session",
            "sub",
            "dest",
            _duration(),
            "backlog_min",
            "backlog_max",
            "mem_pct_min",
            "mem_pct_max",
            F.lit(p.hwm),
            F.coalesce(F.col("dest_mem_pct").cast("string"), F.lit("?")),
        ],
        [
            "backlog_min",
            "backlog_max",
            "mem_pct_min",
            "mem_pct_max",
            F.lit(p.hwm).alias("hwm"),
            "dest_mem_pct",
            "page_in_blocked",
            "received",
            "memory_holders",
        ],
        dest=F.col("dest"),
        session=F.col("session"),
        sub=F.col("sub"),
    )


def _holding_blocks(tb: Tables) -> DataFrame:
    """The blocks of connections that held unacknowledged messages in every sample inside
    the block: session, dest, start, held_min, held_max, samples."""
    samples = tb.events.filter((F.col("event") == "connection") & F.col("pending").isNotNull()).select(
        F.col("session").alias("csession"), F.col("t").alias("ct"), "pending"
    )
    joined = tb.blocked.join(
        samples,
        (F.col("csession") == F.col("session")) & (F.col("ct") >= F.col("start")) & (F.col("ct") <= F.col("end")),
    )
    return (
        joined.groupBy("session", "dest", "start")
        .agg(
            F.min("pending").alias("held_min"),
            F.max("pending").alias("held_max"),
            F.count(F.lit(1)).alias("samples"),
        )
        .filter(F.col("held_min") > 0)
    )


def blocked_producer_idle_consumers(tb: Tables, p: Params) -> DataFrame:
    # not a full store (store_held_by_few_live), nor a connection holding its own ACKs back
    # (blocked_holding_unacked)
    blk = tb.blocked.filter(_nonempty(F.col("start"), F.col("end"), p.bucket) & (F.col("usage") != "store")).join(
        _holding_blocks(tb), ["session", "dest", "start"], "left_anti"
    )
    keys = ["session", "dest", "start"]
    grid = blk.select(
        *keys,
        "usage",
        "pct",
        "open",
        F.col("end").alias("blocked_end"),
        F.explode(_buckets_within(F.col("start"), F.col("end"), p.bucket)).alias("b"),
    )
    flagged = (
        grid.join(tb.dest_rates.select("dest", "b", "dispatched", "backlog"), ["dest", "b"], "left")
        .join(tb.usage, "b")
        .filter(idle_while_blocked(F.coalesce("dispatched", F.lit(0)), F.coalesce("backlog", F.lit(0))))
    )
    windows = (
        islands(flagged.withColumnRenamed("start", "blocked_start"), ["session", "dest", "blocked_start"])
        .groupBy("session", "dest", "blocked_start", "island")
        .agg(
            *_window_bounds(p),
            F.first("usage").alias("usage"),
            F.first("pct").alias("pct"),
            F.first("open").alias("never_unblocked"),
            F.first("blocked_end").alias("blocked_end"),
            *_spread("temp_pct"),
            F.max("mem_pct").alias("mem_pct_max"),
            F.max("store_pct").alias("store_pct_max"),
        )
        .filter(_long_enough(p))
    )
    subs = tb.subscriptions.select(F.col("dest").alias("sdest"), F.col("start").alias("s0"), F.col("end").alias("s1"))
    consumers = (
        windows.join(
            subs, (F.col("sdest") == F.col("dest")) & (F.col("s0") < F.col("end")) & (F.col("s1") > F.col("start"))
        )
        .groupBy("session", "dest", "start")
        .agg(F.count(F.lit(1)).alias("consumers"))
    )
    out = windows.join(consumers, ["session", "dest", "start"])  # idle consumers must exist
    return _finding(
        out,
        "blocked_producer_idle_consumers",
        [
            "session",
            "usage",
            "pct",
            "dest",
            "consumers",
            _duration(),
            "temp_pct_min",
            "temp_pct_max",
            _never_unblocked("never_unblocked"),
        ],
        [
            "usage",
            "pct",
            "consumers",
            "never_unblocked",
            "blocked_start",
            "blocked_end",
            "temp_pct_min",
            "temp_pct_max",
            "mem_pct_max",
            "store_pct_max",
        ],
        dest=F.col("dest"),
        session=F.col("session"),
    )


def _episodes(df: DataFrame, keys: list[str], gap: float) -> DataFrame:
    """Number runs of events per ``keys`` where consecutive events are at most ``gap`` apart."""
    w = Window.partitionBy(*keys).orderBy("t")
    new = F.when(F.lag("t").over(w).isNull() | (F.col("t") - F.lag("t").over(w) > gap), 1).otherwise(0)
    return df.withColumn("new", new).withColumn("episode", F.sum("new").over(w))


def swap_storm(tb: Tables, p: Params) -> DataFrame:
    swaps = _episodes(tb.swaps.filter(F.col("event") == "swap_out").withColumn("all", F.lit(1)), ["all"], p.swap_gap)
    storms = (
        swaps.groupBy("episode")
        .agg(
            F.min("t").alias("start"),
            F.max("t").alias("last"),
            F.count(F.lit(1)).alias("swaps"),
            F.sum("count").alias("messages"),
            F.sum("bytes").alias("bytes"),
            F.max("temp_pct").alias("temp_pct_max"),
            F.max("mem_pct").alias("mem_pct_max"),
            F.sort_array(F.collect_set("dest")).alias("dests"),
            F.size(F.collect_set(F.struct("session", "sub"))).alias("subscriptions"),
        )
        .filter(F.col("swaps") >= p.swap_min)
        .withColumn("end", F.col("last") + p.bucket)
    )
    return _finding(
        storms,
        "swap_storm",
        [
            "swaps",
            _duration(),
            "messages",
            "subscriptions",
            F.array_join("dests", ", "),
            F.coalesce(F.col("temp_pct_max").cast("string"), F.lit("?")),
        ],
        [
            "swaps",
            "messages",
            "bytes",
            "subscriptions",
            "dests",
            "temp_pct_max",
            "mem_pct_max",
        ],
        dest=F.element_at("dests", 1),
    )


def slow_consumer(tb: Tables, p: Params) -> DataFrame:
    """A subscription marked slow while the producers to its destination were held by flow
    control. An episode ends when the mark is lifted, the subscription ends (an abort, an
    unsubscribe, a disconnect) or the trace does."""
    span = tb.t1 - tb.t0
    w = Window.partitionBy("session", "sub").orderBy("t", "seq")
    marks = tb.events.filter(F.col("event") == "slow_consumer")
    change = F.when(F.lag("slow").over(w).isNull() | (F.lag("slow").over(w) != F.col("slow")), 1).otherwise(0)
    runs = (
        marks.withColumn("change", change)
        .withColumn("run", F.sum("change").over(w))
        .groupBy("session", "sub", "run")
        .agg(
            F.first("dest").alias("dest"),
            F.first("slow").alias("slow"),
            F.min("t").alias("start"),
            F.max("pending").alias("pending_max"),
            F.max("prefetch").alias("prefetch"),
        )
    )
    wr = Window.partitionBy("session", "sub").orderBy("run")
    subs = tb.subscriptions.select("session", "sub", F.col("start").alias("sub_start"), F.col("end").alias("sub_end"))
    slow = (
        runs.withColumn("next", F.lead("start").over(wr))
        .filter("slow")
        .join(subs, ["session", "sub"], "left")
        .withColumn("end", F.least(F.coalesce("next", F.lit(span)), F.coalesce("sub_end", F.lit(span)), F.lit(span)))
        .withColumn("recovered", F.col("next").isNotNull() & (F.col("next") <= F.col("end")))
        .withColumn("sub_start", F.coalesce("sub_start", "start"))
    )
    keys = ["session", "sub", "start"]
    s = slow.alias("s")
    blk = tb.blocked.alias("k")
    overlap = F.greatest(F.lit(0.0), F.least("k.end", "s.end") - F.greatest("k.start", "s.start"))
    blocked = (
        s.join(blk, F.col("k.dest") == F.col("s.dest"))
        .groupBy("s.session", "s.sub", "s.start")
        .agg(F.sum(overlap).alias("blocked_seconds"))
        .filter(F.col("blocked_seconds") > 0)
    )
    held = tb.blocked.filter(F.col("open") & F.col("msg").isNotNull()).select(F.col("msg").alias("held"))
    # the sends are the input's largest part: read only when some subscription was marked slow
    all_sends = tb.sends if marks.limit(1).count() else tb.sends.limit(0)
    sends = all_sends.join(held, F.col("msg") == F.col("held"), "left_anti").select(
        F.col("dest").alias("sdest"), F.col("t").alias("st")
    )
    sent = (
        s.join(
            sends,
            (F.col("sdest") == F.col("s.dest"))
            & (F.col("st") >= F.col("s.sub_start"))
            & (F.col("st") <= F.col("s.end")),
        )
        .groupBy("s.session", "s.sub", "s.start")
        .agg(F.count(F.lit(1)).alias("sent_all"), F.sum((F.col("st") >= F.col("s.start")).cast("int")).alias("sent"))
    )
    drops = tb.events.filter(F.col("event") == "discard").select(
        F.col("session").alias("ds"), F.col("sub").alias("dsub"), F.col("t").alias("dt")
    )
    discarded = (
        s.join(
            drops,
            (F.col("ds") == F.col("s.session")) & (F.col("dsub") == F.col("s.sub")) & (F.col("dt") <= F.col("s.end")),
        )
        .groupBy("s.session", "s.sub", "s.start")
        .agg(F.count(F.lit(1)).alias("discarded"))
    )
    outs = tb.swaps.filter(F.col("event") == "swap_out").select(
        F.col("dest").alias("wdest"), F.col("sub").alias("wsub"), F.col("t").alias("wt"), F.col("count").alias("wc")
    )
    spooled = (
        s.join(
            outs,
            (F.col("wdest") == F.col("s.dest"))
            & (F.col("wsub") == F.col("s.sub"))
            & (F.col("wt") >= F.col("s.start"))
            & (F.col("wt") <= F.col("s.end")),
        )
        .groupBy("s.session", "s.sub", "s.start")
        .agg(F.sum("wc").alias("spooled"))
    )
    r = tb.consumer_rates.filter(F.col("source") == "broker").alias("r")
    mine = (
        (F.col("r.consumer") == F.col("s.session"))
        & (F.col("r.sub") == F.col("s.sub"))
        & (F.col("r.b") * p.bucket < F.col("s.end"))
    )
    during = F.col("r.b") >= F.floor(F.col("s.start") / p.bucket)
    got = (
        s.join(r, mine)
        .groupBy("s.session", "s.sub", "s.start")
        .agg(
            F.sum("r.received").alias("delivered"),
            F.sum(F.when(during, F.col("r.received")).otherwise(0)).alias("received"),
            F.sum(F.when(during, F.col("r.acked")).otherwise(0)).alias("acked"),
        )
    )
    counts = ["sent_all", "sent", "discarded", "spooled", "delivered", "received", "acked"]
    out = (
        slow.join(blocked, keys)
        .join(sent, keys, "left")
        .join(discarded, keys, "left")
        .join(spooled, keys, "left")
        .join(got, keys, "left")
        .fillna(0, subset=counts)
        .withColumn(
            "backlog",
            F.when(~F.col("dest").startswith("/queue/"), F.col("sent_all") - F.col("delivered") - F.col("discarded")),
        )
        .withColumn("blocked_seconds", F.round("blocked_seconds", 3))
    )
    to_end = F.when(F.col("recovered") | (F.col("end") < F.lit(span)), F.lit("")).otherwise(F.lit(" (to the end)"))
    return _finding(
        out,
        "slow_consumer",
        [
            "session",
            "sub",
            "dest",
            _duration(),
            to_end,
            "blocked_seconds",
            "received",
            "acked",
            "sent",
            F.coalesce("backlog", F.lit(0)),
            "spooled",
        ],
        [
            "pending_max",
            "prefetch",
            "received",
            "acked",
            "sent",
            "backlog",
            "spooled",
            "discarded",
            "blocked_seconds",
            "recovered",
        ],
        dest=F.col("dest"),
        session=F.col("session"),
        sub=F.col("sub"),
    )


def stalled_socket(tb: Tables, p: Params) -> DataFrame:
    ev = tb.events
    # A stall the broker ends itself is the cure at work, not the pathology: a write
    # timeout, a disconnect for missed heart-beats, or a connection whose heart-beats it watches.
    beats = F.exists(F.split(F.coalesce("heart_beat", F.lit("")), ","), lambda x: ~F.trim(x).isin("", "0"))
    cured = (
        ev.filter(
            (F.col("event") == "write_timeout")
            | ((F.col("event") == "disconnect") & F.col("reason").isin(*CURED_BY))
            | ((F.col("event") == "connect") & beats)
        )
        .select("session")
        .distinct()
    )
    # The seed's own case: the connection samples show bytes queued for a socket that has
    # not drained for at least min_window seconds.
    stuck = (
        ev.filter(
            (F.col("event") == "connection") & (F.col("idle_write") >= p.min_window) & (F.col("pending_bytes") > 0)
        )
        .join(cured, "session", "left_anti")
        .groupBy("session")
        .agg(
            F.max("client_id").alias("client_id"),
            F.max("idle_write").alias("waited"),
            F.max("pending_bytes").alias("pending_bytes"),
            F.max("t").alias("end"),
            F.min(F.col("t") - F.col("idle_write")).alias("start"),
        )
    )
    refused = ev.filter((F.col("event") == "error") & (F.col("code") == "client_id_in_use")).select(
        F.col("client_id").alias("rid"), F.col("t").alias("rt")
    )
    keys = ["session", "start"]
    reconnects = (
        stuck.join(
            refused,
            (F.col("rid") == F.col("client_id"))
            & (F.col("rt") >= F.col("start"))
            & (F.col("rt") <= F.col("end") + p.reconnect_window),
        )
        .groupBy(*keys)
        .agg(F.count(F.lit(1)).alias("refused_reconnects"))
    )
    b_in = (F.col("r.b") >= F.floor(F.col("s.start") / p.bucket)) & (F.col("r.b") * p.bucket <= F.col("s.end"))
    traffic = (
        stuck.alias("s")
        .join(tb.consumer_rates.alias("r"), (F.col("r.consumer") == F.col("s.session")) & b_in)
        .groupBy("s.session", "s.start")
        .agg(F.sum("r.received").alias("dispatched"), F.sum("r.acked").alias("acked"))
    )
    out = (
        stuck.join(reconnects, keys, "left")
        .join(traffic, keys, "left")
        .fillna(0, subset=["refused_reconnects", "dispatched", "acked"])
    )
    return _finding(
        out,
        "stalled_socket",
        [
            "session",
            F.coalesce("client_id", F.lit("-")),
            "waited",
            F.coalesce("pending_bytes", F.lit(0)),
            "dispatched",
            "acked",
            "refused_reconnects",
        ],
        [
            "client_id",
            "waited",
            "pending_bytes",
            "dispatched",
            "acked",
            "refused_reconnects",
        ],
        session=F.col("session"),
    )


def journal_full_few_live(tb: Tables, p: Params) -> DataFrame:
    full = tb.events.filter(F.col("event") == "journal_full").withColumn(
        "pinned", F.size(F.map_filter("file_live", lambda k, v: v > 0))
    )
    eps = (
        _episodes(full, ["store"], p.episode_gap)
        .groupBy("store", "episode")
        .agg(
            F.min("t").alias("start"),
            F.max("t").alias("last"),
            F.count(F.lit(1)).alias("refused"),
            F.first("layout").alias("layout"),
            F.first("dest", ignorenulls=True).alias("dest"),
            F.max_by(
                F.struct("live", "files", "pinned", "live_bytes", "capacity", "file_live"), F.struct("t", "seq")
            ).alias("x"),
        )
        .select("*", "x.*")
        .drop("x")
        .withColumn("end", F.col("last") + p.bucket)
    )
    few = F.when(
        F.col("live_bytes").isNotNull() & (F.col("capacity") > 0),
        F.col("live_bytes") <= F.col("capacity") * p.few_live_fraction,
    ).otherwise(F.col("live") <= F.col("files") * p.few_live_per_file)
    # each journal's live enqueues in its last traced state (journal_state as the broker stopped)
    last = (
        tb.events.filter(
            F.col("event").isin("journal_roll", "journal_full", "journal_state") & F.col("live").isNotNull()
        )
        .groupBy("store")
        .agg(F.max_by("live", F.struct("t", "seq")).alias("live_at_end"))
    )
    out = eps.filter(few).join(last, "store", "left")
    return _finding(
        out,
        "journal_full_few_live",
        [
            "store",
            "layout",
            "refused",
            "live",
            "pinned",
            "files",
            F.coalesce(F.col("live_at_end").cast("string"), F.lit("?")),
        ],
        [
            "refused",
            "live",
            "live_bytes",
            "capacity",
            "files",
            "pinned",
            "file_live",
            "live_at_end",
        ],
        dest=F.coalesce("dest", "store"),
    )


def blocked_holding_unacked(tb: Tables, p: Params) -> DataFrame:
    out = tb.blocked.filter(_long_enough(p)).join(_holding_blocks(tb), ["session", "dest", "start"])
    return _finding(
        out,
        "blocked_holding_unacked",
        [
            "session",
            "usage",
            "dest",
            _duration(),
            "held_min",
            "held_max",
            _never_unblocked("open"),
        ],
        [
            "usage",
            "held_min",
            "held_max",
            "samples",
            F.col("open").alias("never_unblocked"),
            F.col("start").alias("blocked_start"),
            F.col("end").alias("blocked_end"),
        ],
        dest=F.col("dest"),
        session=F.col("session"),
    )


def redelivery_loop(tb: Tables, p: Params) -> DataFrame:
    # each redelivery with how many of its message's redeliveries fall in the window ending at it
    # (a range frame takes whole numbers: the times in microseconds)
    w = Window.partitionBy("dest", "msg").orderBy("us").rangeBetween(-round(p.poison_window * 1e6), 0)
    redeliveries = (
        tb.events.filter((F.col("event") == "redeliver") & F.col("reason").isin(*REFUSED))
        .withColumn("us", F.round(F.col("t") * 1e6).cast("long"))
        .select("dest", "msg", "t", F.count(F.lit(1)).over(w).alias("n"), F.min("t").over(w).alias("first"))
    )
    out = (
        redeliveries.groupBy("dest", "msg")
        .agg(
            F.count(F.lit(1)).alias("total"),
            F.max_by(F.struct("n", "first", "t"), F.struct("n", -F.col("t"))).alias("x"),
        )
        .select(
            "dest",
            "msg",
            "total",
            F.col("x.n").alias("redeliveries"),
            F.col("x.first").alias("first"),
            F.col("x.t").alias("last"),
        )
        .filter(F.col("redeliveries") > p.poison_deliveries)
        .withColumn("start", F.col("first"))
        .withColumn("end", F.col("last") + p.bucket)
    )
    return _finding(
        out,
        "redelivery_loop",
        [
            "msg",
            "dest",
            "redeliveries",
            F.col("last") - F.col("first"),
            "total",
        ],
        ["redeliveries", "total", "first", "last"],
        dest=F.col("dest"),
    )


def store_held_by_few_live(tb: Tables, p: Params) -> DataFrame:
    blocks = tb.blocked.filter((F.col("usage") == "store") & (_long_enough(p)))
    states = tb.events.filter(
        F.col("event").isin("journal_roll", "journal_full", "journal_state")
        & F.col("live").isNotNull()
        & (F.col("layout") == "growing")  # a ring's files are there from the start (journal_full_few_live)
    ).select(
        "store",
        F.col("t").alias("jt"),
        F.col("seq").alias("jseq"),
        F.col("layout"),
        F.col("files"),
        F.col("live"),
        F.size(F.map_filter("file_live", lambda k, v: v > 0)).alias("pinned"),
    )
    # each journal's state at the block's end
    out = (
        blocks.join(states, F.col("jt") <= F.col("end"))
        .groupBy("session", "dest", "start", "end", "open", "store")
        .agg(F.max_by(F.struct("layout", "files", "live", "pinned"), F.struct("jt", "jseq")).alias("x"))
        .select("*", "x.*")
        .drop("x")
        .filter(
            (F.col("files") > 0)
            & (F.col("live") <= F.col("files") * p.few_live_per_file)
            & (F.col("files") - F.col("pinned") > 0)
        )
    )
    return _finding(
        out,
        "store_held_by_few_live",
        [
            "session",
            "dest",
            _duration(),
            "store",
            "files",
            "live",
            F.col("files") - F.col("pinned"),
            _never_unblocked("open"),
        ],
        [
            "store",
            "layout",
            "files",
            "live",
            "pinned",
            F.col("open").alias("never_unblocked"),
            F.col("start").alias("blocked_start"),
            F.col("end").alias("blocked_end"),
        ],
        dest=F.col("dest"),
        session=F.col("session"),
    )


#: Each detector by its name (the functions are named after them).
DETECTORS = {name: globals()[name] for name in NAMES}


def find_all(tb: Tables, p: Params) -> DataFrame:
    """Every detector's findings, one DataFrame ordered by window start."""
    parts = [detect(tb, p) for detect in DETECTORS.values()]
    return reduce(DataFrame.unionByName, parts).orderBy("start", "detector", "session", "sub")
