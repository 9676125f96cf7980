"""The arrays of tables: ``[[destination_policy]]``, ``[[users]]`` and
``[[authorization]]``, each entry a frozen dataclass declared with ``values.option``."""

from __future__ import annotations

from dataclasses import dataclass

from minibroker import wildcards

from .values import (
    boolean,
    choice,
    destination_pattern,
    integer,
    number,
    option,
    password_hash,
    size,
    string_list,
    text,
)

__all__ = ["AuthorizationEntry", "DestinationEntry", "PolicyEntry", "User"]


@dataclass(frozen=True)
class DestinationEntry:
    """An entry for the destinations one wildcard matches: exactly one of ``queue`` or
    ``topic`` (the loader refuses an entry with both or neither)."""

    queue: str | None = option(None, destination_pattern, "queues this entry applies to (ActiveMQ wildcard)")
    topic: str | None = option(None, destination_pattern, "topics this entry applies to (ActiveMQ wildcard)")

    @property
    def pattern(self) -> str:
        """The wildcard, whichever of ``queue`` or ``topic`` it is given as."""
        return self.queue if self.queue is not None else (self.topic or ">")

    @property
    def kind(self) -> str:
        """``"queue"`` or ``"topic"``: the kind of destination the entry is for."""
        return "queue" if self.queue is not None else "topic"

    def applies_to(self, kind: str, name: str) -> bool:
        """Does this entry apply to the ``kind`` ("queue"/"topic") destination ``name``?"""
        return kind == self.kind and wildcards.matches(self.pattern, name)


@dataclass(frozen=True)
class PolicyEntry(DestinationEntry):
    """``[[destination_policy]]``: settings for destinations matching ``queue`` or ``topic``."""

    queue_prefetch: int = option(1000, integer(1, 32767), "default STOMP prefetch for queue subscriptions")
    topic_prefetch: int = option(32767, integer(1, 32767), "default STOMP prefetch for topic subscriptions")
    durable_topic_prefetch: int = option(100, integer(1, 32767), "default prefetch for durable topic subscriptions")
    queue_browser_prefetch: int = option(500, integer(1, 32767), "default prefetch for queue browsers")
    max_page_size: int = option(200, integer(1), "messages paged in (and stepped over by selectors) at a time")
    prioritized_messages: bool = option(False, boolean, "a queue dispatches higher message priorities first")
    maximum_redeliveries: int = option(
        6, integer(-1), "deliveries after the first before a message is dead-lettered; -1 = never"
    )
    initial_redelivery_delay: int = option(
        0, integer(0), "ms a NACKed or rolled-back queue message waits before its first redelivery; 0 = at once"
    )
    redelivery_delay: int = option(0, integer(0), "ms before each later redelivery (without back-off)")
    use_exponential_back_off: bool = option(
        False, boolean, "each redelivery waits back_off_multiplier times as long as the one before"
    )
    back_off_multiplier: float = option(5.0, number(1.0, 1000.0), "the back-off's factor (ActiveMQ's default 5)")
    maximum_redelivery_delay: int = option(
        -1, integer(-1), "ms no redelivery waits longer than (with back-off); -1 = no cap"
    )
    dead_letter_on_nack: bool = option(False, boolean, "a NACK dead-letters at once, as ActiveMQ's STOMP NACK does")
    dead_letter_strategy: str = option(
        "shared",
        choice("shared", "individual", "discard"),
        "shared: one DLQ; individual: ActiveMQ.DLQ.Queue.<name>; discard: drop",
    )
    dead_letter_queue: str = option("ActiveMQ.DLQ", destination_pattern, "the shared dead letter queue's name")
    process_non_persistent: bool = option(
        False, boolean, "dead-letter non-persistent messages too (otherwise they are dropped)"
    )
    process_expired: bool = option(True, boolean, "expired messages go to the dead letter queue")
    expire_messages_period: int = option(
        30000, integer(0), "ms between sweeps for expired messages; 0 = only at dispatch"
    )
    memory_limit: int = option(0, size, "this destination's own memory limit; 0 = the broker's (ActiveMQ memoryLimit)")
    cursor_memory_high_water_mark: int = option(
        70, integer(1, 100), "percent of its memory at which a cursor stops caching"
    )
    space_check: str = option(
        "current", choice("current", "legacy"), "cursor space rule: current (ActiveMQ 5.15+) or legacy (up to 5.14)"
    )
    producer_flow_control: bool = option(True, boolean, "block producers while the destination's memory is full")
    send_fail_if_no_space: bool = option(False, boolean, "answer a producer with an ERROR instead of blocking it")
    send_fail_if_no_space_after_timeout: int = option(
        0, integer(0), "ms a producer may be blocked before it gets an ERROR; 0 = forever"
    )
    blocked_producer_warning_interval: int = option(30000, integer(0), "ms between log lines about a blocked producer")
    pending_cursor: str = option(
        "file",
        choice("vm", "file"),
        "topic subscriptions' and non-persistent queue messages' cursor: file (spill to the temp store past the "
        "high-water mark, ActiveMQ's default) or vm (memory only: a backlog no one consumes fills the broker's memory)",
    )
    pending_message_limit: int = option(
        -1, integer(-1), "topic subscriptions: messages pending beyond prefetch before eviction; -1 = no limit (block)"
    )
    message_eviction_strategy: str = option(
        "oldest", choice("oldest", "newest"), "which pending message a full subscription discards"
    )
    abort_slow_consumer: bool = option(False, boolean, "abort subscriptions that stay slow (AbortSlowConsumerStrategy)")
    max_slow_count: int = option(-1, integer(-1), "abort after this many checks found it slow; -1 = off")
    max_slow_duration: int = option(30000, integer(0), "ms a subscription may stay slow before it is aborted")
    abort_slow_consumer_check_period: int = option(30000, integer(1), "ms between slow-consumer checks")
    abort_connection: bool = option(False, boolean, "abort the whole connection, not only the slow subscription")

    def redelivery_delay_ms(self, redeliveries: int) -> int:
        """How long (ms) a message waits before its ``redeliveries``-th redelivery (1, 2 ...),
        as ActiveMQ's ``RedeliveryPolicy.getNextRedeliveryDelay`` counts it: the first waits
        ``initial_redelivery_delay``; each later one ``redelivery_delay``, or with back-off the
        one before times ``back_off_multiplier``, capped at ``maximum_redelivery_delay``."""
        delay = self.initial_redelivery_delay
        for _ in range(redeliveries - 1):
            previous, delay = delay, self.redelivery_delay
            if previous > 0 and self.use_exponential_back_off and self.back_off_multiplier > 1:
                delay = int(previous * self.back_off_multiplier)
                if self.maximum_redelivery_delay != -1 and delay > self.maximum_redelivery_delay:
                    delay = max(self.maximum_redelivery_delay, self.redelivery_delay)
        return delay


@dataclass(frozen=True)
class User:
    """``[[users]]``: one account (ActiveMQ's simpleAuthenticationPlugin)."""

    name: str = option("", text, "user name (the STOMP login)")
    password_hash: str = option("", password_hash, "salted hash from `minibroker passwd`")
    groups: tuple[str, ...] = option((), string_list, "groups the user belongs to")


@dataclass(frozen=True)
class AuthorizationEntry(DestinationEntry):
    """``[[authorization]]``: who may read, write and create (admin) matching destinations."""

    read: tuple[str, ...] = option((), string_list, "groups (or users) that may subscribe and browse")
    write: tuple[str, ...] = option((), string_list, "groups (or users) that may send")
    admin: tuple[str, ...] = option(
        (), string_list, "groups (or users) that may create the destination and run admin operations on it"
    )
