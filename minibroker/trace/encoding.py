"""Trace records and their JSON lines.

A record is what the recorder buffers: ``(ts, event, fields)`` for a named
event, or ``(ts, kind, values)`` for the fixed-shape events every message makes
(the kinds below). This module turns a batch of records into trace lines,
byte for byte the same whether the broker's process encodes them (a ``Trace``
without offload) or the writer process does. It imports only the standard
library and the schema: the writer process imports it.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Mapping
from json import encoder as _json_encoder
from typing import Any

from .schema import COMMON, SCHEMA_VERSION

__all__ = [
    "encode_line",
    "encode_batch",
    "dumps_events",
    "expand",
    "EXTRA_LINES",
    "SEND",
    "ENQUEUE",
    "DISPATCH",
    "DISPATCH_AUTO_ACK",
    "SEND_ENQUEUE",
    "SEND_ENQUEUE_DISPATCH",
    "SEND_ENQUEUE_DISPATCH_AUTO_ACK",
]

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
# recorder (``recorder.Recorder``) holds a send back for a moment so that what
# usually follows at once joins it in one record: its enqueue (``SEND_ENQUEUE``), and the dispatch of
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
EXTRA_LINES = (0, 0, 0, 0, 1, 1, 2, 3)

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
    if kind in (SEND_ENQUEUE_DISPATCH, SEND_ENQUEUE_DISPATCH_AUTO_ACK):
        dispatch = (values[8], values[2], values[3], values[9], values[5])
        return expand(SEND_ENQUEUE, values[:8]) + expand(
            DISPATCH_AUTO_ACK if kind == SEND_ENQUEUE_DISPATCH_AUTO_ACK else DISPATCH, dispatch
        )
    if kind == SEND_ENQUEUE:
        named = dict(zip(_SEND_NAMES, values, strict=False))
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
    if kind in (DISPATCH, DISPATCH_AUTO_ACK):
        values = (*values[0], *values[1:])
    out = []
    for event, names, extra in _FIXED[kind]:
        fields = dict(zip(names, values, strict=False))
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
    if kind in (SEND, SEND_ENQUEUE):
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
