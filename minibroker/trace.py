"""The broker's trace: one JSON object per line, one event per line.

Theory of operation
-------------------
The trace is a contract between the broker (which writes it) and the Spark jobs
in ``clients/spark/`` (which read it). The contract is the table ``EVENTS``
below and its prose twin ``docs/trace-schema.md``; a test checks that the two
agree and that ``tests/data/sample-trace.jsonl`` satisfies both the writer and
the Spark reader.

Rules that keep the contract stable while later issues add events:

1. Every line carries ``v`` (the schema version), ``seq`` (its line number in
   the file, from 1), ``ts`` (the broker's clock in seconds: epoch seconds on a
   real server, virtual seconds under the virtual clock), ``event`` and
   ``broker``.
2. A field name has one type in every event (``FIELDS``). That is what lets a
   reader use one flat, explicit schema for all events.
3. Readers ignore fields and events they do not know. Adding an event or an
   optional field is therefore not a version change; renaming a field,
   changing its type or making an optional field required is.

Cost
----
``emit`` is on the broker's hot path, so it only appends ``(ts, event,
fields)`` to a list. Encoding (a prebuilt C JSON encoder) and writing happen
in ``flush``, which runs when the buffer holds ``buffer_events`` events, when
the server's periodic timer calls it, and on ``close``. ``seq`` is assigned at
flush time from the line count, which keeps ``emit`` to one clock call and one
append. A broker that wants to skip even building the keyword arguments checks
``trace.enabled`` first (False for ``NullTrace``). The events of every message
(send, enqueue, dispatch, auto ack) go through ``emit_fixed`` instead: a kind
number and a tuple of values, named only when encoded. Events that happen
together share a record: a send and its enqueue, a dispatch and its auto ack,
and a new queue message handed at once to a waiting consumer makes one record
for its four lines. The buffer is small (512 records): a batch that stays in
the CPU's cache costs the broker less than a large one, and the flush of one is
a marshal call and two small writes.

With ``offload=True`` (the server's choice) the JSON is made by a writer
process at idle priority, fed through a spool file (see ``_SpoolWriter``), so
the broker never waits for it; docs/trace-schema.md, "Cost", has what tracing
costs the broker's throughput and how it was measured.

This module imports only the standard library: the broker imports it.
"""

from __future__ import annotations

import io
import logging
import marshal
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from json import encoder as _json_encoder
from typing import Any, TextIO

__all__ = [
    "SCHEMA_VERSION",
    "COMMON",
    "FIELDS",
    "EVENTS",
    "EventSpec",
    "Trace",
    "NullTrace",
    "MemoryTrace",
    "validate_event",
    "dumps_events",
    "encode_line",
    "encode_batch",
    "expand",
    "SEND",
    "ENQUEUE",
    "DISPATCH",
    "DISPATCH_AUTO_ACK",
    "SEND_ENQUEUE",
    "SEND_ENQUEUE_DISPATCH",
    "SEND_ENQUEUE_DISPATCH_AUTO_ACK",
]

SCHEMA_VERSION = 1

log = logging.getLogger("minibroker.trace")

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
            "session sub",
            "A message went back to its destination for redelivery.",
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


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "map<str,int>":
        return isinstance(value, Mapping) and all(isinstance(k, str) and _type_ok("int", v) for k, v in value.items())
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
        if value is not None and not _type_ok(kind, value):
            problems.append(f"{name}: expected {kind}, got {value!r}")
    return problems


# --- writers ------------------------------------------------------------------

# A C encoder built once: compact separators, UTF-8 out, no circular check.
_c_make_encoder = getattr(_json_encoder, "c_make_encoder", None)
_encode = (
    _c_make_encoder(None, None, _json_encoder.encode_basestring, None, ":", ",", False, False, True)
    if _c_make_encoder is not None
    else None
)


