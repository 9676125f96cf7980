"""The pathology signatures over a window of samples: samples in, findings out.

Theory of operation:

- each signature asks one question of every pair of consecutive samples
  (``prev``, ``cur``) for every subject it watches (a queue, a topic, a
  consumer, a connection): the moment's predicate, the same one the trace
  analysis asks of a bucket where they mean the same (``clients.signatures``);
- a subject for which the predicate holds over consecutive samples spanning
  at least ``Params.min_window`` seconds (the analysis's shortest window) is
  a finding; its evidence is the series that matched, with times;
- a figure the broker does not tell (``None``) never matches: a signature that
  needs it is silent on that broker, and the report says which were not
  evaluated (``unanswered``).

Each finding carries the detector's name (the analysis's name where it is
the same pathology), the public write-up (``clients.sources``), the fix in the
broker's own syntax (``fixes``) and the lab that reproduces it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from ...signatures import full, idle_while_blocked, prefetch_full, starving
from ...spark.findings import Params
from .fixes import Fix, fix_for
from .sample import SHARED_DLQ, Consumer, Destination, Sample

__all__ = ["LiveFinding", "SIGNATURES", "evaluate", "unanswered"]

#: One moment's evidence for a subject: the figures that matched, or None when it did not match.
Moment = dict[str, Any] | None
#: A window's evidence: (t, the figures that matched) per sample, oldest first.
Series = list[tuple[float, dict[str, Any]]]


@dataclass(frozen=True)
class LiveFinding:
    """One pathology found in a window of samples."""

    pathology: str
    subject: str
    headline: str
    start: float
    end: float
    series: tuple[tuple[float, dict[str, Any]], ...]  # (t, the figures that matched) per sample
    fix: Fix
    culprits: tuple[str, ...] = ()  # what holds the resource or suffers it: destinations, connections
    culprit_role: str = "held by"  # how the report names them

    def to_json(self) -> dict[str, Any]:
        return {
            "pathology": self.pathology,
            "subject": self.subject,
            "headline": self.headline,
            "start": round(self.start, 3),
            "end": round(self.end, 3),
            "culprits": list(self.culprits),
            "culprit_role": self.culprit_role,
            "series": [{"t": round(t, 3), **values} for t, values in self.series],
            "source": self.fix.source,
            "lab": self.fix.lab,
            "fix": self.fix.text,
        }


@dataclass(frozen=True)
class _Signature:
    name: str
    subjects: Callable[[Sample], Iterable[str]]
    moment: Callable[[Sample, Sample, str, Params], Moment]
    headline: Callable[[str, Series, float], str]
    needs: Callable[[Sample], bool] = field(default=lambda s: True)  # the broker tells what it needs
    culprits: Callable[[Sample, str], tuple[str, ...]] = field(default=lambda s, subject: ())
    culprit_role: str = "held by"


# ---------------------------------------------------------------- helpers
def _queues(s: Sample) -> Iterator[str]:
    return (d.name for d in s.destinations if d.kind == "queue")


def _topics(s: Sample) -> Iterator[str]:
    return (d.name for d in s.destinations if d.kind == "topic")


def _pair(prev: Sample, cur: Sample, name: str) -> tuple[Destination, Destination] | None:
    a, b = prev.destination(name), cur.destination(name)
    return (a, b) if a is not None and b is not None else None


def _producers_blocked(usage_pct: int | None) -> bool:
    """Producer flow control holds the producers: a usage they need is full (the
    broker blocks every SEND that needs it; a count of the ones blocked at one
    instant flickers as each waits for its receipt)."""
    return usage_pct is not None and bool(full(usage_pct))


def _fullest(*pcts: int | None) -> int | None:
    known = [p for p in pcts if p is not None]
    return max(known) if known else None


# ---------------------------------------------------------------- what a headline reads
def _last(series: Series) -> dict[str, Any]:
    """The figures of the window's last sample."""
    return series[-1][1]


def _total(series: Series, key: str) -> int:
    """``key`` summed over the window (a count per pair of samples)."""
    return sum(values[key] for _, values in series)


def _held_at(series: Series) -> int | None:
    """The fuller of broker and destination memory at the window's end: what blocks the producers."""
    last = _last(series)
    return _fullest(last["memory_pct"], last["destination_memory_pct"])


