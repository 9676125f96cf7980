"""The trace's Parquet form: JSON lines in, typed Parquet segments out (pyarrow).

Imported by the writer process when ``broker.trace_format`` asks for Parquet,
and by the tools that convert or read a trace (``clients.spark.synth``, the
in-process analysis); never by the broker's own process, and never by the
package's ``__init__``. The layout (a segments directory beside the trace,
hidden temporary names renamed when complete) is ``segments.py``'s.

Theory of operation: the writer makes the trace's JSON lines as it always
does (``encoding.py``); ``SegmentWriter.write`` takes the same text. Every
``ROW_GROUP_LINES`` lines, pyarrow's JSON reader (C++, with the explicit
schema below: nothing inferred) turns the text into columns, which are
appended as one row group to the open segment; after ``SEGMENT_EVENTS``
lines, or ``SEGMENT_SECONDS`` after its first line, the segment is closed and
renamed into view. So the Parquet form holds exactly the values of the JSON
lines, and costs the writer one C++ parse of its own output. pyarrow's JSON
reader has no map type: ``map<str,int>`` fields (``file_live``, on a few
journal events) are decoded with ``json`` from the lines that carry them.

The schema: one column per field of ``FIELDS`` (common fields first, the order
of ``clients.spark.schema.trace_schema``), all nullable, typed as the Spark
reader types them: ``str`` string, ``int`` int64, ``float`` double, ``bool``
boolean, ``map<str,int>`` map<string, int64>. A field an event does not have is
null. Compression: zstd (``COMPRESSION``).
"""

from __future__ import annotations

import io
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.json as pa_json
import pyarrow.parquet as pq

from .schema import COMMON, FIELDS, SCHEMA_VERSION
from .segments import clear_segments, segment_files, segment_name

__all__ = [
    "SCHEMA",
    "SEGMENT_EVENTS",
    "SEGMENT_SECONDS",
    "ROW_GROUP_LINES",
    "COMPRESSION",
    "SegmentWriter",
    "lines_to_table",
    "convert_file",
    "read_events",
    "count_rows",
    "footer_summary",
]

#: A segment is closed after this many lines (give or take one row group)...
SEGMENT_EVENTS = 1_000_000
#: ...or this many seconds after its first line, so that a slow trace shows up too.
SEGMENT_SECONDS = 60.0
#: Lines converted at once: one row group.
ROW_GROUP_LINES = 131_072
#: The codec: zstd reads as fast as snappy here and makes files about half the size.
COMPRESSION = "zstd"

_ARROW = {
    "str": pa.string(),
    "int": pa.int64(),
    "float": pa.float64(),
    "bool": pa.bool_(),
    "map<str,int>": pa.map_(pa.string(), pa.int64()),
}

#: The Parquet form's schema (see the module doc).
SCHEMA = pa.schema(
    [pa.field(n, _ARROW[FIELDS[n]]) for n in (*COMMON, *(n for n in FIELDS if n not in COMMON))],
    metadata={"minibroker.trace.schema_version": str(SCHEMA_VERSION)},
)
_MAPS = [f.name for f in SCHEMA if pa.types.is_map(f.type)]
_JSON_SCHEMA = pa.schema([f for f in SCHEMA if f.name not in _MAPS])
_PARSE = pa_json.ParseOptions(explicit_schema=_JSON_SCHEMA, unexpected_field_behavior="ignore")
_BLOCK = 4 << 20  # bytes per block of the JSON reader (threads parse blocks side by side)


def lines_to_table(data: bytes) -> pa.Table:
    """Whole JSON trace lines (each ending in a newline) -> a table with ``SCHEMA``.

    Fields the schema does not know are dropped (the contract's rule 3).
    """
    try:
        table = pa_json.read_json(
            io.BytesIO(data), read_options=pa_json.ReadOptions(block_size=_BLOCK), parse_options=_PARSE
        )
    except pa.ArrowInvalid:  # one line longer than a block: parse it all as one block
        table = pa_json.read_json(
            io.BytesIO(data), read_options=pa_json.ReadOptions(block_size=len(data) + 1), parse_options=_PARSE
        )
    columns = []
    for f in SCHEMA:
        if f.name in _MAPS:
            columns.append(_map_column(data, f.name, table.num_rows, f.type))
        else:
            columns.append(table.column(f.name))
    return pa.Table.from_arrays(columns, schema=SCHEMA)


def _map_column(data: bytes, name: str, rows: int, kind: pa.DataType) -> pa.Array:
    """The map field ``name`` of each line: decoded with json where the line has it."""
    key = f'"{name}":'.encode()
    if key not in data:
        return pa.nulls(rows, kind)
    values: list[Any] = []
    for line in data.splitlines():
        if not line.strip():
            continue
        value = json.loads(line).get(name) if key in line else None
        values.append(list(value.items()) if isinstance(value, dict) else None)
    return pa.array(values, type=kind)


