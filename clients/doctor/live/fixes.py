"""What to do about a live finding: the write-up, the fix in the broker's syntax, the lab.

``fix_for(pathology, broker, subject, culprits, sample)`` gives a ``Fix``:
the public document (a ``clients.sources`` key, cited by title and date),
the fix spelled for that broker (``activemq.xml``, ``rabbitmq.conf`` or a
policy, our TOML) naming the destinations or connections the finding blames,
and the lab that reproduces the pathology: the lab one of whose runs lists
the pathology among its findings (``lab.toml``), else the lab named for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from ...labs.model import LabError, find_labs
from ...sources import SOURCES
from ..model import format_size, power_of_two_below
from .sample import ACTIVEMQ, RABBITMQ, Sample

__all__ = ["Fix", "fix_for", "lab_for", "SOURCE_OF", "RABBITMQ_SOURCE"]


@dataclass(frozen=True)
class Fix:
    source: str | None  # a clients.sources key
    lab: str | None  # the lab's directory name (examples/labs/...)
    text: str

    @property
    def citation(self) -> str:
        return SOURCES[self.source].citation() if self.source in SOURCES else ""


#: The public write-up of each pathology, by ``clients.sources`` key (and RabbitMQ's own where it differs).
SOURCE_OF: dict[str, str] = {
    "starved_consumer": "destination-limits",
    "blocked_producer_idle_consumers": "temp-storage",
    "slow_consumer": "slow-consumers",
    "stalled_socket": "slow-consumers",
    "prefetch_full_slow_acks": "stalled-socket",
    "journal_full_few_live": "journal-threshold",
    "store_held_by_few_live": "kahadb-log-files",
    "redelivery_loop": "redelivery-dlq",
    "dead_letters_among_expired": "redelivery-dlq",
    "resource_alarm": "rabbitmq-alarms",
    "blocked_holding_unacked": "producer-flow-control",
}
#: ... and RabbitMQ's own write-up where it documents the pathology itself.
RABBITMQ_SOURCE = {"blocked_holding_unacked": "rabbitmq-alarms", "prefetch_full_slow_acks": "rabbitmq-prefetch"}

#: The lab for a pathology no run lists among its findings (the trace analysis has no detector for it).
_LAB_NAMED = {
    "prefetch_full_slow_acks": "prefetch-stalled-socket",
    "redelivery_loop": "poison-message",
    "dead_letters_among_expired": "poison-message",
    "blocked_holding_unacked": "shared-connection-deadlock",
}


@cache
def _labs() -> tuple[tuple[str, str, str, frozenset[str]], ...]:
    try:
        return tuple(
            (lab.directory.name, lab.name, lab.source, frozenset(f for r in lab.runs for f in r.findings))
            for lab in find_labs()
        )
    except LabError:
        return ()


def lab_for(pathology: str) -> str | None:
    """The lab (its directory name) that reproduces ``pathology``, if this checkout has one."""
    labs = _labs()
    listing = [(directory, source) for directory, _, source, findings in labs if pathology in findings]
    for directory, source in listing:  # the lab about this pathology's write-up first
        if source == SOURCE_OF.get(pathology):
            return directory
    if listing:
        return listing[0][0]
    wanted = _LAB_NAMED.get(pathology)
    return next((directory for directory, name, _, _ in labs if name == wanted), None)


def _names(items: tuple[str, ...], default: str) -> list[str]:
    return list(items[:3]) or [default]


def _amq_dest(name: str) -> tuple[str, str]:
    """``queue://a``, ``/queue/a`` or ``a`` -> (``queue``, ``a``)."""
    for kind in ("queue", "topic"):
        for prefix in (f"{kind}://", f"/{kind}/"):
            if name.startswith(prefix):
                return kind, name[len(prefix) :]
    return "queue", name


