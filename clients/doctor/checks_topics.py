"""Non-durable topics: the slow-consumers source (one slow subscriber blocks the producer, and
with it every other subscriber).

A topic policy handles slow consumers when it sets a pending-message limit
(the slow subscriber's oldest messages are discarded), aborts slow consumers,
or spools to disk (the file cursor, which only moves the problem to the temp
store: reported as a note).
"""

from __future__ import annotations

from .model import INFO, WARNING, Change, Finding, PolicyRef, Setup, human_size

__all__ = ["topics_without_slow_consumer_handling", "PENDING_LIMIT"]

#: What ActiveMQ's shipped activemq.xml sets for topic=">".
PENDING_LIMIT = 1000


def _unhandled(ref: PolicyRef) -> bool:
    return ref.entry.pending_message_limit < 0 and not ref.entry.abort_slow_consumer


def _patterns(refs: list[PolicyRef]) -> str:
    return ", ".join(f'"{r.pattern}"' for r in refs)


def _values(setup: Setup, refs: list[PolicyRef]) -> tuple[str, ...]:
    return tuple(
        setup.show_policy(r, key)
        for r in refs[:2]
        for key in ("pending_cursor", "pending_message_limit", "abort_slow_consumer")
    )


def _changes(refs: list[PolicyRef]) -> tuple[Change, ...]:
    return tuple(Change("pending_message_limit", PENDING_LIMIT, kind="topic", pattern=r.pattern) for r in refs)


def topics_without_slow_consumer_handling(setup: Setup) -> list[Finding]:
    refs = [r for r in setup.policies("topic") if _unhandled(r)]
    blocking = [r for r in refs if r.entry.pending_cursor == "vm"]
    spooling = [r for r in refs if r.entry.pending_cursor == "file"]
    fix = (
        f"limit what a slow subscriber may hold ({PENDING_LIMIT} pending messages, its oldest discarded first, as "
        "ActiveMQ's shipped activemq.xml does), or abort slow consumers instead (the abort slow-consumer strategy)"
    )
    out = []
    if blocking:
        out.append(
            Finding(
                "topic-slow-consumer-blocks-producer",
                WARNING,
                "slow-consumers",
                f"topics matching {_patterns(blocking)} have no slow-consumer handling: one slow subscriber blocks the producer for everyone",
                _values(setup, blocking),
                "A topic message is handed to each subscription in turn, in the producer's thread. Once a slow "
                "subscriber's pending messages fill memory (the vm cursor never spills), adding to it blocks, and with it "
                "the producer and every subscriber after it: blocking the producer is the default (source: slow-consumers).",
                fix,
                _changes(blocking),
            )
        )
    if spooling:
        temp = setup.config.system_usage.temp_limit
        out.append(
            Finding(
                "topic-slow-consumer-spools",
                INFO,
                "slow-consumers",
                f"topics matching {_patterns(spooling)} spool a slow subscriber's backlog to the temp store, without limit",
                _values(setup, spooling),
                "With the file cursor a slow subscriber's messages go to disk instead of blocking at once ('spool to "
                "disk', source: slow-consumers), but the producer waits while a subscription swaps its whole list, and blocks for good "
                f"when the temp store ({human_size(temp)}) is full (source: temp-storage).",
                fix,
                _changes(spooling),
            )
        )
    return out
