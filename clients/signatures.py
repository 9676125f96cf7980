"""The pathology signatures as predicates, one definition each, for every engine.

Both the trace analysis (``clients.spark``: Spark columns, or plain values in
process) and ``doctor --live`` (samples of a running broker's statistics) ask
the same questions of one moment (a bucket of a trace, a sample of a broker).
Each predicate here is written with ``&``, ``|``, comparisons and nothing
else, so it reads the same on plain numbers (``True & False``) and on
PySpark ``Column`` s (a Spark expression): one definition, shared.
"""

from __future__ import annotations

from typing import Any

__all__ = ["REFUSED", "starving", "idle_while_blocked", "full", "prefetch_full"]

#: The reasons of a ``redeliver`` event that a redelivery loop counts: its consumer refused the
#: message (a NACK, or an ACK rolled back). One that comes back because its consumer went away
#: ("closed") is a consumer that reconnects, not a message it cannot process.
REFUSED = ("nack", "rollback")

#: A usage at or above this percent holds producers: the brokers block a SEND at 100%, and a
#: usage pinned at its limit reads 99-100% as each acknowledgement frees room for one message
#: that the next blocked SEND takes at once.
FULL = 99


def starving(received: Any, backlog: Any, broker_mem_pct: Any, dest_mem_pct: Any, hwm: Any) -> Any:
    """The starving-consumer checklist at one moment: the consumer got nothing
    while its queue had a backlog, the broker's memory sat at or over the cursor
    high-water mark and the queue's own memory under it (its cursor cannot page in)."""
    return (received == 0) & (backlog > 0) & (broker_mem_pct >= hwm) & (dest_mem_pct < hwm)


def idle_while_blocked(dispatched: Any, backlog: Any) -> Any:
    """A blocked producer's destination at one moment: its consumers were handed
    nothing and nothing waits for them (they would take more, the producer may not send)."""
    return (dispatched == 0) & (backlog <= 0)


def full(pct: Any) -> Any:
    """A usage that blocks producers (producer flow control)."""
    return pct >= FULL


def prefetch_full(outstanding: Any, prefetch: Any) -> Any:
    """A consumer holding as many unacknowledged messages as its prefetch allows:
    the broker sends it nothing more until it acknowledges."""
    return (prefetch > 0) & (outstanding >= prefetch)
