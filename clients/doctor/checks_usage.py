"""Usage limits: the destination-limits source (destination memory limits), the temp-storage source (the temp
store) and the limits ActiveMQ itself complains about at start.

Each check takes a ``Setup`` and returns its findings; an option whose value
the file does not tell (``Setup.unknown``) is not checked.
"""

from __future__ import annotations

from .model import ERROR, INFO, WARNING, Change, Finding, PolicyRef, Setup, human_size, power_of_two_below, round_size

__all__ = [
    "temp_limit_below_temp_file",
    "memory_above_temp_limit",
    "queues_share_memory",
    "destination_limits_exceed_broker",
    "store_limit_below_journal_file",
    "memory_limit_too_small",
    "TINY_BROKER_MEMORY",
    "TINY_DESTINATION_MEMORY",
]

#: Below this, the broker's memory limit is "absurdly small".
TINY_BROKER_MEMORY = 1024**2
#: Below this, a destination's own memory limit is.
TINY_DESTINATION_MEMORY = 64 * 1024
_MB = 1024**2


def _known(setup: Setup, *keys: str) -> bool:
    return not any(k in setup.unknown for k in keys)


def _file_cursors(setup: Setup, kinds: tuple[str, ...] = ("queue", "topic")) -> list[PolicyRef]:
    """Policies whose pending messages swap to the temp store."""
    return [r for kind in kinds for r in setup.policies(kind) if r.entry.pending_cursor == "file"]


def _suggested_temp_limit(setup: Setup) -> int:
    """Several temp files, and no less than the memory a swap can move."""
    usage, store = setup.config.system_usage, setup.config.store
    return round_size(max(4 * store.temp_journal_max_file_length, usage.memory_limit), up=True)


# ---------------------------------------------------------------- the temp-storage source
def temp_limit_below_temp_file(setup: Setup) -> list[Finding]:
    usage, store = setup.config.system_usage, setup.config.store
    limit, file = usage.temp_limit, store.temp_journal_max_file_length
    if not _known(setup, "system_usage.temp_limit") or limit >= file:
        return []
    swappers = _file_cursors(setup, ("topic",)) or _file_cursors(setup, ("queue",))
    why = (
        f"A file cursor swaps pending messages to the temp store, which writes files of {human_size(file)} and never "
        f"deletes the current one: once swapping has happened temp usage stays at {file * 100 // max(limit, 1)}% or more "
        "of the limit even after consumers drained everything, so producer flow control never lets the producer go "
        "(source: temp-storage). ActiveMQ logs a temp limit below the temp file size as an ERROR at start."
    )
    if not swappers:
        why += " No policy uses the file cursor yet, so the trap is set but not sprung: it closes the day one does."
    return [
        Finding(
            "temp-limit-below-temp-file",
            ERROR if swappers else WARNING,
            "temp-storage",
            f"temp limit {human_size(limit)} is below the temp store's file size {human_size(file)}: "
            "producers can stay blocked forever once anything swaps to disk",
            (
                setup.show("system_usage.temp_limit"),
                setup.show("store.temp_journal_max_file_length"),
                *(setup.show_policy(r, "pending_cursor") for r in swappers[:2]),
            ),
            why,
            "raise the temp limit to several temp files (and at least the memory limit); "
            f"or make the temp files smaller than a quarter of the limit ({human_size(round_size(max(limit // 4, 1024)))})",
            (Change("system_usage.temp_limit", _suggested_temp_limit(setup)),),
        )
    ]


