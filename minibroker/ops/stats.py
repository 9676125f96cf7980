"""Live statistics, answered over STOMP as ActiveMQ's statisticsBrokerPlugin does.

A client sends any message to one of these queues with a ``reply-to`` header:

- ``/queue/ActiveMQ.Statistics.Broker``: one reply, the broker-wide figures;
- ``/queue/ActiveMQ.Statistics.Destination.<name or wildcard>``: one reply per
  matching destination (``>`` for all);
- ``/queue/ActiveMQ.Statistics.Subscription``: one reply per subscription;
- ``/queue/ActiveMQ.Statistics.Connection``: one reply per connection (not in
  ActiveMQ; the outbound buffer of a consumer that stopped reading).

Each reply is a MESSAGE whose body is a JSON object (``content-type:
application/json``) with ActiveMQ's key names (``memoryPercentUsage``,
``enqueueCount`` ...), plus ``statistics-index`` and ``statistics-total``
headers so a client knows when it has them all. Any STOMP client can read
them; ``minibroker stat`` prints them as tables. Every key is listed in
docs/admin.md. Times come from the broker's clock (``timestamp``, and the
rates of ``rates.py``), never from the wall clock directly.

What a request shows depends on who asks (``Scope``): a user with the
``admin`` right on the statistics destination it asked (or anyone, when no
``[[authorization]]`` is configured) sees everything; any other user sees only
the destinations it may read (and its own temporary ones), and only its own
connections and their subscriptions: never another user's queue names,
client-ids or peer addresses.

A tool's own reply queue (the temporary queue a statistics or admin request
names as its ``reply-to``: ``minibroker stat``'s, each console page's) is no
user destination: no reply lists or counts it, so the replies on it are no
traffic (a console polling an idle broker shows 0 in and 0 out). Nor is the asking
connection itself: its answers neither count nor list it (``minibroker stat`` on an
idle broker counts 0 connections), and no reply lists a subscription to a tool's reply queue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from minibroker import wildcards
from minibroker.destinations.queue import Queue
from minibroker.ops.diagnosis import DiagnosedBroker

if TYPE_CHECKING:
    from minibroker.connection.clock import Clock
    from minibroker.connection.security import Principal, Security
    from minibroker.connection.session import Session
    from minibroker.destinations.destination import Destination
    from minibroker.destinations.ports import Connection
    from minibroker.destinations.subscription import Subscription
    from minibroker.destinations.usage import Usage
    from minibroker.ops.rates import RateMeter
    from storage import Journal

__all__ = [
    "STATISTICS_PREFIX",
    "BrokerView",
    "Scope",
    "StatisticsSource",
    "is_statistics_address",
    "statistics_replies",
]

STATISTICS_PREFIX = "/queue/ActiveMQ.Statistics."


class SpilledIndex(Protocol):
    """What the store cursors' lists of store-only messages hold on disk (``StoreHooks``)."""

    def index_spilled_bytes(self) -> int: ...


class BrokerView(DiagnosedBroker, Protocol):
    """The broker as its statistics read it (``broker.Broker`` satisfies it): what
    the diagnosis reads, and its connections, usages, rates and store."""

    @property
    def name(self) -> str: ...

    @property
    def clock(self) -> Clock: ...

    @property
    def security(self) -> Security: ...

    @property
    def sessions(self) -> Mapping[int, Session]: ...

    @property
    def temp_usage(self) -> Usage: ...

    @property
    def rates(self) -> RateMeter: ...

    @property
    def store_state(self) -> str:
        """ok, full or failed."""

    @property
    def store_full(self) -> str | None: ...

    @property
    def store_failure(self) -> str | None: ...

    @property
    def storehooks(self) -> SpilledIndex:
        """The store hooks: what the store cursors' lists hold on disk."""

    def diagnose(self) -> list[dict[str, Any]]:
        """The pathologies recognised now (``diagnosis.py``)."""


def is_statistics_address(address: str) -> bool:
    return address.startswith(STATISTICS_PREFIX)