def _starved(broker: str, subject: str, culprits: tuple[str, ...], s: Sample) -> str:
    limit = power_of_two_below((s.memory_limit or 64 * 1024**2) // 10)
    holders = [_amq_dest(c)[1] for c in _names(culprits, ">")]
    if broker == ACTIVEMQ:
        entries = "\n".join(f'  <policyEntry queue="{h}" memoryLimit="{format_size(limit)}"/>' for h in holders)
        return (
            "give the queues without consumers that hold the memory a memory limit of their own, in "
            f"activemq.xml's <policyEntries>:\n{entries}"
        )
    entries = "\n".join(
        f'[[destination_policy]]\nqueue = "{h}"\nmemory_limit = "{format_size(limit)}"' for h in holders
    )
    return f"give the queues without consumers that hold the memory a memory_limit of their own:\n{entries}"


def _text(pathology: str, broker: str, subject: str, culprits: tuple[str, ...], s: Sample) -> str:
    kind, name = _amq_dest(subject)
    amq = broker == ACTIVEMQ
    if pathology == "starved_consumer":
        return _starved(broker, subject, culprits, s)
    if pathology == "blocked_producer_idle_consumers":
        if amq:
            return (
                "raise the temp store's limit above several of its files in activemq.xml:\n"
                '  <tempUsage><tempUsage limit="1 gb"/></tempUsage>'
            )
        return 'raise the temp store\'s limit above several of its files:\n[system_usage]\ntemp_limit = "1 gb"'
    if pathology == "slow_consumer":
        if amq:
            return (
                f"let the slow subscribers of topic {name} spool to disk, or drop their oldest messages, in activemq.xml:\n"
                f'  <policyEntry topic="{name}">\n'
                "    <pendingSubscriberPolicy><fileCursor/></pendingSubscriberPolicy>\n"
                '    <pendingMessageLimitStrategy><constantPendingMessageLimitStrategy limit="1000"/>'
                "</pendingMessageLimitStrategy>\n  </policyEntry>"
            )
        return (
            f"let the slow subscribers of {subject} spool to disk (or set pending_message_limit):\n"
            f'[[destination_policy]]\ntopic = "{name}"\npending_cursor = "file"'
        )
    if pathology == "stalled_socket":
        if amq:
            return (
                "let the broker drop a connection whose socket takes nothing, on the STOMP connector in "
                'activemq.xml:\n  <transportConnector name="stomp" uri="stomp://0.0.0.0:61613?'
                'transport.soWriteTimeout=5000"/>'
            )
        return "let the broker drop a connection whose socket takes nothing:\n[transport]\nso_write_timeout = 5000"
    if pathology == "prefetch_full_slow_acks":
        if broker == RABBITMQ:
            return (
                "lower the consumer's prefetch (basic.qos prefetch_count, e.g. 1 to 10 for slow work), and bound "
                "how long a delivery may stay unacknowledged in rabbitmq.conf:\n  consumer_timeout = 1800000"
            )
        if amq:
            return (
                "subscribe with a small prefetch (the SUBSCRIBE header activemq.prefetchSize:1), or set it for "
                f'the queue in activemq.xml:\n  <policyEntry queue="{name}" queuePrefetch="1"/>'
            )
        return f'subscribe with a small prefetch, or set it for the queue:\n[[destination_policy]]\nqueue = "{name}"\nqueue_prefetch = 1'
    if pathology == "journal_full_few_live":
        return (
            "consume or remove the few old messages that pin the journal files, then compact the journal with "
            'the broker stopped (minibroker journal compact); or use the growing layout:\n[store]\nlayout = "growing"'
        )
    if pathology == "store_held_by_few_live":
        keepers = ", ".join(_names(culprits, "the destinations nobody reads"))
        if amq:
            return (
                f"consume or remove the old messages that keep the journal files ({keepers}), and let the "
                "broker remove durable subscribers that stay offline, in activemq.xml:\n"
                '  <broker offlineDurableSubscriberTimeout="86400000" offlineDurableSubscriberTaskSchedule="3600000">'
            )
        return (
            f"consume or remove the old messages that keep the journal files ({keepers}; minibroker journal "
            "inspect names what pins each file), and let the broker remove durable subscribers that stay "
            "offline:\n[broker]\noffline_durable_subscriber_timeout = 86400000"
        )
    if pathology == "redelivery_loop":
        if broker == RABBITMQ:
            return (
                f"bound the redeliveries of {name} and dead-letter the message (a quorum queue's delivery limit, "
                f"as a policy):\n  rabbitmqctl set_policy poison '^{name}$' "
                '\'{"delivery-limit":5,"dead-letter-exchange":"dlx"}\' --apply-to queues'
            )
        if amq:
            return (
                "bound the redeliveries (the redeliveryPlugin in activemq.xml's <plugins>):\n"
                '  <redeliveryPlugin fallbackToDeadLetter="true"><redeliveryPolicyMap><redeliveryPolicyMap>'
                '<defaultEntry><redeliveryPolicy maximumRedeliveries="6"/></defaultEntry>'
                "</redeliveryPolicyMap></redeliveryPolicyMap></redeliveryPlugin>"
            )
        return f'bound the redeliveries and dead-letter the message:\n[[destination_policy]]\nqueue = "{name}"\nmaximum_redeliveries = 6'
    if pathology == "dead_letters_among_expired":
        if amq:
            return (
                "give each queue a dead letter queue of its own and drop expired messages instead of "
                "dead-lettering them, in activemq.xml's <policyEntries>:\n"
                '  <policyEntry queue=">">\n    <deadLetterStrategy>\n'
                '      <individualDeadLetterStrategy queuePrefix="ActiveMQ.DLQ.Queue." processExpired="false"/>\n'
                "    </deadLetterStrategy>\n  </policyEntry>"
            )
        return (
            "give each queue a dead letter queue of its own and drop expired messages instead of "
            'dead-lettering them:\n[[destination_policy]]\nqueue = ">"\ndead_letter_strategy = "individual"\n'
            "process_expired = false"
        )
    if pathology == "resource_alarm":
        return (
            "find what holds the memory (queues with a backlog and no consumer: consume or limit them, e.g. "
            "with a max-length policy) or free the disk; the thresholds are in rabbitmq.conf:\n"
            "  vm_memory_high_watermark.relative = 0.6\n  disk_free_limit.absolute = 2GB"
        )
    if pathology == "blocked_holding_unacked":
        return (
            "publish and consume on separate connections: flow control blocks a whole connection, and the "
            "consumer's acknowledgements on it wait behind the blocked publishes"
        )
    return ""


def fix_for(pathology: str, broker: str, subject: str, culprits: tuple[str, ...], sample: Sample) -> Fix:
    """The write-up, the fix in ``broker``'s syntax and the lab for a finding."""
    source = RABBITMQ_SOURCE.get(pathology) if broker == RABBITMQ else None
    return Fix(
        source=source or SOURCE_OF.get(pathology),
        lab=lab_for(pathology),
        text=_text(pathology, broker, subject, culprits, sample),
    )