def memory_above_temp_limit(setup: Setup) -> list[Finding]:
    usage = setup.config.system_usage
    swappers = _file_cursors(setup, ("topic",))
    if not swappers or not _known(setup, "system_usage.temp_limit", "system_usage.memory_limit"):
        return []
    if usage.memory_limit <= usage.temp_limit:
        return []
    return [
        Finding(
            "memory-above-temp-limit",
            WARNING,
            "temp-storage",
            f"memory limit {human_size(usage.memory_limit)} is larger than the temp limit {human_size(usage.temp_limit)} "
            "while topic subscriptions swap to disk",
            (
                setup.show("system_usage.memory_limit"),
                setup.show("system_usage.temp_limit"),
                *(setup.show_policy(r, "pending_cursor") for r in swappers[:2]),
            ),
            "When memory reaches the high-water mark a file cursor moves a subscription's whole in-memory list to the temp "
            "store in one go; a subscription holding more than the temp limit leaves temp usage above 100% after the swap, "
            "and producers stay blocked until consumers drain it (source: temp-storage, side note 2).",
            "make the temp limit at least the memory limit",
            (Change("system_usage.temp_limit", _suggested_temp_limit(setup)),),
        )
    ]


# ---------------------------------------------------------------- the destination-limits source
def queues_share_memory(setup: Setup) -> list[Finding]:
    refs = setup.policies("queue")
    shared = [r for r in refs if r.entry.memory_limit == 0]
    if not shared:
        return []
    memory = setup.config.system_usage.memory_limit
    limited = [r for r in refs if r.entry.memory_limit > 0]
    legacy = [r for r in refs if r.entry.space_check == "legacy"]
    patterns = ", ".join(f'"{r.pattern}"' for r in shared)
    if limited:
        severity = INFO
        headline = (
            f"queues matching {patterns} have no memory limit of their own and share the broker's {human_size(memory)}"
        )
    else:
        severity = WARNING
        headline = f"no queue has a memory limit of its own: every queue shares the broker's {human_size(memory)}"
    if legacy:
        headline += ", with the legacy space check"
        rule = (
            "With the legacy space check (ActiveMQ 5.14 and earlier) a queue cursor stops paging in from the store as "
            "soon as the broker's memory is at the cursor high-water mark (70%): one consumer-less backlog holding 70% "
            "starves the consumers of every other queue, even queues whose own usage is 0%, while their "
            "messages sit in the store (source: destination-limits)."
        )
    else:
        rule = (
            "Each queue without a limit of its own may cache up to 70% of the broker's memory: two consumer-less or slow "
            "backlogs fill it to 100%, and then no other queue can page its messages in from the store: their "
            "consumers starve (source: destination-limits). That is ActiveMQ 5.15+; before 5.15 one backlog at 70% was enough."
        )
    suggested = power_of_two_below(memory // 10, 64 * 1024)
    return [
        Finding(
            "queues-share-memory",
            severity,
            "destination-limits",
            headline,
            (
                setup.show("system_usage.memory_limit"),
                *(setup.show_policy(r, "memory_limit") for r in shared[:3]),
                *(setup.show_policy(r, "space_check") for r in legacy[:1]),
            ),
            rule,
            "give queues a memory limit of their own, at least those that build backlogs (the source's cure)",
            tuple(Change("memory_limit", suggested, kind="queue", pattern=r.pattern) for r in shared),
        )
    ]


def destination_limits_exceed_broker(setup: Setup) -> list[Finding]:
    memory = setup.config.system_usage.memory_limit
    limited = [r for kind in ("queue", "topic") for r in setup.policies(kind) if r.entry.memory_limit > 0]
    total = sum(r.entry.memory_limit for r in limited)
    if not limited or not memory or not _known(setup, "system_usage.memory_limit"):
        return []  # a memory limit of 0 is memory_limit_too_small's error
    whole = [r for r in limited if r.entry.memory_limit >= memory]
    if total <= memory and not whole:
        return []
    if whole:
        headline = (
            f'the memory limit of {whole[0].kind} "{whole[0].pattern}" ({human_size(whole[0].entry.memory_limit)}) '
            f"is not below the broker's {human_size(memory)}"
        )
    else:
        headline = (
            f"destination memory limits add up to {human_size(total)}, more than the broker's {human_size(memory)}"
        )
    each = power_of_two_below(memory // (2 * len(limited)))
    return [
        Finding(
            "destination-limits-exceed-broker",
            WARNING,
            "destination-limits",
            headline,
            (setup.show("system_usage.memory_limit"), *(setup.show_policy(r, "memory_limit") for r in limited[:4])),
            "A destination's own limit protects the others only if the limits fit in the broker's memory together: "
            "otherwise backlogs on the limited destinations can still fill it and starve everyone else, as if there were "
            "no limits (source: destination-limits). A wildcard entry gives each matching destination its own limit, so the real total "
            "can be larger still.",
            f"lower the limits so that they add up to well under the broker's memory, e.g. {human_size(each)} each",
            tuple(Change("memory_limit", each, kind=r.kind, pattern=r.pattern) for r in limited),
        )
    ]


# ---------------------------------------------------------------- ActiveMQ's own checks
def store_limit_below_journal_file(setup: Setup) -> list[Finding]:
    config = setup.config
    store, limit = config.store, config.system_usage.store_limit
    if not config.broker.persistent or not _known(setup, "system_usage.store_limit", "store.journal_max_file_length"):
        return []
    keys: tuple[str, ...]
    if store.layout == "ring":
        needed, what, keys = (
            store.file_count * store.file_size,
            "one queue's ring journal",
            ("store.file_count", "store.file_size"),
        )
    else:
        needed, what, keys = store.journal_max_file_length, "one journal file", ("store.journal_max_file_length",)
    if limit >= needed:
        return []
    return [
        Finding(
            "store-limit-below-journal-file",
            ERROR,
            None,
            f"store limit {human_size(limit)} is below {what} ({human_size(needed)})",
            (setup.show("system_usage.store_limit"), *(setup.show(k) for k in keys)),
            f"The journal takes its space in whole files: {what} already fills the store limit, so persistent producers "
            "are blocked (or refused) at once and stay so. ActiveMQ logs a store limit below journalMaxFileLength as an "
            "ERROR at start.",
            "raise the store limit to many journal files",
            (Change("system_usage.store_limit", round_size(max(10 * needed, 1024**3), up=True)),),
        )
    ]


def memory_limit_too_small(setup: Setup) -> list[Finding]:
    memory = setup.config.system_usage.memory_limit
    out = []
    if memory == 0:
        out.append(
            Finding(
                "memory-limit-zero",
                ERROR,
                None,
                "the broker's memory limit is 0: it cannot hold a single message",
                (setup.show("system_usage.memory_limit"),),
                "Every message is charged to the memory usage (ActiveMQ: 1 KiB plus its size); with a limit of 0 the first "
                "send finds memory full and every producer blocks (or gets an ERROR with send_fail_if_no_space).",
                "set a real memory limit",
                (Change("system_usage.memory_limit", 64 * _MB),),
            )
        )
    elif memory < TINY_BROKER_MEMORY:
        out.append(
            Finding(
                "memory-limit-tiny",
                WARNING,
                None,
                f"the broker's memory limit {human_size(memory)} holds at most {memory // 1024} messages",
                (setup.show("system_usage.memory_limit"),),
                "Each message costs 1 KiB plus its size; flow control and the cursors' 70% high-water mark engage after a "
                "handful of messages, so producers block and consumers page in from the store almost all the time.",
                "give the broker megabytes of memory",
                (Change("system_usage.memory_limit", 64 * _MB),),
            )
        )
    for kind in ("queue", "topic"):
        for r in setup.policies(kind):
            if 0 < r.entry.memory_limit < TINY_DESTINATION_MEMORY:
                out.append(
                    Finding(
                        "memory-limit-tiny",
                        WARNING,
                        None,
                        f'the memory limit of {kind} "{r.pattern}" ({human_size(r.entry.memory_limit)}) holds at most '
                        f"{r.entry.memory_limit // 1024} messages",
                        (setup.show_policy(r, "memory_limit"),),
                        "Each message costs 1 KiB plus its size: the destination blocks its producers, or stops caching, "
                        "after a handful of messages.",
                        "give the destination at least a few hundred kilobytes",
                        (Change("memory_limit", 256 * 1024, kind=kind, pattern=r.pattern),),
                    )
                )
    return out
