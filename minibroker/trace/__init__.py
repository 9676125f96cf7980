"""The broker's trace: one JSON object per line, one event per line.

The package, one job per module, lowest first (each imports only the standard
library and the modules above it, and ``parquet`` pyarrow; nothing of the broker):

- ``schema``: the contract with the readers: event names, their fields, one
  type per field, the schema version, and ``validate_event``.
- ``encoding``: records (a named event, or a fixed-shape event of a message)
  and the JSON lines they make, the same in any process.
- ``spool``: the broker's side of an offloaded trace: the spool file of
  marshalled batches and the writer process it feeds.
- ``segments``: where a trace's Parquet form lives (the twin directory
  ``<trace>.parquet/`` and its segment names); standard library only.
- ``writer``: that writer process's work, spool in, trace file out (JSON
  lines, Parquet segments, or both).
- ``parquet``: the Parquet form (pyarrow): JSON lines in, rolling segments
  out, and their readers. Imported by the writer process when asked for
  Parquet and by tools, never by the broker's process nor by this package.
- ``recorder``: what the broker and the replay driver call. ``Recorder`` takes
  the broker's facts, one method per fact, and merges those that come
  together into one record; ``Trace`` (a buffered file writer, offloaded or
  not), ``MemoryTrace`` and ``NullTrace`` are where its records go.
- ``run_writer``: the writer process's entry point, run as
  ``python -m minibroker.trace.run_writer``; the package never imports it.

The names callers use are here.
"""

from __future__ import annotations

from .encoding import (
    DISPATCH,
    DISPATCH_AUTO_ACK,
    ENQUEUE,
    SEND,
    SEND_ENQUEUE,
    SEND_ENQUEUE_DISPATCH,
    SEND_ENQUEUE_DISPATCH_AUTO_ACK,
    dumps_events,
    encode_batch,
    encode_line,
    expand,
)
from .recorder import MemoryTrace, NullTrace, Recorder, Trace
from .schema import COMMON, EVENTS, FIELDS, SCHEMA_VERSION, EventSpec, type_ok, validate_event
from .writer import LOAD_WINDOW

#: The writer process's load window (seconds), by the name tests know it.
_LOAD_WINDOW = LOAD_WINDOW

__all__ = [
    "SCHEMA_VERSION",
    "COMMON",
    "FIELDS",
    "EVENTS",
    "EventSpec",
    "Recorder",
    "Trace",
    "NullTrace",
    "MemoryTrace",
    "type_ok",
    "LOAD_WINDOW",
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