def _encode_fields(fields: dict[str, Any]) -> str:
    """Encode a dict compactly; ``{...}`` with the leading brace removed."""
    if _encode is not None:
        return "".join(_encode(fields, 0))[1:]
    import json  # pragma: no cover - only without the C accelerator

    return json.dumps(fields, separators=(",", ":"), ensure_ascii=False)[1:]


def encode_line(seq: int, ts: float, event: str, broker_json: str, fields: dict[str, Any]) -> str:
    """One trace line, without the newline: common fields first, then ``fields``."""
    head = f'{{"v":{SCHEMA_VERSION},"seq":{seq},"ts":{ts!r},"event":"{event}","broker":{broker_json}'
    return head + ("," + _encode_fields(fields) if fields else "}")


# --- fixed-shape hot events ------------------------------------------------------
#
# The events every message makes (send, enqueue, dispatch and the ack of auto
# mode) are recorded as ``(ts, kind, values)``: a small int and a tuple in a
# fixed order instead of a dict of keyword arguments, which is what costs in
# the broker's process. The names are put back when the batch is encoded (in
# the writer process when offloaded), so the lines are exactly what ``emit``
# would have written. ``DISPATCH_AUTO_ACK`` is two lines: the dispatch, then the
# ack of auto mode, whose fields are the first four of the dispatch's. The
# broker holds a send back for a moment so that what usually follows at once
# joins it in one record: its enqueue (``SEND_ENQUEUE``), and the dispatch of
# that message to a waiting consumer (``SEND_ENQUEUE_DISPATCH``: one record, one
# timestamp, for the four lines a queue message in auto mode makes).

SEND = 1  #: (session, dest, msg, size, persistent, priority, tx or None)
ENQUEUE = 2  #: (dest, msg, size, cached, priority, persistent, session or None)
DISPATCH = 3  #: ((session, sub, dest), msg, size, redelivered, priority): a subscription keeps its triple
DISPATCH_AUTO_ACK = 4  #: as DISPATCH, then an ``ack`` line with ``mode: auto``
SEND_ENQUEUE = 5  #: as SEND plus cached: a ``send`` line, then the ``enqueue`` of that message
#: as SEND_ENQUEUE plus ((session, sub, dest) of the subscription, redelivered): then its ``dispatch``
SEND_ENQUEUE_DISPATCH = 6
SEND_ENQUEUE_DISPATCH_AUTO_ACK = 7  #: as SEND_ENQUEUE_DISPATCH, then the ``ack`` of auto mode
#: Lines a record of each kind makes beyond its first.
_EXTRA_LINES = (0, 0, 0, 0, 1, 1, 2, 3)

_FIXED: dict[int, tuple[tuple[str, tuple[str, ...], dict[str, Any] | None], ...]] = {
    SEND: (("send", ("session", "dest", "msg", "size", "persistent", "priority", "tx"), None),),
    ENQUEUE: (("enqueue", ("dest", "msg", "size", "cached", "priority", "persistent", "session"), None),),
    DISPATCH: (("dispatch", ("session", "sub", "dest", "msg", "size", "redelivered", "priority"), None),),
    DISPATCH_AUTO_ACK: (
        ("dispatch", ("session", "sub", "dest", "msg", "size", "redelivered", "priority"), None),
        ("ack", ("session", "sub", "dest", "msg"), {"mode": "auto"}),
    ),
}
_SEND_NAMES = ("session", "dest", "msg", "size", "persistent", "priority", "tx", "cached")