class SegmentWriter:
    """Rolls a trace's Parquet segments in ``directory`` (created; an earlier trace's
    segments are removed): ``write`` takes JSON lines, ``poll`` closes a segment that
    has been open ``segment_seconds``, ``close`` writes what is left."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        segment_events: int = SEGMENT_EVENTS,
        segment_seconds: float = SEGMENT_SECONDS,
        group_lines: int = ROW_GROUP_LINES,
        compression: str = COMPRESSION,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)
        clear_segments(self.directory)
        self.segment_events = segment_events
        self.segment_seconds = segment_seconds
        self.group_lines = group_lines
        self.compression = compression
        self._clock = clock
        self._pending: list[bytes] = []
        self._pending_lines = 0
        self._opened: float | None = None  # when the open segment got its first line
        self._out: pq.ParquetWriter | None = None
        self._rows = 0  # in the open segment
        #: Segments completed (renamed into view) so far.
        self.segments = 0
        #: Rows in the completed segments.
        self.rows = 0

    def _temp(self) -> str:
        return os.path.join(self.directory, f".{segment_name(self.segments)}.tmp")

    def write(self, data: bytes, lines: int | None = None) -> None:
        """Take whole JSON lines (``lines`` of them, counted when not given)."""
        if not data:
            return
        if self._opened is None:
            self._opened = self._clock()
        self._pending.append(data)
        self._pending_lines += data.count(b"\n") if lines is None else lines
        if self._pending_lines >= self.group_lines:
            self._convert()

    def _convert(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending, self._pending_lines = [], 0
        table = lines_to_table(data)
        if self._out is None:
            self._out = pq.ParquetWriter(self._temp(), SCHEMA, compression=self.compression)
        self._out.write_table(table, row_group_size=max(1, table.num_rows))
        self._rows += table.num_rows
        if self._rows >= self.segment_events:
            self._roll()

    def _roll(self) -> None:
        if self._out is None:
            return
        self._out.close()
        self._out = None
        os.replace(self._temp(), os.path.join(self.directory, segment_name(self.segments)))
        self.segments += 1
        self.rows += self._rows
        self._rows = 0
        self._opened = self._clock() if self._pending else None

    def poll(self) -> None:
        """Close the open segment if its first line is ``segment_seconds`` old."""
        if self._opened is not None and self._clock() - self._opened >= self.segment_seconds:
            self._convert()
            self._roll()

    def close(self) -> None:
        """Convert what is buffered and close the last segment."""
        self._convert()
        self._roll()


def convert_file(
    source: str | os.PathLike[str], directory: str | os.PathLike[str], *, chunk: int = 16 << 20, **options: Any
) -> int:
    """Write the JSON-lines trace ``source`` as Parquet segments in ``directory``
    (``SegmentWriter``'s options); returns the rows written."""
    writer = SegmentWriter(directory, **options)
    with open(source, "rb") as f:
        rest = b""
        while True:
            block = f.read(chunk)
            if not block:
                break
            block = rest + block
            cut = block.rfind(b"\n") + 1
            rest = block[cut:]
            writer.write(block[:cut])
        if rest.strip():
            writer.write(rest + b"\n")
    writer.close()
    return writer.rows


def count_rows(directory: str | os.PathLike[str]) -> int:
    """Rows in a segments directory, from the files' footers."""
    return sum(pq.ParquetFile(p).metadata.num_rows for p in segment_files(directory))


def footer_summary(directory: str | os.PathLike[str]) -> dict[str, Any] | None:
    """What the segments' footers tell without reading a row: ``rows``, ``no_event``
    (rows whose ``event`` is null), ``t0`` and ``t1`` (the least and greatest ``ts``)
    and ``versions`` (the least and greatest ``v``); None when a footer lacks a statistic."""
    rows = no_event = 0
    t0: float | None = None
    t1: float | None = None
    v0: int | None = None
    v1: int | None = None
    index = {name: i for i, name in enumerate(SCHEMA.names)}
    for path in segment_files(directory):
        meta = pq.ParquetFile(path).metadata
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            rows += group.num_rows
            ts, v, event = (group.column(index[n]).statistics for n in ("ts", "v", "event"))
            if event is None or ts is None or v is None or not event.has_null_count:
                return None
            no_event += event.null_count
            if ts.has_min_max:
                t0 = ts.min if t0 is None else min(t0, ts.min)
                t1 = ts.max if t1 is None else max(t1, ts.max)
            if v.has_min_max:
                v0 = v.min if v0 is None else min(v0, v.min)
                v1 = v.max if v1 is None else max(v1, v.max)
    if t0 is not None:
        t0 += 0.0  # a zero minimum is stored as -0.0 (the Parquet rule for float statistics)
    return {"rows": rows, "no_event": no_event, "t0": t0, "t1": t1, "versions": (v0, v1)}


def read_events(directory: str | os.PathLike[str], columns: Sequence[str] | None = None) -> Iterator[dict[str, Any]]:
    """The events of a segments directory in order, as dicts shaped like decoded JSON
    lines: null fields left out, maps as dicts (``columns``: only those fields)."""
    for path in segment_files(directory):
        for batch in pq.ParquetFile(path).iter_batches(columns=list(columns) if columns else None):
            maps = [n for n in _MAPS if n in batch.schema.names]
            for row in batch.to_pylist():
                event = {k: v for k, v in row.items() if v is not None}
                for n in maps:
                    if n in event:
                        event[n] = dict(event[n])
                yield event