# ---------------------------------------------------------------- the signatures
def _starved(prev: Sample, cur: Sample, name: str, p: Params) -> Moment:
    pair = _pair(prev, cur, name)
    if pair is None or cur.memory_pct is None:
        return None
    then, now = pair
    if not now.consumers or now.memory_pct is None:
        return None
    hwm = now.cursor_hwm if now.cursor_hwm is not None else p.hwm
    received = (
        now.dispatched - then.dispatched
        if now.dispatched is not None and then.dispatched is not None
        else now.dequeued - then.dequeued
    )
    if not starving(received, now.size, cur.memory_pct, now.memory_pct, hwm):
        return None
    return {
        "received": received,
        "backlog": now.size,
        "broker_memory_pct": cur.memory_pct,
        "destination_memory_pct": now.memory_pct,
        "cursor_hwm": hwm,
    }


def _memory_holders(s: Sample, name: str) -> tuple[str, ...]:
    holders = sorted(
        (d for d in s.destinations if d.name != name and not d.consumers and (d.memory_usage or 0) > 0),
        key=lambda d: (-(d.memory_usage or 0), d.name),
    )
    return tuple(d.name for d in holders)


def _blocked_idle(prev: Sample, cur: Sample, name: str, p: Params) -> Moment:
    """The temp store full, producers blocked, and the consumers with nothing to do: nothing
    is left to spool, so the temp store never drops under its limit."""
    pair = _pair(prev, cur, name)
    if pair is None:
        return None
    then, now = pair
    usage = cur.temp_pct
    if not now.consumers or not _producers_blocked(usage):
        return None
    handed = now.dequeued - then.dequeued
    waiting = now.size - now.inflight
    if not idle_while_blocked(handed, waiting) or usage is None or not full(usage):
        return None
    return {
        "temp_pct": cur.temp_pct,
        "memory_pct": cur.memory_pct,
        "blocked_producers": cur.blocked_producers,
        "consumers": now.consumers,
        "dequeued": handed,
        "waiting": waiting,
    }


def _topic_held(prev: Sample, cur: Sample, name: str, moving: bool) -> Moment:
    pair = _pair(prev, cur, name)
    if pair is None:
        return None
    then, now = pair
    usage = _fullest(cur.memory_pct, now.memory_pct)
    if now.consumers < 1 or not _producers_blocked(usage):
        return None
    dequeued = now.dequeued - then.dequeued
    if moving != (dequeued > 0):
        return None
    if not moving and not (now.inflight or now.pending):
        return None  # nothing waits on a subscriber: not a stalled one
    return {
        "memory_pct": cur.memory_pct,
        "destination_memory_pct": now.memory_pct,
        "consumers": now.consumers,
        "dequeued": dequeued,
        "inflight": now.inflight,
        "pending": now.pending,
    }


def _slow_topic(prev: Sample, cur: Sample, name: str, p: Params) -> Moment:
    return _topic_held(prev, cur, name, moving=True)


def _stalled_topic(prev: Sample, cur: Sample, name: str, p: Params) -> Moment:
    return _topic_held(prev, cur, name, moving=False)


def _stalled_connection(prev: Sample, cur: Sample, name: str, p: Params) -> Moment:
    for c in cur.connections:
        if c.name == name and c.stalled:
            return {"stalled": True, "user": c.user}
    return None


def _consumer(s: Sample, name: str) -> Consumer | None:
    for c in s.consumers:
        if c.name == name:
            return c
    return None


def _prefetch_full(prev: Sample, cur: Sample, name: str, p: Params) -> Moment:
    then, now = _consumer(prev, name), _consumer(cur, name)
    if then is None or now is None or not prefetch_full(now.outstanding, now.prefetch):
        return None
    if now.acked is None or then.acked is None:
        return None
    acked = now.acked - then.acked
    # Slow: at its pace, its prefetch takes longer than the window to work through (messages
    # wait there that another consumer could take).
    if acked * p.min_window > now.prefetch * max(cur.t - prev.t, 1e-3):
        return None
    return {"destination": now.destination, "prefetch": now.prefetch, "unacked": now.outstanding, "acked": acked}