def expand(kind: int, values: tuple[Any, ...]) -> list[tuple[str, dict[str, Any]]]:
    """The ``(event, fields)`` lines of a fixed-shape event (None values left out)."""
    if kind == SEND_ENQUEUE_DISPATCH or kind == SEND_ENQUEUE_DISPATCH_AUTO_ACK:
        dispatch = (values[8], values[2], values[3], values[9], values[5])
        return expand(SEND_ENQUEUE, values[:8]) + expand(
            DISPATCH_AUTO_ACK if kind == SEND_ENQUEUE_DISPATCH_AUTO_ACK else DISPATCH, dispatch
        )
    if kind == SEND_ENQUEUE:
        named = dict(zip(_SEND_NAMES, values))
        enqueue = (
            named["dest"],
            named["msg"],
            named["size"],
            named["cached"],
            named["priority"],
            named["persistent"],
            named["session"],
        )
        return expand(SEND, values[:7]) + expand(ENQUEUE, enqueue)
    if kind == DISPATCH or kind == DISPATCH_AUTO_ACK:
        values = (*values[0], *values[1:])
    out = []
    for event, names, extra in _FIXED[kind]:
        fields = dict(zip(names, values))
        if None in values:
            fields = {k: v for k, v in fields.items() if v is not None}
        if extra:
            fields.update(extra)
        out.append((event, fields))
    return out


_str = _json_encoder.encode_basestring  # the C string encoder, as _encode uses
_BOOL = ("false", "true")
_V = SCHEMA_VERSION


def _fixed_lines(seq: int, ts: float, kind: int, v: tuple[Any, ...], broker_json: str) -> list[str]:
    """The lines of a fixed-shape record, formatted directly (the writer's hot path).

    Byte for byte what ``expand`` + ``encode_line`` give (a test holds them
    equal); about twice as fast, and a dispatch and its auto ack share the
    encoding of their common fields.
    """
    stamp = repr(ts)
    head = f'{{"v":{_V},"seq":{seq},"ts":{stamp},"event":"'
    if kind >= SEND_ENQUEUE_DISPATCH:
        ids, redelivered = v[8], v[9]
        dispatch_kind = DISPATCH_AUTO_ACK if kind == SEND_ENQUEUE_DISPATCH_AUTO_ACK else DISPATCH
        return _fixed_lines(seq, ts, SEND_ENQUEUE, v, broker_json) + _fixed_lines(
            seq + 2, ts, dispatch_kind, (ids, v[2], v[3], redelivered, v[5]), broker_json
        )
    if kind == SEND or kind == SEND_ENQUEUE:
        session, dest, msg, size, persistent, priority, tx = v[:7]
        tail = f',"tx":{_str(tx)}}}' if tx is not None else "}"
        session, dest, msg = _str(session), _str(dest), _str(msg)
        send = (
            f'{head}send","broker":{broker_json},"session":{session},"dest":{dest},'
            f'"msg":{msg},"size":{size},"persistent":{_BOOL[persistent]},"priority":{priority}{tail}'
        )
        if kind == SEND:
            return [send]
        return [
            send,
            f'{{"v":{_V},"seq":{seq + 1},"ts":{stamp},"event":"enqueue","broker":{broker_json},'
            f'"dest":{dest},"msg":{msg},"size":{size},"cached":{_BOOL[v[7]]},"priority":{priority},'
            f'"persistent":{_BOOL[persistent]},"session":{session}}}',
        ]
    if kind == ENQUEUE:
        dest, msg, size, cached, priority, persistent, session = v
        tail = f',"session":{_str(session)}}}' if session is not None else "}"
        return [
            f'{head}enqueue","broker":{broker_json},"dest":{_str(dest)},"msg":{_str(msg)},"size":{size},'
            f'"cached":{_BOOL[cached]},"priority":{priority},"persistent":{_BOOL[persistent]}{tail}'
        ]
    (session, sub, dest), msg, size, redelivered, priority = v
    ids = f'"broker":{broker_json},"session":{_str(session)},"sub":{_str(sub)},"dest":{_str(dest)},"msg":{_str(msg)}'
    dispatch = f'{head}dispatch",{ids},"size":{size},"redelivered":{_BOOL[redelivered]},"priority":{priority}}}'
    if kind == DISPATCH:
        return [dispatch]
    return [dispatch, f'{{"v":{_V},"seq":{seq + 1},"ts":{stamp},"event":"ack",{ids},"mode":"auto"}}']