class Scope:
    """What one requester may see: everything (``everything``), or what it may read."""

    def __init__(
        self,
        broker: BrokerView,
        principal: Principal | None = None,
        session_id: int | None = None,
        everything: bool = True,
    ) -> None:
        self.broker = broker
        self.principal = principal
        self.session_id = session_id
        self.everything = everything

    @classmethod
    def of(cls, broker: BrokerView, session: Session, address: str) -> Scope:
        """The scope of ``session`` asking ``address`` (an admin of it sees everything)."""
        principal = session.principal
        admin = broker.security.allows(principal, "admin", "queue", address[len("/queue/") :])
        return cls(broker, principal, session.id, everything=admin)

    def sees_destination(self, dest: Destination) -> bool:
        if dest.tool_reply:  # a tool's own reply queue is no user destination
            return False
        if self.everything:
            return True
        if dest.owner is not None:
            return dest.owner == self.session_id
        assert self.principal is not None
        return self.broker.security.allows(self.principal, "read", dest.kind, dest.name)

    def sees_session(self, session: Connection) -> bool:
        return self.everything or (self.principal is not None and session.principal.name == self.principal.name)

    def destinations(self) -> list[Destination]:
        """The visible destinations, by address."""
        return sorted(
            (d for d in self.broker.destinations.values() if self.sees_destination(d)), key=lambda d: d.address
        )

    def sessions(self) -> list[Session]:
        """The visible connections but the asking one (the tool, not what it looks at), by id."""
        return sorted(
            (s for s in self.broker.sessions.values() if s.id != self.session_id and self.sees_session(s)),
            key=lambda s: s.id,
        )

    def diagnosis(self) -> list[dict[str, Any]]:
        """The findings about visible destinations only (a finding names the queues it blames)."""
        findings = self.broker.diagnose()
        if self.everything:
            return findings
        seen = {d.address for d in self.destinations()}
        return [
            f
            for f in findings
            if f.get("destination") in seen and set(f.get("evidence", {}).get("holders", ())) <= seen
        ]


def broker_statistics(broker: BrokerView, scope: Scope | None = None) -> dict[str, Any]:
    scope = scope if scope is not None else Scope(broker)
    dests = scope.destinations()
    sessions = scope.sessions()
    rings = broker.store.ring_reservation() if broker.store is not None else None
    now = broker.clock.now()
    rates = [_rates(broker, d, now) for d in dests]
    inflight = sum(_inflight(d) for d in dests)
    size = sum(d.size() for d in dests)
    return {
        "brokerName": broker.name,
        "timestamp": broker.clock.wall_ms(),
        "memoryUsage": broker.memory.usage,
        "memoryLimit": broker.memory.limit,
        "memoryPercentUsage": broker.memory.percent,
        "storeUsage": broker.store_usage.usage,
        "storeLimit": broker.store_usage.limit,
        "storePercentUsage": broker.store_usage.percent,
        # storeUsage counts every journal file at its preallocated size; what was written in them:
        "storeWrittenBytes": broker.store.written_bytes() if broker.store is not None else 0,
        # ring layout: one ring per destination, each reserved whole (0 and 0 for the growing layout)
        "storeRings": rings.rings if rings is not None else 0,
        "storeRingBytes": rings.each if rings is not None else 0,
        # ok, full (no space on disk: persistent messages wait or are refused) or failed (stopping).
        "storeState": broker.store_state,
        "storeProblem": broker.store_failure or broker.store_full or "",
        # the journals' files, and how many hold a live message (the rest kept by acks, or free)
        **_journal_files(broker.store.journals() if broker.store is not None else []),
        "tempUsage": broker.temp_usage.usage,
        "tempLimit": broker.temp_usage.limit,
        "tempPercentUsage": broker.temp_usage.percent,
        # What no usage counts: where every persistent message is (the journals' indexes)
        # and which are store-only (the queue cursors'): grows with a backlog on disk.
        "indexBytes": (broker.store.index_bytes() if broker.store is not None else 0)
        + sum(d.cursor.store_only.nbytes() for d in dests if isinstance(d, Queue)),
        # ... and how much of it is not in memory but in scratch files (KahaDB's index beyond its cache).
        "indexSpilledBytes": (broker.store.index_spilled_bytes() if broker.store is not None else 0)
        + broker.storehooks.index_spilled_bytes(),
        "size": size,
        "readyCount": size - inflight,
        "inflightCount": inflight,
        "enqueueRate": round(sum(r[0] for r in rates), 3),
        "dequeueRate": round(sum(r[1] for r in rates), 3),
        "enqueueCount": sum(d.enqueued for d in dests),
        "dequeueCount": sum(d.dequeued for d in dests),
        "dispatchCount": sum(d.dispatched for d in dests),
        "expiredCount": sum(d.expired for d in dests),
        "consumerCount": sum(len(d.subscriptions) for d in dests),
        "destinationCount": len(dests),
        "connectionCount": len(sessions),
        "blockedProducers": sum(len(s.producing.parked) for s in sessions),
        "diagnosis": scope.diagnosis(),
    }