def _ring_refusing(prev: Sample, cur: Sample, name: str, p: Params) -> Moment:
    """A queue's own ring refuses enqueues (the enqueue threshold) while it holds a handful
    of messages: one left behind in each file is enough."""
    d = cur.destination(name)
    if d is None or not d.journal_full or d.journal_files is None:
        return None
    if d.size > p.few_live_per_file * d.journal_files:
        return None
    return {"journal_full": True, "live_messages": d.size, "journal_files": d.journal_files}


#: The journal files assumed where a broker does not count them (ActiveMQ's statistics).
UNTOLD_FILES = 10


def _store_held(prev: Sample, cur: Sample, name: str, p: Params) -> Moment:
    """The store full, producers held by it, while the broker holds a handful of live
    messages: journal files kept by few messages (and, where the broker counts its files,
    files with none live, kept by the acks in them). Not a ring store: its rings are
    reserved whole from the start (``journal_full_few_live``, the diagnosis's rings)."""
    if not cur.store_full and not _producers_blocked(cur.store_pct):
        return None
    if cur.blocked_producers == 0 or (cur.store_rings or 0) > 0:
        return None
    live = sum(d.size for d in cur.destinations)
    files = cur.store_files if cur.store_files is not None else UNTOLD_FILES
    if live > p.few_live_per_file * files:
        return None
    with_live = cur.store_files_with_live
    if with_live is not None and files - with_live <= 0:
        return None  # every file holds live messages: a store too small, not one kept alive
    return {
        "store_pct": cur.store_pct,
        "blocked_producers": cur.blocked_producers,
        "live_messages": live,
        "journal_files": cur.store_files,
        "files_with_live": with_live,
    }


def _files_kept(last: dict[str, Any]) -> str:
    """What the headline says of the journal files: how many, and how many hold nothing live,
    as far as the broker counts them (KahaDB's MBean names its files, not what is in them)."""
    files, with_live = last["journal_files"], last["files_with_live"]
    if files is None:
        return ""
    if with_live is None:
        return f": {files} journal files kept"
    return f": {files} journal files kept, {files - with_live} of them with no live message"


def _store_keepers(s: Sample, subject: str) -> tuple[str, ...]:
    """The destinations whose messages nobody takes: what keeps the journal files."""
    return tuple(d.name for d in s.destinations if d.size > 0 and not d.consumers)


def _poison(prev: Sample, cur: Sample, name: str, p: Params) -> Moment:
    """Messages come back faster than a loop's rule allows: at this pace each message on the
    queue is redelivered more than ``p.poison_deliveries`` times in ``p.poison_window`` seconds
    (the analysis's rule for one message, over the queue). Good messages acknowledged around
    it do not clear it: a poison message at the head loops while the rest flow."""
    pair = _pair(prev, cur, name)
    if pair is None:
        return None
    then, now = pair
    if now.redelivered is None or then.redelivered is None or now.size <= 0:
        return None
    again = now.redelivered - then.redelivered
    seconds = max(cur.t - prev.t, 1e-3)
    if again * p.poison_window <= p.poison_deliveries * now.size * seconds:
        return None
    return {"redelivered": again, "acknowledged": now.dequeued - then.dequeued, "size": now.size}


def _dead_letter_queue(name: str) -> bool:
    return name.rsplit("/", 1)[-1].startswith(SHARED_DLQ)


def _shared_dlq(s: Sample) -> Iterator[str]:
    return (d.name for d in s.destinations if d.kind == "queue" and d.name.rsplit("/", 1)[-1] == SHARED_DLQ)


def _expired_elsewhere(s: Sample) -> int | None:
    """The messages that expired on the destinations that are no dead letter queue (None: the
    broker does not count them)."""
    counts = [d.expired for d in s.destinations if d.expired is not None and not _dead_letter_queue(d.name)]
    return sum(counts) if counts else None


def _dead_letters_mixed(prev: Sample, cur: Sample, name: str, p: Params) -> Moment:
    """The shared dead letter queue holds messages that failed delivery among messages that
    expired on other queues:

    - expired messages are dead-lettered there (its enqueues at least the expiries: ActiveMQ's
      ``processExpired``, true by default);
    - and more came than expired: the rest failed delivery (a poison message, a redelivery
      limit reached), hidden among the expired ones.

    Counted, not read: a shared queue that takes no expired message but more failures than
    there were expiries elsewhere reads the same."""
    d = cur.destination(name)
    expired = _expired_elsewhere(cur)
    if d is None or d.size <= 0 or not expired:
        return None
    failed = d.enqueued - expired
    if failed <= 0:
        return None
    return {"dead_letters": d.size, "expired_elsewhere": expired, "failed_delivery": failed}


