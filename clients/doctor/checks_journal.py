"""The ring journal: the journal-threshold source (a few messages left behind, one per file,
refuse every enqueue with "Enqueue capacity threshold exceeded").

Only our TOML can choose ``store.layout = "ring"`` (Qpid's legacystore); a
KahaDB journal grows instead, so these checks never fire for activemq.xml.
"""

from __future__ import annotations

from storage.ring import ENQUEUE_THRESHOLD_PERCENT

from .model import INFO, WARNING, Change, Finding, Setup, human_size

__all__ = [
    "ring_capacity",
    "ring_with_priority_queues",
    "ring_too_small",
    "ring_strands_messages",
    "ring_reserves_store",
]

#: Fewer rings than this in the store limit is a warning: brokers routinely hold thousands of queues.
FEW_RINGS = 1000

_MB = 1024**2
_GB = 1024**3


def ring_capacity(setup: Setup) -> int:
    """Bytes one queue's ring can hold before the look-ahead reaches its reserve
    (20% of the ring, at least one file), as ``storage.ring`` computes it."""
    store = setup.config.store
    total = store.file_count * store.file_size
    reserve = max(-(-total * (100 - ENQUEUE_THRESHOLD_PERCENT) // 100), store.file_size)
    return total - reserve


def _ring(setup: Setup) -> bool:
    return setup.config.broker.persistent and setup.config.store.layout == "ring"


def _ring_values(setup: Setup) -> tuple[str, ...]:
    return tuple(setup.show(k) for k in ("store.layout", "store.file_count", "store.file_size"))


_GROWING = Change("store.layout", "growing")
_WORKAROUND = (
    "or keep the ring, give it more and larger files (file_count, file_size) and run "
    "`minibroker journal compact DIR` (the source's re-enqueue workaround) when it fills"
)


def ring_with_priority_queues(setup: Setup) -> list[Finding]:
    refs = [r for r in setup.policies("queue") if r.entry.prioritized_messages]
    if not _ring(setup) or not refs:
        return []
    files = setup.config.store.file_count
    return [
        Finding(
            "ring-priority-queues",
            WARNING,
            "journal-threshold",
            f"priority queues on a ring journal: {files - 1} low-priority messages left behind can refuse every enqueue",
            (*_ring_values(setup), *(setup.show_policy(r, "prioritized_messages") for r in refs[:3])),
            "A ring journal reuses a file only when none of its messages is still live. Consumers of a priority queue "
            "take the high-priority messages and leave a low-priority one behind in each file; one per file is enough "
            "for 'Enqueue capacity threshold exceeded' on a nearly empty queue (source: journal-threshold).",
            "use the growing journal, whose files are added as needed and deleted when nothing in them is live; "
            + _WORKAROUND,
            (_GROWING,),
        )
    ]


def ring_too_small(setup: Setup) -> list[Finding]:
    if not _ring(setup):
        return []
    capacity, largest = ring_capacity(setup), setup.config.transport.max_data_length
    if capacity >= largest:
        return []
    store = setup.config.store
    needed = -(-largest * 100 // ENQUEUE_THRESHOLD_PERCENT // store.file_count)
    return [
        Finding(
            "ring-too-small",
            WARNING,
            "journal-threshold",
            f"the ring journal holds {human_size(capacity)} per queue, less than the largest message allowed "
            f"({human_size(largest)})",
            (*_ring_values(setup), setup.show("transport.max_data_length")),
            f"Before each enqueue the ring looks ahead by the record plus a reserve of {100 - ENQUEUE_THRESHOLD_PERCENT}% "
            "(at least one file) and refuses it with 'Enqueue capacity threshold exceeded' if that reaches a file still "
            "holding live messages: one large message cannot be stored at all, and a short backlog of them fills the "
            "ring (source: journal-threshold).",
            "make the files large enough for the largest message (or lower max_data_length); "
            'or use the growing journal (store.layout = "growing")',
            (Change("store.file_size", -(-needed // _MB) * _MB),),
        )
    ]


def ring_strands_messages(setup: Setup) -> list[Finding]:
    if not _ring(setup) or any(r.entry.prioritized_messages for r in setup.policies("queue")):
        return []  # with priority queues, ring_with_priority_queues says it louder
    files = setup.config.store.file_count
    return [
        Finding(
            "ring-strands-messages",
            INFO,
            "journal-threshold",
            f"ring journal: {files - 1} messages left behind, one per file, refuse every enqueue",
            _ring_values(setup),
            "A message a selector skips, or one a client-ack consumer holds without acknowledging, pins its journal "
            "file the way a low-priority message does: the ring cannot reuse the file, and once the look-ahead reaches "
            "it, enqueues are refused (source: journal-threshold). `minibroker journal inspect DIR` shows which messages pin which files.",
            "if consumers use selectors or client acknowledgement, use the growing journal; " + _WORKAROUND,
            (_GROWING,),
        )
    ]


def ring_reserves_store(setup: Setup) -> list[Finding]:
    """Each destination's ring is counted whole against the store limit from its creation."""
    if not _ring(setup) or "system_usage.store_limit" in setup.unknown:
        return []
    store, limit = setup.config.store, setup.config.system_usage.store_limit
    each = store.file_count * store.file_size
    rings = limit // each
    room = -(-FEW_RINGS * each // _GB) * _GB
    if rings < 1:
        return []  # store-limit-below-journal-file says it louder
    return [
        Finding(
            "ring-reserves-store",
            WARNING if rings < FEW_RINGS else INFO,
            None,
            f"the store limit {human_size(limit)} holds the rings of {rings} destinations "
            f"({store.file_count} x {human_size(store.file_size)} = {human_size(each)} each)",
            (*_ring_values(setup), setup.show("system_usage.store_limit")),
            "The ring layout creates a destination's whole ring at its first persistent message and the store counts it "
            "at its full size from then on, as Qpid preallocates its journal: however little is written in it, the "
            f"store limit sees {human_size(each)} per destination. With {rings + 1} destinations the store is full "
            "while the rings hold a few megabytes of messages, and every persistent producer blocks "
            "(stat's diagnosis and the producers' ERROR say so).",
            f"give the store limit room for every persistent destination you expect ({FEW_RINGS:,} need "
            f"{human_size(room)}), make the rings smaller, or use the growing journal",
            (Change("system_usage.store_limit", room),),
        )
    ]