def _inflight(dest: Destination) -> int:
    """Messages of ``dest`` delivered and not yet acknowledged."""
    return sum(len(s.dispatched) for s in dest.subscriptions)


def _rates(broker: BrokerView, dest: Destination, now: float) -> tuple[float, float]:
    return broker.rates.rates(dest.address, now, dest.enqueued, dest.dequeued)


def consumer_statistics(sub: Subscription) -> dict[str, Any]:
    """One consumer of a destination, as its ``consumers`` list shows it."""
    session = sub.session
    return {
        "connection": session.id,
        "subscription": sub.id,
        "clientId": session.client_id,
        "user": session.principal.name,
        "ack": sub.ack_mode,
        "prefetchSize": sub.prefetch,
        "outstanding": len(sub.dispatched),
        "pending": len(sub.pending),
        "slowConsumer": sub.slow,
        "swapped": _swapped(sub),
        "selector": sub.selector.text if sub.selector is not None else None,
    }


def _swapped(sub: Subscription) -> int:
    """How many of a topic subscription's pending messages its file cursor holds on disk."""
    return len(getattr(sub.pending, "disk", ()))


def destination_statistics(broker: BrokerView, dest: Destination, scope: Scope | None = None) -> dict[str, Any]:
    """One destination; its ``consumers`` only those ``scope`` may see (all by default)."""
    size = dest.size()
    inflight = _inflight(dest)
    enqueue_rate, dequeue_rate = _rates(broker, dest, broker.clock.now())
    stats = {
        "destinationName": dest.address,
        "kind": dest.kind,
        "timestamp": broker.clock.wall_ms(),
        "size": size,
        "readyCount": size - inflight,
        "inflightCount": inflight,
        "enqueueRate": enqueue_rate,
        "dequeueRate": dequeue_rate,
        "consumers": [
            consumer_statistics(s) for s in dest.subscriptions if scope is None or scope.sees_session(s.session)
        ],
        "enqueueCount": dest.enqueued,
        "dequeueCount": dest.dequeued,
        "dispatchCount": dest.dispatched,
        "expiredCount": dest.expired,
        "redeliveredCount": dest.redelivered,
        "discardedCount": dest.discarded,
        "consumerCount": len(dest.subscriptions),
        "memoryUsage": dest.memory.usage,
        "memoryLimit": dest.memory.limit,
        "memoryPercentUsage": dest.memory.percent,
        # where its cursor stops caching (its policy's cursor_memory_high_water_mark), percent
        "cursorMemoryHighWaterMark": dest.policy.cursor_memory_high_water_mark,
    }
    stats.update(dest.cursor_statistics())
    journal = broker.store.own_journal(dest.address) if broker.store is not None else None
    if journal is not None:
        stats.update(_ring_statistics(journal))
    if dest.kind == "topic":  # what its subscriptions hold for their consumers, and how much of it is on disk
        stats["pendingCount"] = sum(
            len(s.pending) for s in dest.subscriptions if s.durable is None or s.durable.active is s
        )
        stats["swappedCount"] = sum(_swapped(s) for s in dest.subscriptions)
    return stats


def _journal_files(journals: list[Journal], prefix: str = "store") -> dict[str, int]:
    """``<prefix>Files``: the journals' files; ``<prefix>FilesWithLive``: those holding a live message."""
    counts = [j.file_counts() for j in journals]
    return {f"{prefix}Files": sum(c[0] for c in counts), f"{prefix}FilesWithLive": sum(c[1] for c in counts)}


