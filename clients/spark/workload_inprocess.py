"""Expand a workload file into its action table in this process: numpy and pyarrow, no JVM.

``minibroker workload generate`` runs this engine on one machine (``--engine
auto``, the default, unless a ``--master``, spark-submit or a remote output
asks for Spark; ``--engine inprocess|spark`` chooses). It writes the same
table as the Spark job (``clients.spark.workload``), row for row and value for
value (a test holds the two equal), in the same layout: sorted Parquet part
files under ``actions.parquet/`` (and ``actions.jsonl/`` when asked), with
``summary.json`` beside them.

Theory of operation
-------------------
The plan is the Spark job's: control rows from ``workload_table.control_rows`` and,
for each producer client, rate segments cut into chunks. Each chunk becomes
numpy columns at once, with no per-row Python. What makes the values equal to
Spark's is the random draw: the Spark job draws ``u = (xxhash64(seed, salt,
client, k) >>> 11) / 2**53`` with Spark's ``xxhash64`` (XXH64 with seed 42,
chained column by column: each column's hash seeds the next). Here the first
three inputs are fixed for a client and a salt, so their chained hash is
computed once in Python (``_prefix``), and the last step, XXH64 of one 8-byte
``long`` (Spark's ``hashLong``), runs vectorized over the client's message
indices in unsigned 64-bit numpy arithmetic, which wraps as Java's ``long``
does. The arithmetic after the draw repeats the Spark expressions operation
for operation in IEEE doubles (times, sizes, choices, Box-Muller, Spark's
half-up ``round``), so the doubles are the same bits.

Chunks are gathered into part files of at most ``part_rows`` rows; each part is
sorted by ``(t, client, seq)`` (pyarrow) and written on its own, as a Spark
partition is, so memory stays bounded by one part whatever the table's size;
``clients.spark.actions`` merges the parts in time order.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import types as T

from clients.spark.workload_spec import Dist, ProducerGroup, Segment, Workload, chunk_plan
from clients.spark.workload_table import ACTION_SCHEMA, control_rows, remove_stale_formats, summarize

__all__ = ["ARROW_SCHEMA", "spark_xxhash64", "generate_inprocess", "part_tables"]


def _arrow_schema() -> pa.Schema:
    """``ACTION_SCHEMA`` in Arrow's types, column for column."""

    def arrow(kind: T.DataType) -> pa.DataType:
        if isinstance(kind, T.MapType):
            return pa.map_(arrow(kind.keyType), arrow(kind.valueType))
        simple = {
            T.DoubleType: pa.float64(),
            T.StringType: pa.string(),
            T.LongType: pa.int64(),
            T.IntegerType: pa.int32(),
            T.BooleanType: pa.bool_(),
        }
        return simple[type(kind)]

    return pa.schema([pa.field(f.name, arrow(f.dataType), f.nullable) for f in ACTION_SCHEMA.fields])


ARROW_SCHEMA = _arrow_schema()

# --- Spark's xxhash64 -----------------------------------------------------------------

_MASK = (1 << 64) - 1
_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
_SPARK_SEED = 42  # the seed of Spark's xxhash64 expression


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _MASK


def _fmix(h: int) -> int:
    h ^= h >> 33
    h = (h * _P2) & _MASK
    h ^= h >> 29
    h = (h * _P3) & _MASK
    return h ^ (h >> 32)


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _MASK, 31) * _P1) & _MASK


def _hash_int(value: int, seed: int) -> int:
    h = (seed + _P5 + 4) & _MASK
    h ^= ((value & 0xFFFFFFFF) * _P1) & _MASK
    return _fmix((_rotl(h, 23) * _P2 + _P3) & _MASK)


def _hash_long(value: int, seed: int) -> int:
    h = (seed + _P5 + 8) & _MASK
    h ^= (_rotl((value * _P2) & _MASK, 31) * _P1) & _MASK
    return _fmix((_rotl(h, 27) * _P1 + _P4) & _MASK)


def _hash_bytes(data: bytes, seed: int) -> int:
    """XXH64 of ``data``: Spark's ``hashUnsafeBytes`` (a string's UTF-8 bytes)."""
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _MASK, (seed + _P2) & _MASK, seed & _MASK, (seed - _P1) & _MASK]
        while i + 32 <= n:
            for lane in range(4):
                v[lane] = _round(v[lane], int.from_bytes(data[i : i + 8], "little"))
                i += 8
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _MASK
        for lane in v:
            h = ((h ^ _round(0, lane)) * _P1 + _P4) & _MASK
    else:
        h = (seed + _P5) & _MASK
    h = (h + n) & _MASK
    while i + 8 <= n:
        h ^= _round(0, int.from_bytes(data[i : i + 8], "little"))
        h = (_rotl(h, 27) * _P1 + _P4) & _MASK
        i += 8
    if i + 4 <= n:
        h ^= (int.from_bytes(data[i : i + 4], "little") * _P1) & _MASK
        h = (_rotl(h, 23) * _P2 + _P3) & _MASK
        i += 4
    while i < n:
        h ^= (data[i] * _P5) & _MASK
        h = (_rotl(h, 11) * _P1) & _MASK
        i += 1
    return _fmix(h)


