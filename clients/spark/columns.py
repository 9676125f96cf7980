"""The analysis tables' names and columns, the same for both engines.

The Spark engine (``clients.spark.tables``) builds the tables as DataFrames, the
in-process engine (``clients.spark.inprocess_tables``) as lists of dicts; both
hold them in a ``TableSet`` and take their column lists from here, so the CSV
files, the plots' series and the detectors see the same tables and columns
whichever engine ran.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from .findings import REMOVALS

__all__ = ["TableSet", "OUTPUTS", "DEST_EVENTS", "DEST_COUNTS", "USAGE_PCTS", "SWAP_COLUMNS", "JOURNAL_COLUMNS"]

T = TypeVar("T")

#: The tables an analysis writes (``--tables``), in order.
OUTPUTS = (
    "dest_rates",
    "consumer_rates",
    "usage",
    "subscriptions",
    "blocked",
    "swaps",
    "journal",
    "journal_files",
)


@dataclass(kw_only=True)
class TableSet(Generic[T]):
    """One analysis's working set: every table's ``t`` is seconds since ``t0``, its ``b``
    the bucket ``floor(t / bucket)``, of ``buckets`` in all."""

    t0: float
    t1: float
    bucket: float
    buckets: int
    events: T  # the events the detectors read one by one, with t and b
    dest_rates: T  # dest, b, t, DEST_COUNTS, backlog, backlog_start, dest_mem_pct (dense)
    consumer_rates: T  # consumer, sub, dest, source, b, t, received, acked
    usage: T  # b, t, USAGE_PCTS (dense, carried forward)
    subscriptions: T  # session, sub, dest, start, end, prefetch
    blocked: T  # session, dest, usage, pct, start, end, open, duration, msg
    swaps: T  # SWAP_COLUMNS
    journal: T  # JOURNAL_COLUMNS, pinned
    journal_files: T  # store, t, file, live (from each store's latest file_live)

    def outputs(self) -> dict[str, T]:
        """The tables an analysis writes, by name (``OUTPUTS``)."""
        return {name: getattr(self, name) for name in OUTPUTS}


#: The events counted per destination and bucket (``sent``, ``received`` and ``acked``
#: come from a client-side trace and are counted apart, so that a broker trace and a
#: client trace analysed together do not count one message twice).
DEST_EVENTS = (
    "enqueue",
    "send",
    "dispatch",
    "recover",
    "usage",
    "page_in_blocked",
    "swap_out",
    "sent",
    "received",
    "acked",
    *REMOVALS,
)

#: ``dest_rates``' counts per destination and bucket.
DEST_COUNTS = (
    "enqueued",
    "sent",
    "dispatched",
    "acked",
    "removed",
    "recovered",
    "spooled",
    "page_in_blocked",
    "client_sent",
    "client_received",
    "client_acked",
)

#: ``usage``'s broker-wide percentages.
USAGE_PCTS = ("mem_pct", "store_pct", "temp_pct")

#: ``swaps``' columns: one row per ``swap_out`` or ``swap_in`` event.
SWAP_COLUMNS = ("t", "event", "dest", "sub", "session", "count", "bytes", "temp_pct", "mem_pct")

#: ``journal``'s columns taken from each journal event (then ``pinned``, computed).
JOURNAL_COLUMNS = ("t", "event", "store", "layout", "file", "files", "live", "live_bytes", "capacity", "dest")