def _expired_from(s: Sample, subject: str) -> tuple[str, ...]:
    """The destinations whose expired messages went to the shared dead letter queue."""
    return tuple(d.name for d in s.destinations if (d.expired or 0) > 0 and not _dead_letter_queue(d.name))


def _alarm(prev: Sample, cur: Sample, name: str, p: Params) -> Moment:
    if not (cur.memory_alarm or cur.disk_alarm):
        return None
    blocked = [c.name for c in cur.connections if c.blocked]
    return {
        "memory_alarm": cur.memory_alarm,
        "disk_alarm": cur.disk_alarm,
        "memory_pct": cur.memory_pct,
        "blocked_connections": len(blocked),
    }


def _blocked_consuming(prev: Sample, cur: Sample, name: str, p: Params) -> Moment:
    """A connection blocked by flow control while it holds unacknowledged messages (or, where
    the broker does not count them, while it consumes): its ACKs wait behind its held SEND."""
    for c in cur.connections:
        holding = c.unacked > 0 if c.unacked is not None else c.consumes
        if c.name == name and c.blocked and c.publishes and holding:
            return {"blocked": True, "unacked": c.unacked, "user": c.user}
    return None


def _blocked_connections(s: Sample, subject: str) -> tuple[str, ...]:
    return tuple(c.name for c in s.connections if c.blocked)


SIGNATURES: tuple[_Signature, ...] = (
    _Signature(
        "starved_consumer",
        _queues,
        _starved,
        lambda q, s, d: (
            f"the consumers of {q} got nothing for {d:.0f} s with {_last(s)['backlog']} messages waiting: "
            f"broker memory {_last(s)['broker_memory_pct']}% (cursor mark {_last(s)['cursor_hwm']}%), "
            f"the queue's own {_last(s)['destination_memory_pct']}%"
        ),
        culprits=_memory_holders,
    ),
    _Signature(
        "blocked_producer_idle_consumers",
        lambda s: (d.name for d in s.destinations),
        _blocked_idle,
        lambda dest, s, d: (
            f"producers blocked by flow control for {d:.0f} s while the {_last(s)['consumers']} consumer(s) "
            f"of {dest} had nothing to do: temp store {_last(s)['temp_pct']}%, memory {_last(s)['memory_pct']}%"
        ),
    ),
    _Signature(
        "slow_consumer",
        _topics,
        _slow_topic,
        lambda t, s, d: (
            f"a slow subscriber held {t} back for {d:.0f} s: producers blocked at memory {_held_at(s)}% "
            f"while only {_total(s, 'dequeued')} messages were delivered"
        ),
    ),
    _Signature(
        "stalled_socket",
        _topics,
        _stalled_topic,
        lambda t, s, d: (
            f"a subscriber of {t} took nothing for {d:.0f} s: producers blocked at memory {_held_at(s)}%, "
            f"nothing delivered, {_last(s)['inflight']} in flight"
        ),
    ),
    _Signature(
        "stalled_socket",
        lambda s: (c.name for c in s.connections),
        _stalled_connection,
        lambda c, s, d: f"connection {c} took nothing from its socket for {d:.0f} s while the broker had bytes for it",
    ),
    _Signature(
        "prefetch_full_slow_acks",
        lambda s: (c.name for c in s.consumers),
        _prefetch_full,
        lambda c, s, d: (
            f"consumer {c} on {_last(s)['destination']} held its whole prefetch ({_last(s)['prefetch']}) "
            f"unacknowledged for {d:.0f} s, acknowledging {_total(s, 'acked')} meanwhile"
        ),
    ),
    _Signature(
        "journal_full_few_live",
        _queues,
        _ring_refusing,
        lambda q, s, d: (
            f"the journal of {q} has refused enqueues for {d:.0f} s (Enqueue capacity threshold exceeded) "
            f"while the queue holds only {s[-1][1]['live_messages']} message(s) in its "
            f"{s[-1][1]['journal_files']} files"
        ),
    ),
    _Signature(
        "store_held_by_few_live",
        lambda s: ("store",),
        _store_held,
        lambda _, s, d: (
            f"producers have been held by a full store for {d:.0f} s (store {s[-1][1]['store_pct']}%) while "
            f"the broker holds only {s[-1][1]['live_messages']} live message(s)" + _files_kept(_last(s))
        ),
        culprits=_store_keepers,
        culprit_role="kept by",
    ),
    _Signature(
        "redelivery_loop",
        _queues,
        _poison,
        lambda q, s, d: (
            f"{q}: redelivered {_total(s, 'redelivered')} times in {d:.0f} s with "
            f"{_last(s)['size']} message(s) on it: a message its consumers cannot process, in a loop"
        ),
    ),
    _Signature(
        "dead_letters_among_expired",
        _shared_dlq,
        _dead_letters_mixed,
        lambda q, s, d: (
            f"{q} has held {_last(s)['failed_delivery']} message(s) that failed delivery among "
            f"{_last(s)['expired_elsewhere']} that expired on other queues for {d:.0f} s: one dead letter queue "
            "for the whole broker, where a failure is hidden among stale messages"
        ),
        culprits=_expired_from,
        culprit_role="expired from",
    ),
    _Signature(
        "resource_alarm",
        lambda s: ("node",),
        _alarm,
        lambda _, s, d: (
            "the "
            + " and ".join(k for k in ("memory", "disk") if _last(s)[f"{k}_alarm"])
            + f" alarm has blocked publishers for {d:.0f} s"
            + f" ({_last(s)['blocked_connections']} connection(s) blocked)"
        ),
        culprits=_blocked_connections,
        culprit_role="blocked connections",
    ),
    _Signature(
        "blocked_holding_unacked",
        lambda s: (c.name for c in s.connections),
        _blocked_consuming,
        lambda c, s, d: (
            f"connection {c} has been blocked by flow control for {d:.0f} s while it consumes "
            f"(unacknowledged: {_last(s)['unacked']}): its acknowledgements wait behind its blocked publishes"
        ),
    ),
)