def _prefix(seed: int, salt: str, client: str) -> int:
    """Spark's chained hash of ``(seed, salt, client)``: the seed of the last step."""
    h = _hash_int(seed, _SPARK_SEED) if -(2**31) <= seed < 2**31 else _hash_long(seed, _SPARK_SEED)
    h = _hash_bytes(salt.encode(), h)
    return _hash_bytes(client.encode(), h)


def _as_signed(h: int) -> int:
    return h - (1 << 64) if h >= 1 << 63 else h


def spark_xxhash64(seed: int, salt: str, client: str, k: int) -> int:
    """What Spark's ``xxhash64(lit(seed), lit(salt), lit(client), lit(k))`` returns
    for a long ``k`` (a signed 64-bit value)."""
    return _as_signed(_hash_long(k, _prefix(seed, salt, client)))


_U = {name: np.uint64(value) for name, value in (("p1", _P1), ("p2", _P2), ("p3", _P3), ("p4", _P4))}


def _vrotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint64(r)) | (x >> np.uint64(64 - r))


def _hash_longs(k: np.ndarray, seed: int) -> np.ndarray:
    """``_hash_long`` over an int64 array, as uint64 (numpy's unsigned arithmetic wraps)."""
    with np.errstate(over="ignore"):
        h = np.full(k.shape, (seed + _P5 + 8) & _MASK, dtype=np.uint64)
        h ^= _vrotl(k.astype(np.uint64) * _U["p2"], 31) * _U["p1"]
        h = _vrotl(h, 27) * _U["p1"] + _U["p4"]
        h ^= h >> np.uint64(33)
        h *= _U["p2"]
        h ^= h >> np.uint64(29)
        h *= _U["p3"]
        h ^= h >> np.uint64(32)
    return h


def _uniform(seed: int, salt: str, client: str, k: np.ndarray) -> np.ndarray:
    """The Spark job's ``_uniform``: the top 53 bits of the hash, in [0, 1)."""
    return (_hash_longs(k, _prefix(seed, salt, client)) >> np.uint64(11)).astype(np.float64) / float(2**53)


# --- one chunk of sends -------------------------------------------------------------


def _choice(u: np.ndarray, dist: Dist) -> np.ndarray:
    """Index into ``dist.values``: the first whose cumulative weight exceeds ``u``."""
    total, acc, bounds = sum(dist.weights), 0.0, []
    for weight in dist.weights[:-1]:
        acc += weight / total
        bounds.append(acc)
    return np.searchsorted(np.array(bounds, dtype=np.float64), u, side="right")


def _half_up(x: np.ndarray) -> np.ndarray:
    """Spark's ``round(x)`` of a double (HALF_UP), exact: ``x - floor(x)`` is."""
    floor = np.floor(x)
    return floor + ((x - floor) >= 0.5)


def _dist(dist: Dist, draw: Any, n: int, dtype: type) -> np.ndarray:
    if dist.kind == "fixed":
        return np.full(n, dist.value, dtype=dtype)
    u = draw("")
    if dist.kind == "uniform":
        return (dist.lo + np.floor(u * (dist.hi - dist.lo + 1))).astype(dtype)
    if dist.kind == "choice":
        return np.array(dist.values)[_choice(u, dist)].astype(dtype)
    if dist.kind == "lognormal":  # Box-Muller, as the Spark job
        u1 = np.maximum(u, 1e-300)
        z = np.sqrt(-2.0 * np.log(u1)) * np.cos((2 * math.pi) * draw("/2"))
        value = _half_up(dist.median * np.exp(dist.sigma * z))
        return np.minimum(np.maximum(value, dist.lo), dist.hi).astype(dtype)
    raise AssertionError(dist.kind)


