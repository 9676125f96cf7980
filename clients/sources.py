"""The public documents the labs reproduce and ``doctor`` warns about.

Each trap minibroker teaches comes from a public write-up. The labs
(``lab.toml``'s ``source``) and ``doctor`` (a finding's ``source``) name it by a
short key and cite it by its public title and date, so a reader can find it.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SOURCES", "Source", "cite"]


@dataclass(frozen=True)
class Source:
    """A public document: its title, when it was published, where, and the trap it describes."""

    title: str
    date: str | None
    where: str
    trap: str

    def citation(self) -> str:
        """``"Title" (where, date)``: what a reader types into a search engine."""
        when = self.date or "undated"
        return f'"{self.title}" ({self.where}, {when})'


#: key -> the document
SOURCES: dict[str, Source] = {
    "destination-limits": Source(
        "Starving JMS consumers when not setting destination limits in ActiveMQ",
        "13 Apr 2016",
        "blog post",
        "starving consumers without destination memory limits",
    ),
    "temp-storage": Source(
        "Observations on ActiveMQs temp storage.", "24 Feb 2011", "blog post", "temp storage: producers blocked forever"
    ),
    "rabbitmq-alarms": Source(
        "Memory and Disk Alarms",
        None,
        "RabbitMQ documentation",
        "a memory or disk alarm blocks every publishing connection, consumers on them included",
    ),
    "rabbitmq-prefetch": Source(
        "Consumer Acknowledgements and Publisher Confirms",
        None,
        "RabbitMQ documentation",
        "a consumer's prefetch full of unacknowledged deliveries",
    ),
    "slow-consumers": Source(
        "Slow Consumers",
        None,
        "Apache ActiveMQ developer guide, design documents",
        "slow consumers on non-durable topics",
    ),
    "stalled-socket": Source(
        "ActiveMQ, STOMP, and network problems that aren't",
        None,
        "blog post by dakkar",
        "STOMP prefetch and the stalled socket",
    ),
    "journal-threshold": Source(
        "Enqueue threshold exceptions triggered for qpid queue with few messages only",
        None,
        "Red Hat knowledge base, MRG Messaging 2",
        "ring journal: enqueue capacity threshold exceeded",
    ),
    "producer-flow-control": Source(
        "Producer Flow Control",
        None,
        "Apache ActiveMQ Classic documentation",
        "one connection that publishes and consumes deadlocks under flow control",
    ),
    "kahadb-log-files": Source(
        "Why do KahaDB log files remain after cleanup?",
        None,
        "Apache ActiveMQ Classic documentation, KahaDB FAQ",
        "a growing journal kept by one old message or an offline durable subscriber",
    ),
    "redelivery-dlq": Source(
        "Message Redelivery and DLQ Handling",
        None,
        "Apache ActiveMQ Classic documentation",
        "a poison message redelivered in a loop, then lost in one shared dead letter queue",
    ),
}


def cite(key: str) -> str:
    """The citation of ``key``'s document (``KeyError`` for an unknown key)."""
    return SOURCES[key].citation()