def encode_batch(first_seq: int, batch: Iterable[tuple[float, Any, Any]], broker_json: str) -> str:
    """Trace lines for buffered events, numbered from ``first_seq``: ``(ts, event,
    fields)`` from ``emit``, ``(ts, kind, values)`` from ``emit_fixed``."""
    lines: list[str] = []
    seq = first_seq
    for ts, event, fields in batch:
        if type(event) is int:
            added = _fixed_lines(seq, ts, event, fields, broker_json)
            lines += added
            seq += len(added)
        else:
            lines.append(encode_line(seq, ts, event, broker_json, fields))
            seq += 1
    lines.append("")
    return "\n".join(lines)


class Trace:
    """A buffered JSON-lines trace writer.

    ``sink`` is a path (opened for writing, truncated: ``seq`` restarts at 1
    in every file) or an open text file. ``clock`` returns seconds. The buffer
    flushes itself when it holds ``buffer_events`` events; call ``flush()`` from
    a timer for timely output and ``close()`` at shutdown.

    ``offload=True`` (path sinks only) moves encoding and writing to a child
    process: ``flush`` only marshals the batch and appends it to a spool file
    beside the trace, which cuts the broker's cost per event about threefold.
    The child runs at low CPU priority (``writer_nice``) and, while the broker
    is busy (half a core or more), waits, unless more than ``lag_limit`` bytes
    of spool are waiting (0: it never waits). So under load the trace lags the
    broker; the spool (rotated every ``spool_segment_bytes``, each segment
    deleted once converted) holds the lag on disk, never in the broker's
    memory, and the broker never waits for the child. ``load_stat`` is the
    ``/proc/<pid>/stat`` file whose CPU time counts as the broker's (default:
    this process). The file is complete
    after ``close()``, which waits for the child to convert what is left.
    """

    enabled = True

    def __init__(
        self,
        sink: str | os.PathLike[str] | TextIO,
        clock: Callable[[], float],
        *,
        broker: str = "minibroker",
        buffer_events: int = 512,
        offload: bool = False,
        writer_nice: int = 19,
        lag_limit: int = 256 * 1024 * 1024,
        load_stat: str | None = None,
        spool_segment_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        if buffer_events < 1:
            raise ValueError("buffer_events must be at least 1")
        self._child: subprocess.Popen[bytes] | None = None
        self._spool: _SpoolWriter | None = None
        self._file: TextIO | None = None
        self._owns_file = False
        if offload:
            if not isinstance(sink, (str, os.PathLike)):
                raise ValueError("offload=True needs a path to write to")
            path = os.path.abspath(os.fspath(sink))
            self._spool = _SpoolWriter(path, spool_segment_bytes)
            # Run this file as a script (it imports only the standard library); -I keeps
            # the script's directory off sys.path, so no sibling module shadows the stdlib.
            self._child = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    os.path.abspath(__file__),
                    "--write",
                    path,
                    broker,
                    str(writer_nice),
                    str(lag_limit),
                    load_stat or f"/proc/{os.getpid()}/stat",
                ],
                stdin=subprocess.PIPE,
            )
            assert self._child.stdin is not None
            self._spool.doorbell = self._child.stdin.fileno()
            os.set_blocking(self._spool.doorbell, False)
        elif isinstance(sink, (str, os.PathLike)):
            self._file = open(sink, "w", encoding="utf-8")  # noqa: SIM115
            self._owns_file = True
        else:
            self._file = sink
        self._clock = clock
        self.broker = broker
        self._name = os.fspath(sink) if isinstance(sink, (str, os.PathLike)) else getattr(sink, "name", "(stream)")
        #: Why writing failed (tracing then stopped), or None.
        self.error: str | None = None
        self._broker_json = _json_encoder.encode_basestring(broker)
        self._limit = buffer_events
        self._buf: list[tuple[float, Any, Any]] = []
        self._extra_lines = 0  # lines beyond one per buffered entry (two-line and longer records)
        self._seq = 0
        self.closed = False

    def emit(self, event: str, **fields: Any) -> None:
        """Record one event now. Fields must be JSON-encodable scalars or dicts."""
        buf = self._buf
        buf.append((self._clock(), event, fields))
        if len(buf) >= self._limit:
            self.flush()

    def emit_fixed(self, kind: int, values: tuple[Any, ...]) -> None:
        """Record a fixed-shape hot event now (``SEND``, ``ENQUEUE``, ``DISPATCH`` and
        the combined kinds: see their comments for the order of ``values``)."""
        buf = self._buf
        buf.append((self._clock(), kind, values))
        self._extra_lines += _EXTRA_LINES[kind]
        if len(buf) >= self._limit:
            self.flush()

    def flush(self) -> None:
        """Encode and write the buffered events (or hand them to the writer process)."""
        buf = self._buf
        if not buf or self.closed:
            return
        self._buf = []
        if not self.enabled:  # writing failed earlier: what callers still emit is dropped
            self._extra_lines = 0
            return
        try:
            if self._spool is not None:
                self._spool.append(marshal.dumps(buf))
            else:
                assert self._file is not None
                self._file.write(encode_batch(self._seq + 1, buf, self._broker_json))
                self._file.flush()
        except OSError as exc:  # a full disk, a dead writer: the trace stops, the broker does not
            self._fail(exc)
            return
        self._seq += len(buf) + self._extra_lines
        self._extra_lines = 0

    def _fail(self, exc: OSError) -> None:
        self.enabled = False  # the broker checks this before building events
        self.error = f"{exc.strerror or exc}"
        self._buf = []
        self._extra_lines = 0
        log.error("trace %s: cannot write (%s); tracing stops here, the broker goes on", self._name, self.error)

    @property
    def written(self) -> int:
        """Events flushed so far (the last ``seq``)."""
        return self._seq

    def close(self) -> None:
        if self.closed:
            return
        self.flush()
        self.closed = True
        if self._child is not None:
            assert self._child.stdin is not None and self._spool is not None
            waiting = self._spool.on_disk()
            if waiting >= 16 * 1024 * 1024:
                log.info("trace %s: writing the last %d MB of trace before exit", self._name, waiting >> 20)
            try:
                self._spool.close()
                self._child.stdin.close()  # end of stream: the child converts the rest and exits
            except OSError as exc:
                self._fail(exc)
            if self._child.wait() != 0:
                log.error(
                    "trace %s: the writer process exited with status %d; the file may be incomplete",
                    self._name,
                    self._child.returncode,
                )
                self.error = self.error or f"writer exited with {self._child.returncode}"
        elif self._owns_file and self._file is not None:
            try:
                self._file.close()
            except OSError as exc:
                self._fail(exc)

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- the offload spool ----------------------------------------------------------
#
# Theory of operation: the broker appends each flushed batch to a spool file as
# an 8-byte length and a marshalled list, then writes one byte (a doorbell) to
# the child's stdin. The child sleeps on stdin; on a doorbell it converts every
# complete batch it finds in the spool, from where it stopped. Regular-file
# appends never block the broker on the child (a pipe would: it holds 64 KB),
# which is what lets the child run at low priority. The spool is cut into
# segments ``<trace>.spool.<k>``: a batch whose length is ``_NEXT_SEGMENT``
# says "go on in segment k+1" (created before the mark is written), and the
# child deletes a segment when it leaves it. EOF on stdin (the broker closed
# the trace, or died) means: convert what is left, delete the spool, exit.

