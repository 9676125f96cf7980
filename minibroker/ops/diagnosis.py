"""Recognising the labs' pathologies in a running broker.

``diagnose(broker)`` returns findings, each a dict with ``pathology``,
``summary`` (one line for ``stat`` and the log), ``evidence`` and ``cure``.
It knows the starving consumers ("Starving JMS consumers when not setting
destination limits in ActiveMQ", 13 Apr 2016; see ``_starving``): a consumer
with a backlog in the store that receives nothing because the cursor has no
space, while consumer-less destinations hold the broker's memory; and a store
of the ring layout filled by the rings' reservations (``_rings_fill_store``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from minibroker.destinations.destination import Destination
    from minibroker.destinations.usage import Usage
    from minibroker.durability.persistence import MessageStore

__all__ = ["diagnose", "DiagnosedBroker"]


class DiagnosedBroker(Protocol):
    """What the diagnosis reads of the broker (``broker.Broker`` satisfies it)."""

    @property
    def destinations(self) -> Mapping[str, Destination]: ...

    @property
    def store(self) -> MessageStore | None: ...

    @property
    def memory(self) -> Usage: ...

    @property
    def store_usage(self) -> Usage: ...


def diagnose(broker: DiagnosedBroker) -> list[dict[str, Any]]:
    """Every pathology the broker's state shows right now."""
    findings: list[dict[str, Any]] = []
    findings += _starving(broker)
    findings += _rings_fill_store(broker)
    return findings


def _rings_fill_store(broker: DiagnosedBroker) -> list[dict[str, Any]]:
    """A store of the ring layout that is full because each ring is counted
    whole from its creation (``ringcost``), however little it holds."""
    store, usage = broker.store, broker.store_usage
    if store is None or not usage.is_full():
        return []
    rings = store.ring_reservation()
    if rings is None or not rings.rings:
        return []
    return [
        {
            "pathology": "rings-reserve-the-store",
            "destination": None,
            "summary": (
                f"persistent store {usage.percent}% full ({usage.usage} of {usage.limit} bytes), persistent producers "
                f"blocked: {rings.explain()}"
            ),
            "evidence": {
                "rings": rings.rings,
                "ring_bytes": rings.each,
                "reserved": rings.reserved,
                "store_limit": usage.limit,
            },
            "cure": rings.cure(usage.limit),
        }
    ]


def _starving(broker: DiagnosedBroker) -> list[dict[str, Any]]:
    """The starving-consumers checklist, item by item.

    1. a destination with consumers and a backlog, receiving nothing: its
       messages are only in the store and its cursor may not page in;
    2. that destination's own memory at 0%;
    3. the broker's memory at or over the cursor high-water mark;
    4. consumer-less destinations holding that memory.
    """
    out: list[dict[str, Any]] = []
    root = broker.memory
    for dest in broker.destinations.values():
        cursor = getattr(dest, "cursor", None)
        if cursor is None or not dest.subscriptions or not len(cursor.store_only):
            continue
        stored = len(cursor.store_only)
        if cursor.cached or cursor.can_page_in():
            continue
        policy = dest.policy
        if dest.memory.usage and dest.memory.percent >= policy.cursor_memory_high_water_mark:
            # Item 2 fails: the destination's own messages, dispatched to its consumers and
            # not yet acknowledged, fill its own memory (a slow consumer with a big prefetch
            # under a per-destination limit: the cure working). Its cursor waits for its own
            # consumers, who hold more than they can take; nobody is starved. (The percentage
            # may pass 100: a page-in brings a whole batch, max_page_size messages, once the
            # cursor is below its mark, as ActiveMQ's does.)
            continue
        holders = sorted(
            (d for d in broker.destinations.values() if d is not dest and not d.subscriptions and d.memory.usage > 0),
            key=lambda d: -d.memory.usage,
        )
        held = sum(d.memory.usage for d in holders)
        names = ", ".join(
            f"{d.address} ({d.memory.usage * 100 // max(root.limit, 1)}% of broker memory)" for d in holders[:5]
        )
        out.append(
            {
                "pathology": "starving-consumers",
                "destination": dest.address,
                "summary": (
                    f"{dest.address}: {len(dest.subscriptions)} consumer(s) starved: {stored} messages in the store, "
                    f"destination memory {dest.memory.percent}%, broker memory {root.percent}% "
                    f"(cursor high-water mark {policy.cursor_memory_high_water_mark}%, space check {policy.space_check})"
                ),
                "evidence": {
                    "store_only": stored,
                    "destination_memory_pct": dest.memory.percent,
                    "broker_memory_pct": root.percent,
                    "held_by_consumerless": held,
                    "holders": [d.address for d in holders],
                },
                "cure": (
                    f"memory is held by destinations without consumers: {names or 'none'}; "
                    "set a per-destination memory_limit on them in [[destination_policy]] "
                    "(or consume or purge them)"
                ),
            }
        )
    return out