def _sends(g: ProducerGroup, seed: int, segment: Segment, j0: int, n: int) -> dict[str, Any]:
    """The send rows of the segment's messages ``j0`` to ``j0 + n - 1``."""
    client, a, b, rate, offset = segment.client, segment.start, segment.stop, segment.rate, segment.offset
    j = np.arange(j0, j0 + n, dtype=np.int64)
    k = j + segment.first  # the client's message index

    def draw(salt: str) -> Any:
        return lambda suffix: _uniform(seed, salt + suffix, client, k)

    if g.arrival == "even":
        t = a + (j.astype(np.float64) + offset) / rate
    else:
        t = a + (b - a) * draw(g.name + "/t")("")
    if g.persistent in (0.0, 1.0):
        persistent = np.full(n, g.persistent == 1.0)
    else:
        persistent = draw(g.name + "/persistent")("") < g.persistent
    headers = None
    if g.headers:  # every row maps the same names: keys and values as dictionary indices
        words: list[str] = []
        columns = []
        for name, dist in g.headers.items():
            if dist.kind == "fixed":
                columns.append(np.full(n, len(words), dtype=np.int32))
                words.append(str(dist.value))
            else:
                columns.append(_choice(draw(f"{g.name}/h/{name}")(""), dist).astype(np.int32) + len(words))
                words.extend(str(v) for v in dist.values)
        m = len(columns)
        keys = _repeat(list(g.headers), np.tile(np.arange(m, dtype=np.int32), n))
        items = _repeat(words, np.stack(columns, axis=1).reshape(-1))
        headers = pa.MapArray.from_arrays(pa.array(np.arange(0, n * m + 1, m, dtype=np.int32)), keys, items)
    return {
        "t": t,
        "client": (client, n),
        "seq": k + 1,
        "action": ("send", n),
        "group": (g.name, n),
        "dest": (g.dest, n),
        "size": _dist(g.size, draw(g.name + "/size"), n, np.int64),
        "priority": _dist(g.priority, draw(g.name + "/priority"), n, np.int32),
        "persistent": persistent,
        "headers": headers,
    }


def _repeat(words: list[str], indices: np.ndarray) -> pa.Array:
    """A string array of ``words[i]`` for each index, built from a dictionary."""
    return pa.DictionaryArray.from_arrays(pa.array(indices), pa.array(words, type=pa.string())).cast(pa.string())


def _column(name: str, value: Any, n: int) -> pa.Array:
    kind = ARROW_SCHEMA.field(name).type
    if value is None:
        return pa.nulls(n, kind)
    if isinstance(value, tuple):  # one string, repeated
        return _repeat([value[0]], np.zeros(n, dtype=np.int32))
    if isinstance(value, pa.Array):
        return value
    return pa.array(value, type=kind)


def _table(parts: list[dict[str, Any]]) -> pa.Table:
    tables = []
    for cols in parts:
        n = len(cols["t"])
        tables.append(
            pa.Table.from_arrays([_column(f.name, cols.get(f.name), n) for f in ARROW_SCHEMA], schema=ARROW_SCHEMA)
        )
    return pa.concat_tables(tables)


def part_tables(workload: Workload, *, part_rows: int = 1_000_000, chunk: int = 100_000) -> Iterator[pa.Table]:
    """The action table as sorted parts: the control rows, then sends, at most
    ``part_rows`` rows a part (a chunk is never split)."""
    control = control_rows(workload)
    if control:
        yield pa.Table.from_pylist(control, schema=ARROW_SCHEMA).sort_by(_ORDER)
    batch: list[dict[str, Any]] = []
    rows = 0
    for gidx, segment, j0, n in chunk_plan(workload, chunk):
        if batch and rows + n > part_rows:
            yield _table(batch).sort_by(_ORDER)
            batch, rows = [], 0
        batch.append(_sends(workload.producers[gidx], workload.seed, segment, j0, n))
        rows += n
    if batch:
        yield _table(batch).sort_by(_ORDER)


_ORDER = [("t", "ascending"), ("client", "ascending"), ("seq", "ascending")]


def _write_jsonl(table: pa.Table, path: Path) -> None:
    """One part as JSON lines, null fields left out (as Spark's JSON writer does)."""
    with open(path, "w", encoding="utf-8") as f:
        for batch in table.to_batches(max_chunksize=65_536):
            for row in batch.to_pylist():
                if row["headers"] is not None:
                    row["headers"] = dict(row["headers"])
                f.write(json.dumps({k: v for k, v in row.items() if v is not None}, separators=(",", ":")) + "\n")


def generate_inprocess(
    workload: Workload,
    out: str | Path,
    *,
    formats: tuple[str, ...] = ("parquet",),
    part_rows: int = 1_000_000,
    chunk: int = 100_000,
) -> dict[str, Any]:
    """Write the sorted action table under ``out`` without Spark; return the summary."""
    out = Path(str(out).removeprefix("file:"))
    dirs = {name: out / f"actions.{name}" for name in formats}
    for directory in dirs.values():
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
    remove_stale_formats(out, formats)
    for i, table in enumerate(part_tables(workload, part_rows=part_rows, chunk=chunk)):
        if "parquet" in formats:
            pq.write_table(table, dirs["parquet"] / f"part-{i:05d}.parquet")
        if "jsonl" in formats:
            _write_jsonl(table, dirs["jsonl"] / f"part-{i:05d}.json")
    summary = summarize(workload)
    summary["formats"] = list(formats)
    summary["engine"] = "inprocess"
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary
