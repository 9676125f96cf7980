"""One sample of a running broker: what ``doctor --live`` evaluates.

A reader (``read_stomp`` for ActiveMQ and minibroker, ``read_http`` for
RabbitMQ and ActiveMQ's Jolokia) turns a broker's own statistics into a
``Sample``: the same few figures whatever the broker, each ``None`` where the
broker does not tell it (ActiveMQ's statistics plugin has no per-consumer
figures; RabbitMQ has no memory percent per queue). The signatures
(``signatures``) read only samples, never a broker.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = [
    "BrokerKind",
    "Connection",
    "Consumer",
    "Destination",
    "Sample",
    "ACTIVEMQ",
    "MINIBROKER",
    "RABBITMQ",
    "SHARED_DLQ",
    "broker_internal",
]

BrokerKind = str
ACTIVEMQ: BrokerKind = "activemq"
MINIBROKER: BrokerKind = "minibroker"
RABBITMQ: BrokerKind = "rabbitmq"

#: The dead letter queue every queue shares by default (ActiveMQ's, and ours).
SHARED_DLQ = "ActiveMQ.DLQ"


def broker_internal(name: str) -> bool:
    """A destination of the broker's own (``ActiveMQ.Advisory.*``, ``ActiveMQ.Statistics.*``)
    that a sample leaves out; the dead letter queues (``ActiveMQ.DLQ``, ``ActiveMQ.DLQ.*``)
    hold messages that failed, and are kept."""
    return name.startswith("ActiveMQ.") and not name.startswith(SHARED_DLQ)


@dataclass(frozen=True)
class Destination:
    """A queue or topic at the sample's moment (counters are cumulative)."""

    name: str
    kind: str  # queue or topic
    size: int  # messages held (ready and unacknowledged)
    enqueued: int
    dequeued: int
    consumers: int
    inflight: int = 0  # delivered, not yet acknowledged
    dispatched: int | None = None  # cumulative deliveries to consumers
    producers: int | None = None
    memory_usage: int | None = None
    memory_pct: int | None = None  # of its own limit (ActiveMQ's MemoryPercentUsage)
    cursor_hwm: int | None = None  # percent where its cursor stops caching
    store_only: int | None = None  # messages its cursor holds only in the store
    pending: int | None = None  # a topic's messages waiting for its subscribers
    redelivered: int | None = None  # cumulative redeliveries
    expired: int | None = None  # cumulative messages that expired on it
    journal_full: bool = False  # its own journal (a ring) refuses enqueues
    journal_files: int | None = None  # its own journal's files


@dataclass(frozen=True)
class Consumer:
    """One consumer (subscription) at the sample's moment."""

    name: str
    destination: str
    connection: str
    prefetch: int
    outstanding: int  # delivered, not yet acknowledged
    acked: int | None = None  # cumulative acknowledgements
    pending: int | None = None  # messages waiting for it at the broker
    slow: bool | None = None  # the broker marked it slow


@dataclass(frozen=True)
class Connection:
    """One client connection at the sample's moment."""

    name: str
    user: str = ""
    blocked: bool = False  # flow control holds its publishes (RabbitMQ's blocked, our parked SENDs)
    publishes: bool = False
    consumes: bool = False
    stalled: bool = False  # its socket takes nothing while bytes wait for it
    unacked: int | None = None  # messages delivered to its consumers, not yet acknowledged


@dataclass(frozen=True)
class Sample:
    """A broker's figures at ``t`` (seconds on the sampler's clock)."""

    t: float
    broker: BrokerKind
    name: str = ""
    memory_pct: int | None = None
    memory_usage: int | None = None
    memory_limit: int | None = None
    temp_pct: int | None = None
    store_pct: int | None = None
    store_full: bool = False  # the store refuses or holds persistent messages
    store_rings: int | None = None  # the ring layout's rings (0: the growing layout)
    store_files: int | None = None  # the journals' files
    store_files_with_live: int | None = None  # ... of which hold a live message
    blocked_producers: int | None = None
    memory_alarm: bool = False
    disk_alarm: bool = False
    destinations: tuple[Destination, ...] = ()
    consumers: tuple[Consumer, ...] = ()
    connections: tuple[Connection, ...] = ()
    notes: tuple[str, ...] = field(default=())  # what the reader could not read (said once in the report)

    def destination(self, name: str) -> Destination | None:
        for d in self.destinations:
            if d.name == name:
                return d
        return None
