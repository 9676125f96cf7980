"""The trace's schema: event names, their fields, one type per field, the version.

The trace is a contract between the broker (which writes it) and the Spark jobs
in ``clients/spark/`` (which read it). The contract is the table ``EVENTS``
below and its prose twin ``docs/trace-schema.md``; a test checks that the two
agree and that ``tests/data/sample-trace.jsonl`` satisfies both the writer and
the Spark reader.

Rules that keep the contract stable while events are added:

1. Every line carries ``v`` (the schema version), ``seq`` (its line number in
   the file, from 1), ``ts`` (the broker's clock in seconds: epoch seconds on a
   real server, virtual seconds under the virtual clock), ``event`` and
   ``broker``.
2. A field name has one type in every event (``FIELDS``). That is what lets a
   reader use one flat, explicit schema for all events.
3. Readers ignore fields and events they do not know. Adding an event or an
   optional field is therefore not a version change; renaming a field,
   changing its type or making an optional field required is.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["SCHEMA_VERSION", "COMMON", "FIELDS", "EVENTS", "EventSpec", "type_ok", "validate_event"]

SCHEMA_VERSION = 1

# --- the schema, as data -----------------------------------------------------

# Field name -> type. Types: "str", "int", "float" (an int is accepted),
# "bool", "map<str,int>". A field has the same type in every event.
FIELDS: dict[str, str] = {
    # common
    "v": "int",
    "seq": "int",
    "ts": "float",
    "event": "str",
    "broker": "str",
    # who
    "session": "str",
    "client_id": "str",
    "client": "str",
    "addr": "str",
    "version": "str",
    "heart_beat": "str",
    "reason": "str",
    # subscriptions
    "sub": "str",
    "dest": "str",
    "ack": "str",
    "prefetch": "int",
    "selector": "str",
    "durable": "str",
    "exclusive": "bool",
    # messages
    "msg": "str",
    "size": "int",
    "persistent": "bool",
    "priority": "int",
    "tx": "str",
    "cached": "bool",
    "redelivered": "bool",
    "redeliveries": "int",
    "mode": "str",
    "dlq": "str",
    "latency": "float",
    # counts and usage
    "count": "int",
    "bytes": "int",
    "pending": "int",
    "consumers": "int",
    "mem_pct": "int",
    "dest_mem_pct": "int",
    "store_pct": "int",
    "temp_pct": "int",
    "hwm": "int",
    "policy": "str",
    "usage": "str",
    "pct": "int",
    "waited": "float",
    "slow": "bool",
    "pending_bytes": "int",
    "idle_read": "float",
    "idle_write": "float",
    # journals
    "store": "str",
    "layout": "str",
    "file": "str",
    "prev": "str",
    "files": "int",
    "live": "int",
    "live_bytes": "int",
    "capacity": "int",
    "file_live": "map<str,int>",
    # errors
    "message": "str",
    "code": "str",
    "fatal": "bool",
}

COMMON: tuple[str, ...] = ("v", "seq", "ts", "event", "broker")


class EventSpec:
    """One event type: its required and optional fields (beyond ``COMMON``)."""

    __slots__ = ("name", "required", "optional", "side", "doc")

    def __init__(self, name: str, required: str, optional: str, side: str, doc: str) -> None:
        self.name = name
        self.required = tuple(required.split())
        self.optional = tuple(optional.split())
        self.side = side
        self.doc = doc

    def __repr__(self) -> str:
        return f"EventSpec({self.name!r}, required={self.required}, optional={self.optional})"


def _spec(name: str, required: str, optional: str, doc: str, side: str = "broker") -> EventSpec:
    return EventSpec(name, required, optional, side, doc)


# Event name -> spec. Order here is the order of docs/trace-schema.md.
EVENTS: dict[str, EventSpec] = {
    s.name: s
    for s in (
        _spec("connect", "session", "client_id addr version heart_beat client", "A STOMP session completed CONNECT."),
        _spec(
            "disconnect",
            "session reason",
            "client_id client",
            "A session ended (reason: client, eof, error, heartbeat, write_timeout, slow_consumer, shutdown).",
        ),
        _spec("subscribe", "session sub dest ack prefetch", "selector durable exclusive", "A SUBSCRIBE was accepted."),
        _spec("unsubscribe", "session sub dest", "reason", "A subscription ended (reason: client, disconnect, abort)."),
        _spec(
            "send", "session dest msg size persistent priority", "tx", "A SEND frame was received, before flow control."
        ),
        _spec(
            "enqueue",
            "dest msg size persistent priority cached",
            "session",
            "A message was accepted by a destination; cached: kept in the cursor's "
            "memory (true) or store-only (false).",
        ),
        _spec(
            "start",
            "",
            "",
            "The broker started: every queue's backlog is what the recover events that follow say (none: empty).",
        ),
        _spec(
            "recover",
            "dest count",
            "bytes",
            "At start-up the store held count messages for dest (store-only, not in memory).",
        ),
        _spec(
            "page_in",
            "dest count",
            "mem_pct dest_mem_pct",
            "The cursor loaded count messages from the store into memory.",
        ),
        _spec(
            "page_in_blocked",
            "dest pending mem_pct dest_mem_pct hwm",
            "policy consumers",
            "A page-in was refused for lack of memory; pending messages wait in the store.",
        ),
        _spec(
            "dispatch", "session sub dest msg size", "redelivered priority", "A MESSAGE was handed to a subscription."
        ),
        _spec(
            "ack",
            "session sub dest msg",
            "mode tx",
            "One message was acknowledged (a cumulative ACK, or auto mode, gives one event per message).",
        ),
        _spec("nack", "session sub dest msg", "tx", "One message was negatively acknowledged."),
        _spec(
            "redeliver",
            "dest msg redeliveries",
            "session sub reason",
            "A message went back to its destination for redelivery (reason: nack, rollback, closed).",
        ),
        _spec("expire", "dest msg", "", "A message expired."),
        _spec("dlq", "dest msg dlq reason", "", "A message was moved to a dead-letter queue."),
        _spec(
            "discard",
            "dest msg reason",
            "session sub",
            "A message was dropped (slow-consumer eviction, temp store full).",
        ),
        _spec(
            "usage",
            "mem_pct store_pct temp_pct",
            "dest dest_mem_pct",
            "A usage percent changed: broker-wide (no dest), or a destination's memory "
            "(dest and dest_mem_pct, with the broker-wide values of that moment).",
        ),
        _spec(
            "flow_block",
            "session dest usage pct",
            "msg",
            "Producer flow control started holding a producer (usage: memory, store, temp).",
        ),
        _spec("flow_unblock", "session dest usage waited", "pct", "A held producer was released after waited seconds."),
        _spec(
            "swap_out",
            "dest sub count temp_pct",
            "session bytes mem_pct",
            "A file cursor moved count messages from memory to the temp store.",
        ),
        _spec(
            "swap_in",
            "dest sub count temp_pct",
            "session bytes",
            "A file cursor read count messages back from the temp store.",
        ),
        _spec(
            "journal_roll",
            "store layout file files",
            "prev live file_live",
            "The journal moved on to file; prev was full and still held live enqueues.",
        ),
        _spec(
            "journal_full",
            "store layout file files live file_live",
            "dest live_bytes capacity",
            "An enqueue was refused: the journal has no reusable file (file is the one "
            "the look-ahead reached); live: live enqueues in the whole journal.",
        ),
        _spec(
            "journal_state",
            "store layout file files live file_live",
            "",
            "The journal's files and their live enqueues as the broker stopped (the state at the end).",
        ),
        _spec(
            "slow_consumer",
            "session sub dest slow pending",
            "prefetch",
            "A subscription was marked slow (slow=true) or no longer slow (slow=false).",
        ),
        _spec(
            "connection",
            "session pending_bytes pending idle_read idle_write",
            "client_id addr",
            "A periodic sample of one connection (the stalled socket): bytes queued for its socket, "
            "unacknowledged messages, seconds since the last read and the last write that drained.",
        ),
        _spec(
            "write_timeout",
            "session waited pending_bytes",
            "client_id addr",
            "A socket write was stuck for waited seconds; the session is closed.",
        ),
        _spec(
            "error",
            "message",
            "session client_id code dest fatal",
            "An ERROR frame was sent, or an internal error was logged.",
        ),
        _spec(
            "sent",
            "client dest msg size",
            "persistent priority session",
            "Client side (replay driver): a SEND was written.",
            side="client",
        ),
        _spec(
            "received",
            "client sub dest msg size",
            "redelivered latency session",
            "Client side: a MESSAGE was received.",
            side="client",
        ),
        _spec("acked", "client sub dest msg", "mode session", "Client side: an ACK was written.", side="client"),
    )
}


# --- validation (tests, labs and the Spark reader's checks; not the hot path) --


def type_ok(kind: str, value: Any) -> bool:
    """Whether ``value`` has the field type ``kind`` (``FIELDS``'s values)."""
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "map<str,int>":
        return isinstance(value, Mapping) and all(isinstance(k, str) and type_ok("int", v) for k, v in value.items())
    raise AssertionError(f"unknown field type {kind!r}")


def validate_event(event: Mapping[str, Any], *, strict: bool = True) -> list[str]:
    """Return the problems with one decoded event (an empty list when valid).

    ``strict`` also reports unknown events and fields, which readers would
    ignore; the broker's own output should have none.
    """
    problems: list[str] = []
    for name in COMMON:
        if event.get(name) is None:
            problems.append(f"missing {name}")
    if event.get("v") not in (None, SCHEMA_VERSION):
        problems.append(f"v is {event.get('v')!r}, expected {SCHEMA_VERSION}")
    spec = EVENTS.get(event.get("event"))  # type: ignore[arg-type]
    if spec is None:
        if strict:
            problems.append(f"unknown event {event.get('event')!r}")
        allowed: set[str] = set(FIELDS)
    else:
        for name in spec.required:
            if event.get(name) is None:
                problems.append(f"{spec.name}: missing {name}")
        allowed = set(COMMON) | set(spec.required) | set(spec.optional)
    for name, value in event.items():
        kind = FIELDS.get(name)
        if kind is None or name not in allowed:
            if strict:
                problems.append(f"unknown field {name!r}")
            continue
        if value is not None and not type_ok(kind, value):
            problems.append(f"{name}: expected {kind}, got {value!r}")
    return problems
