"""What both analysis engines share: parameters, the findings' shape and words.

The trace analysis runs on Spark (``clients.spark.detectors``, for traces of
millions of events or a cluster) or in this process (``clients.spark.inprocess``,
for traces small enough that a JVM is pure overhead, such as a lab run's).
Both implement the same detectors and are tested to give the same findings;
what they must agree on lives here, free of PySpark: the thresholds
(``Params``), a finding's columns, the detectors' names and what each means,
and the summary lines' format strings (``printf`` style, which Spark's
``format_string`` and Python's ``%`` read alike; ``java_format`` rounds halves
as Java does).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

__all__ = [
    "Params",
    "FINDING_COLUMNS",
    "DETECTORS",
    "WHAT",
    "SUMMARY",
    "REMOVALS",
    "CURED_BY",
    "java_format",
    "TraceFormatError",
]


class TraceFormatError(ValueError):
    """The input is not a trace the analysis understands."""


#: Events that take a message out of a queue's backlog.
REMOVALS = ("ack", "expire", "dlq", "discard")
#: Disconnect reasons that mean the broker itself ended a stalled connection.
CURED_BY = ("write_timeout", "heartbeat")

FINDING_COLUMNS = ["detector", "start", "end", "duration", "dest", "session", "sub", "summary", "evidence"]


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
    reconnect_window: float = 60.0  # refused reconnects this soon after a stall
    poison_deliveries: int = 10  # one message redelivered more than this often ...
    poison_window: float = 60.0  # ... within this many seconds is a poison message in a loop


#: Every detector, in report order, with what its finding means.
WHAT: dict[str, str] = {
    "starved_consumer": "a queue consumer got nothing while its queue had a backlog and broker "
    "memory sat at or over the cursor high-water mark (cure: a per-destination memory limit "
    "on the queues that hold the memory)",
    "blocked_producer_idle_consumers": "a producer stayed blocked by flow control while the "
    "destination's consumers had nothing left to do (a temp limit below the temp store's file "
    "size never drops under 100%)",
    "swap_storm": "file cursors swapped their pending messages to the temp store again and again",
    "slow_consumer": "a subscription the broker marked slow held the producer back: the "
    "producer was blocked by flow control while it was slow (cures: spool, discard, abort)",
    "stalled_socket": "a connection's socket took nothing for a window while the broker had "
    "bytes queued for it, and no write timeout ended it (with the reconnects refused meanwhile)",
    "journal_full_few_live": "the journal refused enqueues as full while holding few live "
    "messages, each pinning a file",
    "blocked_holding_unacked": "a connection stayed blocked by producer flow control while it held "
    "unacknowledged messages: its ACKs wait behind the held SEND, and only they would free the "
    "memory (cures: separate connections to produce and consume, send_fail_if_no_space, a "
    "per-destination limit)",
    "redelivery_loop": "one message was redelivered again and again within a short time: a poison "
    "message no consumer can process, in a loop (cure: a redelivery limit with a delay and back-off)",
    "store_held_by_few_live": "a producer stayed blocked on a full store while the journal kept "
    "its files for a few live messages: one old message or an offline durable subscriber pins the "
    "files written since (cures: drain what pins them, an offline durable subscriber timeout)",
}
DETECTORS = tuple(WHAT)

#: The summary line of each detector's finding.
SUMMARY: dict[str, str] = {
    "starved_consumer": "consumer %s/%s got nothing from %s for %.0f s: backlog %d-%d, broker "
    "memory %d-%d%% (high-water mark %d%%), the queue's own memory %s%%",
    "blocked_producer_idle_consumers": "producer %s blocked on %s usage (%d%%) sending to %s "
    "while its %d consumer(s) had nothing to do for %.0f s; temp %d-%d%%%s",
    "swap_storm": "%d swaps to the temp store within %.0f s (%d messages from %d "
    "subscription(s) on %s), temp usage up to %s%%",
    "slow_consumer": "the broker marked %s/%s on %s slow for %.1f s%s, and the producer was "
    "blocked %.1f s of it: %d received and %d acked while %d were sent; backlog %d at the end "
    "(%d spooled to the temp store)",
    "stalled_socket": "writes to %s (client-id %s) were stuck for %.1f s with %d bytes queued; "
    "%d messages dispatched, %d acked meanwhile; %d reconnect(s) refused",
    "journal_full_few_live": "journal %s (%s) refused %d enqueue(s) as full while it held only "
    "%d live message(s), pinning %d of %d files; %s live at its last state",
    "blocked_holding_unacked": "%s blocked on %s usage sending to %s for %.0f s while it held %d-%d "
    "unacknowledged message(s)%s",
    "redelivery_loop": "message %s on %s redelivered %d times in %.1f s (%d redeliveries in all)",
    "store_held_by_few_live": "%s blocked on store usage sending to %s for %.0f s while journal %s kept "
    "%d file(s) for %d live message(s), %d of the files with none%s",
}

_FLOAT = re.compile(r"%\.(\d+)f")


def java_format(fmt: str, *args: Any) -> str:
    """``fmt % args`` as Java's ``String.format`` gives it (what Spark's ``format_string``
    calls): ``%.Nf`` rounds halves up from the shortest decimal form, and None is "null"."""
    places = [int(m.group(1)) for m in _FLOAT.finditer(fmt)]
    specs = re.findall(r"%[.\d]*[sdf%]", fmt)
    out: list[Any] = []
    i = iter(places)
    for spec, value in zip([s for s in specs if s != "%%"], args, strict=True):
        if spec.endswith("f"):
            q = Decimal(1).scaleb(-next(i))
            out.append(Decimal(repr(float(value))).quantize(q, rounding=ROUND_HALF_UP))
        elif spec == "%s" and value is None:
            out.append("null")
        else:
            out.append(value)
    return fmt % tuple(out)