_NEXT_SEGMENT = (1 << 64) - 1


def _segment_path(path: str, k: int) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.spool.{k}")


class _SpoolWriter:
    """The broker's side of the spool: appends batches, rings the doorbell."""

    def __init__(self, path: str, segment_bytes: int) -> None:
        self.path = path
        self.segment_bytes = segment_bytes
        self.doorbell = -1
        head, tail = os.path.split(path)
        stale = f".{tail}.spool."
        for name in os.listdir(head or "."):  # left by a writer that was killed
            if name.startswith(stale) and name[len(stale) :].isdigit():
                os.unlink(os.path.join(head, name))
        self._k = 0
        self._fd = self._open(0)
        self._size = 0

    def _open(self, k: int) -> int:
        return os.open(_segment_path(self.path, k), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def append(self, blob: bytes) -> None:
        if self._size >= self.segment_bytes:
            next_fd = self._open(self._k + 1)
            self._write(_NEXT_SEGMENT.to_bytes(8, "little"))
            os.close(self._fd)
            self._fd, self._k, self._size = next_fd, self._k + 1, 0
        self._write(len(blob).to_bytes(8, "little") + blob)
        self._size += 8 + len(blob)
        try:
            os.write(self.doorbell, b"\x01")
        except BlockingIOError:  # 64K doorbells unread: the child will find this batch anyway
            pass

    def on_disk(self) -> int:
        """Bytes of spool the writer has not deleted yet (an upper bound of its lag)."""
        total = 0
        for k in range(self._k + 1):
            try:
                total += os.stat(_segment_path(self.path, k)).st_size
            except FileNotFoundError:
                pass
        return total

    def close(self) -> None:
        os.close(self._fd)


#: The writer samples the broker's CPU over windows this long (seconds)...
_LOAD_WINDOW = 0.1
#: ...and calls it busy at this fraction of one core or more.
_BUSY_FRACTION = 0.5


class _BrokerLoad:
    """How busy the broker process is, from ``/proc/<pid>/stat`` (Linux).

    The writer defers its work while the broker uses half a core or more: on a
    small machine even an idle-priority writer slows the broker it shares the
    cores (and their caches) with. Where ``/proc`` is missing, never busy.
    """

    def __init__(self, stat_path: str) -> None:
        self._path = stat_path
        self._tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._last: tuple[float, float] | None = None
        self._busy = True  # until one whole window has been measured

    def _cpu(self) -> float | None:
        try:
            with open(self._path, "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return None
        return (int(fields[11]) + int(fields[12])) / self._tick  # utime + stime

    def busy(self) -> bool:
        cpu = self._cpu()
        if cpu is None:
            return False
        now = time.monotonic()
        if self._last is None:
            self._last = (now, cpu)
        elif now - self._last[0] >= _LOAD_WINDOW:
            then, before = self._last
            self._busy = (cpu - before) / (now - then) >= _BUSY_FRACTION
            self._last = (now, cpu)
        return self._busy


def _writer_main(path: str, broker: str, nice: int, lag_limit: int, load_stat: str) -> int:
    """The offload writer: spool batches (see above) -> JSON lines in ``path``.

    It converts while the broker is not busy (``_BrokerLoad``), or when more
    than ``lag_limit`` bytes of spool wait (0: never wait), and everything once
    the broker closes the trace or dies.
    """
    if nice:
        os.nice(nice)
    if nice >= 19 and hasattr(os, "SCHED_IDLE"):
        # Linux: run only when a CPU would otherwise idle (a waking broker preempts at once).
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    load = _BrokerLoad(load_stat) if lag_limit > 0 else None
    broker_json = _json_encoder.encode_basestring(broker)
    seq = 1
    k, offset = 0, 0
    fd = os.open(_segment_path(path, 0), os.O_RDONLY)

    def backlog() -> int:
        """Spool bytes not converted yet."""
        waiting = os.fstat(fd).st_size - offset
        later = k + 1
        while True:
            try:
                waiting += os.stat(_segment_path(path, later)).st_size
            except FileNotFoundError:
                return waiting
            later += 1

    def may_wait() -> bool:
        return load is not None and load.busy() and backlog() <= lag_limit

    with open(path, "w", encoding="utf-8") as out:

        def convert(finish: bool) -> None:
            nonlocal seq, k, offset, fd
            checked = time.monotonic()
            while True:
                if not finish and time.monotonic() - checked >= _LOAD_WINDOW / 2:
                    if may_wait():  # the broker got busy again: leave the rest for later
                        return
                    checked = time.monotonic()
                header = os.pread(fd, 8, offset)
                if len(header) < 8:
                    return
                size = int.from_bytes(header, "little")
                if size == _NEXT_SEGMENT:
                    os.close(fd)
                    os.unlink(_segment_path(path, k))
                    k, offset = k + 1, 0
                    fd = os.open(_segment_path(path, k), os.O_RDONLY)
                    continue
                blob = os.pread(fd, size, offset + 8)
                if len(blob) < size:  # the broker is still writing it; its doorbell follows
                    return
                offset += 8 + size
                text = encode_batch(seq, marshal.loads(blob), broker_json)
                out.write(text)
                seq += text.count("\n")  # one per line (JSON escapes newlines in strings); a pair is two

        while True:
            ready, _, _ = select.select([0], [], [], _LOAD_WINDOW)
            if ready and not os.read(0, 65536):  # EOF: the trace was closed, or the broker died
                convert(finish=True)
                break
            if not may_wait():
                convert(finish=False)
                out.flush()
    os.close(fd)
    os.unlink(_segment_path(path, k))
    return 0


class NullTrace:
    """A trace that records nothing; ``enabled`` is False so callers can skip work."""

    enabled = False
    closed = False
    written = 0

    def emit(self, event: str, **fields: Any) -> None:
        pass

    def emit_fixed(self, kind: int, values: tuple[Any, ...]) -> None:
        pass

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self) -> NullTrace:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class MemoryTrace:
    """A trace kept in memory as decoded dicts, for tests and labs.

    ``events(*names)`` returns the stamped events (all, or those named), in the
    same shape a reader gets from a file; ``dump(sink)`` writes them as JSON
    lines exactly as ``Trace`` would.
    """

    enabled = True
    closed = False

    def __init__(self, clock: Callable[[], float], *, broker: str = "minibroker") -> None:
        self._clock = clock
        self.broker = broker
        self._events: list[dict[str, Any]] = []

    def emit(self, event: str, **fields: Any) -> None:
        record = {
            "v": SCHEMA_VERSION,
            "seq": len(self._events) + 1,
            "ts": self._clock(),
            "event": event,
            "broker": self.broker,
        }
        record.update(fields)
        self._events.append(record)

    def emit_fixed(self, kind: int, values: tuple[Any, ...]) -> None:
        for event, fields in expand(kind, values):
            self.emit(event, **fields)

    def events(self, *names: str) -> list[dict[str, Any]]:
        if not names:
            return list(self._events)
        wanted = set(names)
        return [e for e in self._events if e["event"] in wanted]

    @property
    def written(self) -> int:
        return len(self._events)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        pass

    def dump(self, sink: str | os.PathLike[str] | TextIO) -> None:
        """Write the recorded events as a JSON-lines trace file, as ``Trace`` would."""
        text = dumps_events(self._events, broker=self.broker)
        if isinstance(sink, (str, os.PathLike)):
            with open(sink, "w", encoding="utf-8") as f:
                f.write(text)
        else:
            sink.write(text)

    def __enter__(self) -> MemoryTrace:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def dumps_events(events: Iterable[Mapping[str, Any]], *, broker: str = "minibroker") -> str:
    """Encode stamped events (dicts with ``ts`` and ``event``) as trace text.

    ``seq`` is renumbered from 1, ``broker`` taken from each event when present.
    Handy for writing hand-made traces in tests and labs.
    """
    out = io.StringIO()
    for seq, record in enumerate(events, 1):
        fields = {k: v for k, v in record.items() if k not in COMMON}
        name = _json_encoder.encode_basestring(record.get("broker", broker))
        out.write(encode_line(seq, record["ts"], record["event"], name, fields))
        out.write("\n")
    return out.getvalue()


if __name__ == "__main__":  # the offload writer process (see Trace)
    if len(sys.argv) != 7 or sys.argv[1] != "--write":
        sys.exit("usage: trace.py --write PATH BROKER NICE LAG_LIMIT LOAD_STAT  (started by Trace(offload=True))")
    sys.exit(_writer_main(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]))