def unanswered(samples: list[Sample]) -> list[str]:
    """What the broker's statistics could not tell, once each (the readers' notes)."""
    seen: dict[str, None] = {}
    for s in samples:
        for note in s.notes:
            seen.setdefault(note)
    return list(seen)


def evaluate(samples: list[Sample], params: Params | None = None) -> list[LiveFinding]:
    """Every signature's findings over ``samples`` (in time order), by start time."""
    p = params if params is not None else Params()
    out: list[LiveFinding] = []
    for sig in SIGNATURES:
        for subject in dict.fromkeys(x for s in samples for x in sig.subjects(s)):
            out += _runs(sig, subject, samples, p)
    return sorted(out, key=lambda f: (f.start, f.pathology, f.subject))


def _runs(sig: _Signature, subject: str, samples: list[Sample], p: Params) -> list[LiveFinding]:
    """The windows where ``sig`` holds for ``subject`` over at least ``p.min_window`` seconds.

    A moment covers the time from the previous sample to its own (as a bucket of
    the analysis covers its second): a run's window starts at the sample before
    its first moment."""
    found: list[LiveFinding] = []
    run: Series = []
    begun = 0.0
    last: Sample | None = None
    for prev, cur in pairwise(samples):
        moment = sig.moment(prev, cur, subject, p)
        if moment is not None:
            if not run:
                begun = prev.t
            run.append((cur.t, moment))
            last = cur
            continue
        if run and last is not None and run[-1][0] - begun >= p.min_window:
            found.append(_finding(sig, subject, run, begun, last))
        run, last = [], None
    if run and last is not None and run[-1][0] - begun >= p.min_window:
        found.append(_finding(sig, subject, run, begun, last))
    return found


def _finding(
    sig: _Signature, subject: str, run: list[tuple[float, dict[str, Any]]], begun: float, last: Sample
) -> LiveFinding:
    culprits = sig.culprits(last, subject)
    return LiveFinding(
        pathology=sig.name,
        subject=subject,
        headline=sig.headline(subject, run, run[-1][0] - begun),
        start=begun,
        end=run[-1][0],
        series=tuple(run),
        fix=fix_for(sig.name, last.broker, subject, culprits, last),
        culprits=culprits,
        culprit_role=sig.culprit_role,
    )
