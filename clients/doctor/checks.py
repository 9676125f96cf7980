"""Every check ``doctor`` runs, in report order, and running them.

A check is a function ``Setup -> list[Finding]``. ``CHECKS`` lists them with
the source document each comes from; ``docs/doctor.md`` describes each rule and fix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from . import checks_journal, checks_stomp, checks_topics, checks_usage
from .model import SEVERITIES, Finding, Setup

__all__ = ["CHECKS", "run_checks"]

Check = Callable[[Setup], list[Finding]]

#: (source, check) in report order within a severity.
CHECKS: tuple[tuple[str | None, Check], ...] = (
    (None, checks_usage.memory_limit_too_small),
    (None, checks_usage.store_limit_below_journal_file),
    ("temp-storage", checks_usage.temp_limit_below_temp_file),
    ("temp-storage", checks_usage.memory_above_temp_limit),
    ("destination-limits", checks_usage.queues_share_memory),
    ("destination-limits", checks_usage.destination_limits_exceed_broker),
    ("slow-consumers", checks_topics.topics_without_slow_consumer_handling),
    ("stalled-socket", checks_stomp.no_stomp_listener),
    ("stalled-socket", checks_stomp.prefetch_without_write_timeout),
    ("stalled-socket", checks_stomp.no_heart_beats),
    ("stalled-socket", checks_stomp.link_stealing_off),
    ("journal-threshold", checks_journal.ring_with_priority_queues),
    ("journal-threshold", checks_journal.ring_too_small),
    ("journal-threshold", checks_journal.ring_strands_messages),
    (None, checks_journal.ring_reserves_store),
)


def run_checks(setup: Setup) -> list[Finding]:
    """The reader's notes and every check's findings, most severe first, each
    with its fix rendered in the input's syntax."""
    findings = list(setup.notes)
    for _, check in CHECKS:
        findings += check(setup)
    rendered = [dataclasses.replace(f, snippet=setup.render(f.changes)) if f.changes else f for f in findings]
    return sorted(rendered, key=lambda f: SEVERITIES.index(f.severity))