def _ring_statistics(journal: Journal) -> dict[str, Any]:
    """A queue's own ring journal (the ring layout): its files and whether it refuses enqueues.

    The ring's refusal is the queue's, not the store's: the broker's ``storeState``
    stays ``ok`` (other queues' rings, the disk, go on), and ``journalState`` is
    ``full`` from the threshold's refusal of an enqueue until an enqueue is written
    (as ActiveMQ's StorePercentUsage stays at 100 until space returns)."""
    refusal = journal.refusal
    return {
        "journalState": "full" if refusal is not None else "ok",
        "journalProblem": str(refusal) if refusal is not None else "",
        "journalLive": journal.live_count,
        **_journal_files([journal], prefix="journal"),
    }


def subscription_statistics(sub: Subscription, wall_ms: int) -> dict[str, Any]:
    return {
        "subscription": sub.id,
        "timestamp": wall_ms,
        "connection": sub.session.id,
        "clientId": sub.session.client_id,
        "destinationName": sub.destination.address,
        "ack": sub.ack_mode,
        "prefetchSize": sub.prefetch,
        "dispatchedQueueSize": len(sub.dispatched),
        "pendingQueueSize": len(sub.pending),
        "dispatchedCounter": sub.delivered_count,
        "ackedCounter": sub.acked_count,
        "durable": sub.durable is not None,
        "slowConsumer": sub.slow,
        "discarded": sub.discarded,
    }


def connection_statistics(session: Session, now: float, wall_ms: int) -> dict[str, Any]:
    subscriptions = [sub for sub in session.subscriptions.values() if not sub.destination.tool_reply]
    return {
        "connection": session.id,
        "timestamp": wall_ms,
        "remoteAddress": session.peer,
        "user": session.principal.name,
        "clientId": session.client_id,
        "version": session.version,
        "protocol": session.protocol,
        "subscriptions": len(subscriptions),
        "subscriptionList": [
            {
                "subscription": sub.id,
                "destinationName": sub.destination.address,
                "ack": sub.ack_mode,
                "prefetchSize": sub.prefetch,
                "outstanding": len(sub.dispatched),
            }
            for sub in subscriptions
        ],
        "unacknowledged": sum(len(s.dispatched) for s in session.subscriptions.values()),
        "outboundQueuedBytes": session.out_bytes + session.transport_buffered,
        "transportPaused": session.writing.socket_full,
        "readingPaused": session.reading.paused,
        "blockedSends": len(session.producing.parked),
        "secondsSinceLastRead": round(now - session.last_read, 3),
        "secondsSinceLastWrite": round(now - session.last_write_progress, 3),
        "framesIn": session.frames_in,
        "messagesIn": session.messages_in,
    }


#: A function answering statistics requests as ``statistics_replies`` does (``Broker.statistics_source``).
StatisticsSource = Callable[["BrokerView", str, "Scope | None"], "list[dict[str, Any]] | None"]


def statistics_replies(broker: BrokerView, address: str, scope: Scope | None = None) -> list[dict[str, Any]] | None:
    """The JSON objects answering a request sent to ``address`` (what ``scope``
    may see; everything by default); None if unknown."""
    scope = scope if scope is not None else Scope(broker)
    what = address[len(STATISTICS_PREFIX) :]
    if what == "Broker":
        return [broker_statistics(broker, scope)]
    if what == "Subscription":
        wall_ms = broker.clock.wall_ms()
        all_dests = sorted(broker.destinations.values(), key=lambda d: d.address)
        return [
            subscription_statistics(s, wall_ms)
            for d in all_dests
            for s in d.subscriptions
            if scope.sees_session(s.session) and not d.tool_reply
        ]
    if what == "Connection":
        now, wall_ms = broker.clock.now(), broker.clock.wall_ms()
        return [connection_statistics(s, now, wall_ms) for s in scope.sessions()]
    if what.startswith("Destination."):
        pattern = what[len("Destination.") :]
        return [
            destination_statistics(broker, d, scope) for d in scope.destinations() if wildcards.matches(pattern, d.name)
        ]
    return None
