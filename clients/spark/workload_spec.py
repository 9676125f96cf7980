"""Workload files (TOML): parse, validate and plan, in pure Python.

The format is documented in ``docs/workloads.md``. This module knows nothing
of Spark: it turns a file into groups of clients and, for each producer
client, the piecewise-constant rate segments whose messages the Spark job
(``clients.spark.workload``) expands row by row. The CLI and the replay
driver can use it to check a file without starting a JVM.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

__all__ = [
    "WorkloadError",
    "Dist",
    "Phase",
    "ProducerGroup",
    "ConsumerGroup",
    "Workload",
    "Segment",
    "load_workload",
    "parse_workload",
    "producer_segments",
    "send_counts",
    "ACK_MODES",
]

ACK_MODES = ("auto", "client", "client-individual")
ARRIVALS = ("even", "random")


class WorkloadError(ValueError):
    """The workload file is not valid; the message names the place."""


@dataclass(frozen=True)
class Dist:
    """A value distribution: fixed, uniform (inclusive ints), choice, lognormal."""

    kind: str
    value: Any = None  # fixed
    lo: float = 0  # uniform; lognormal clamp
    hi: float = 0
    values: tuple[Any, ...] = ()  # choice
    weights: tuple[float, ...] = ()
    median: float = 0.0  # lognormal
    sigma: float = 0.0


@dataclass(frozen=True)
class Phase:
    start: float
    stop: float
    rate: float | None = None  # producers: messages/s per client (0 pauses)
    process: float | None = None  # consumers: seconds per message


@dataclass(frozen=True)
class ProducerGroup:
    name: str
    count: int
    dest: str
    rate: float
    start: float
    stop: float
    messages: int | None
    arrival: str
    size: Dist
    priority: Dist
    persistent: float  # fraction of messages sent persistent, 0..1
    headers: dict[str, Dist]
    phases: tuple[Phase, ...]
    client_id: bool

    def clients(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.count)]


@dataclass(frozen=True)
class ConsumerGroup:
    name: str
    count: int
    dest: str
    start: float
    stop: float
    ack: str
    prefetch: int | None
    selector: str | None
    process: float
    headers: dict[str, str]
    durable: str | None
    phases: tuple[Phase, ...]
    client_id: bool

    def clients(self) -> list[str]:
        return [f"{self.name}-{i}" for i in range(self.count)]


@dataclass(frozen=True)
class Workload:
    name: str
    seed: int
    duration: float
    destinations: tuple[str, ...]
    producers: tuple[ProducerGroup, ...] = ()
    consumers: tuple[ConsumerGroup, ...] = ()
    scale: float = 1.0
    source: str = ""

    def groups(self) -> list[ProducerGroup | ConsumerGroup]:
        return [*self.producers, *self.consumers]


@dataclass(frozen=True)
class Segment:
    """Messages of one producer client at a constant rate in ``[start, stop)``.

    ``first`` is the client's message index of the segment's first message;
    ``offset`` staggers the clients of a group within one message interval.
    """

    client: str
    start: float
    stop: float
    rate: float
    first: int
    count: int
    offset: float = field(default=0.0)

    def time_of(self, j: int) -> float:
        """The even-arrival time of the segment's j-th message."""
        return self.start + (j + self.offset) / self.rate


# --- parsing --------------------------------------------------------------------

_TOP = {"workload", "destinations", "producers", "consumers"}
_WORKLOAD = {"name", "seed", "duration"}
_PRODUCER = {
    "name",
    "count",
    "dest",
    "rate",
    "start",
    "stop",
    "messages",
    "arrival",
    "size",
    "priority",
    "persistent",
    "headers",
    "phases",
    "client_id",
}
_CONSUMER = {
    "name",
    "count",
    "dest",
    "start",
    "stop",
    "ack",
    "prefetch",
    "selector",
    "process",
    "rate",
    "headers",
    "durable",
    "phases",
    "client_id",
}


def _check_keys(where: str, table: Mapping[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise WorkloadError(f"{where}: unknown key(s) {', '.join(unknown)}")


def _number(where: str, value: Any, *, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise WorkloadError(f"{where}: expected a number, got {value!r}")
    if value < minimum:
        raise WorkloadError(f"{where}: must be at least {minimum}, got {value!r}")
    return float(value)


def _int(where: str, value: Any, *, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkloadError(f"{where}: expected an integer, got {value!r}")
    if value < minimum:
        raise WorkloadError(f"{where}: must be at least {minimum}, got {value!r}")
    return value


def parse_dist(where: str, spec: Any, *, integer: bool = True) -> Dist:
    """A scalar (fixed) or a table with ``dist`` = uniform | choice | lognormal."""
    if not isinstance(spec, Mapping):
        if integer:
            return Dist("fixed", value=_int(where, spec))
        if not isinstance(spec, (str, int, float, bool)):
            raise WorkloadError(f"{where}: expected a scalar or a distribution table")
        return Dist("fixed", value=spec)
    kind = spec.get("dist")
    if kind == "uniform" and integer:
        _check_keys(where, spec, {"dist", "min", "max"})
        lo, hi = _int(f"{where}.min", spec.get("min")), _int(f"{where}.max", spec.get("max"))
        if hi < lo:
            raise WorkloadError(f"{where}: max < min")
        return Dist("uniform", lo=lo, hi=hi)
    if kind == "choice":
        _check_keys(where, spec, {"dist", "values", "weights"})
        values = spec.get("values")
        if not isinstance(values, list) or not values:
            raise WorkloadError(f"{where}.values: expected a non-empty list")
        values = [_int(f"{where}.values", v) if integer else v for v in values]
        weights = spec.get("weights", [1] * len(values))
        if not isinstance(weights, list) or len(weights) != len(values):
            raise WorkloadError(f"{where}.weights: expected one weight per value")
        weights = [_number(f"{where}.weights", w) for w in weights]
        if sum(weights) <= 0:
            raise WorkloadError(f"{where}.weights: must not all be zero")
        return Dist("choice", values=tuple(values), weights=tuple(weights))
    if kind == "lognormal" and integer:
        _check_keys(where, spec, {"dist", "median", "sigma", "min", "max"})
        lo = _int(f"{where}.min", spec.get("min", 0))
        hi = _int(f"{where}.max", spec.get("max", 2**31 - 1))
        return Dist(
            "lognormal",
            median=_number(f"{where}.median", spec.get("median"), minimum=1),
            sigma=_number(f"{where}.sigma", spec.get("sigma")),
            lo=lo,
            hi=hi,
        )
    allowed = "uniform, choice, lognormal" if integer else "choice"
    raise WorkloadError(f"{where}: dist must be one of {allowed}, got {kind!r}")


def _phases(where: str, raw: Any, start: float, stop: float, key: str) -> tuple[Phase, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise WorkloadError(f"{where}: expected an array of tables ([[...phases]])")
    phases = []
    for i, p in enumerate(raw):
        w = f"{where}[{i}]"
        if not isinstance(p, Mapping):
            raise WorkloadError(f"{w}: expected a table")
        keys = {"start", "stop", key} | ({"rate"} if key == "process" else set())
        _check_keys(w, p, keys)
        a, b = _number(f"{w}.start", p.get("start")), _number(f"{w}.stop", p.get("stop"))
        if not start <= a < b <= stop:
            raise WorkloadError(f"{w}: needs start < stop within the group's [{start}, {stop}]")
        if key == "rate":
            phases.append(Phase(a, b, rate=_number(f"{w}.rate", p.get("rate"))))
        else:
            phases.append(Phase(a, b, process=_process(w, p)))
    phases.sort(key=lambda p: p.start)
    for x, y in pairwise(phases):
        if y.start < x.stop:
            raise WorkloadError(f"{where}: phases overlap at {y.start}")
    return tuple(phases)


def _process(where: str, table: Mapping[str, Any], default: float = 0.0) -> float:
    if "process" in table and "rate" in table:
        raise WorkloadError(f"{where}: give process or rate, not both")
    if "rate" in table:
        rate = _number(f"{where}.rate", table["rate"])
        if rate <= 0:
            raise WorkloadError(f"{where}.rate: must be > 0 (use a long process time to stall)")
        return 1.0 / rate
    return _number(f"{where}.process", table.get("process", default))


def _common(where: str, g: Mapping[str, Any], duration: float | None, scale: float):
    name = g.get("name")
    if not isinstance(name, str) or not name or any(c in name for c in " \t\n\"'"):
        raise WorkloadError(f"{where}.name: expected a name without spaces or quotes")
    dest = g.get("dest")
    if not isinstance(dest, str) or not dest.startswith(("/queue/", "/topic/")):
        raise WorkloadError(f"{where}.dest: expected /queue/NAME or /topic/NAME, got {dest!r}")
    count = max(1, round(_int(f"{where}.count", g.get("count", 1), minimum=1) * scale))
    start = _number(f"{where}.start", g.get("start", 0.0))
    stop_raw = g.get("stop", duration)
    if stop_raw is None:
        raise WorkloadError(f"{where}.stop: needed when [workload] has no duration")
    stop = _number(f"{where}.stop", stop_raw)
    if stop <= start:
        raise WorkloadError(f"{where}: stop must be after start")
    client_id = g.get("client_id", False)
    if not isinstance(client_id, bool):
        raise WorkloadError(f"{where}.client_id: expected true or false")
    return name, dest, count, start, stop, client_id


def _str_or_none(where: str, value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise WorkloadError(f"{where}: expected a string")
    return value


def parse_workload(doc: Mapping[str, Any], *, scale: float = 1.0, source: str = "") -> Workload:
    """Validate a decoded TOML document; ``scale`` multiplies every group's count."""
    if scale <= 0:
        raise WorkloadError("scale must be > 0")
    _check_keys("workload file", doc, _TOP)
    head = doc.get("workload", {})
    _check_keys("[workload]", head, _WORKLOAD)
    name = head.get("name", Path(source).stem if source else "workload")
    seed = _int("[workload].seed", head.get("seed", 0))
    duration = head.get("duration")
    if duration is not None:
        duration = _number("[workload].duration", duration)

    producers: list[ProducerGroup] = []
    for i, g in enumerate(doc.get("producers", [])):
        where = f"producers[{i}]"
        _check_keys(where, g, _PRODUCER)
        gname, dest, count, start, stop, client_id = _common(where, g, duration, scale)
        arrival = g.get("arrival", "even")
        if arrival not in ARRIVALS:
            raise WorkloadError(f"{where}.arrival: expected one of {ARRIVALS}")
        persistent = g.get("persistent", False)
        if isinstance(persistent, bool):
            persistent = float(persistent)
        else:
            persistent = _number(f"{where}.persistent", persistent)
            if persistent > 1:
                raise WorkloadError(f"{where}.persistent: a fraction must be within 0..1")
        messages = g.get("messages")
        headers = g.get("headers", {})
        if not isinstance(headers, Mapping):
            raise WorkloadError(f"{where}.headers: expected a table")
        producers.append(
            ProducerGroup(
                name=gname,
                count=count,
                dest=dest,
                start=start,
                stop=stop,
                client_id=client_id,
                rate=_number(f"{where}.rate", g.get("rate")),
                messages=None if messages is None else _int(f"{where}.messages", messages),
                arrival=arrival,
                size=parse_dist(f"{where}.size", g.get("size", 1024)),
                priority=parse_dist(f"{where}.priority", g.get("priority", 4)),
                persistent=persistent,
                headers={str(k): parse_dist(f"{where}.headers.{k}", v, integer=False) for k, v in headers.items()},
                phases=_phases(f"{where}.phases", g.get("phases"), start, stop, "rate"),
            )
        )

    consumers: list[ConsumerGroup] = []
    for i, g in enumerate(doc.get("consumers", [])):
        where = f"consumers[{i}]"
        _check_keys(where, g, _CONSUMER)
        gname, dest, count, start, stop, client_id = _common(where, g, duration, scale)
        ack = g.get("ack", "auto")
        if ack not in ACK_MODES:
            raise WorkloadError(f"{where}.ack: expected one of {ACK_MODES}")
        prefetch = g.get("prefetch")
        headers = g.get("headers", {})
        if not isinstance(headers, Mapping):
            raise WorkloadError(f"{where}.headers: expected a table")
        durable = _str_or_none(f"{where}.durable", g.get("durable"))
        consumers.append(
            ConsumerGroup(
                name=gname,
                count=count,
                dest=dest,
                start=start,
                stop=stop,
                client_id=client_id or durable is not None,
                ack=ack,
                prefetch=None if prefetch is None else _int(f"{where}.prefetch", prefetch, minimum=1),
                selector=_str_or_none(f"{where}.selector", g.get("selector")),
                process=_process(where, g),
                headers={str(k): str(v) for k, v in headers.items()},
                durable=durable,
                phases=_phases(f"{where}.phases", g.get("phases"), start, stop, "process"),
            )
        )

    groups: list[ProducerGroup | ConsumerGroup] = [*producers, *consumers]
    if not groups:
        raise WorkloadError("workload file: no producers and no consumers")
    names = [g.name for g in groups]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise WorkloadError(f"group names must be unique: {', '.join(dupes)}")
    declared = []
    for i, d in enumerate(doc.get("destinations", [])):
        _check_keys(f"destinations[{i}]", d, {"name"})
        declared.append(d.get("name"))
    dests = tuple(dict.fromkeys([*declared, *(g.dest for g in groups)]))
    end = max(g.stop for g in groups)
    return Workload(
        name=str(name),
        seed=seed,
        duration=duration if duration is not None else end,
        destinations=dests,
        producers=tuple(producers),
        consumers=tuple(consumers),
        scale=scale,
        source=source,
    )


def load_workload(path: str | Path, *, scale: float = 1.0) -> Workload:
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise WorkloadError(f"{path}: {exc}") from exc
    return parse_workload(doc, scale=scale, source=str(path))


# --- planning ---------------------------------------------------------------------


def rate_pieces(group: ProducerGroup) -> list[tuple[float, float, float]]:
    """``(start, stop, rate)`` pieces covering the group's interval, phases applied."""
    pieces, at = [], group.start
    for p in group.phases:
        if p.start > at:
            pieces.append((at, p.start, group.rate))
        pieces.append((p.start, p.stop, p.rate or 0.0))
        at = p.stop
    if at < group.stop:
        pieces.append((at, group.stop, group.rate))
    return [piece for piece in pieces if piece[2] > 0]


def producer_segments(group: ProducerGroup) -> list[Segment]:
    """Every producer client's segments, with message counts and indices.

    Even arrival: client i of n sends at ``start + (j + i/n) / rate`` while
    that is before the piece's stop. Random arrival: ``round(len * rate)``
    messages at uniformly random times within the piece. ``messages`` caps
    each client's total.
    """
    out = []
    pieces = rate_pieces(group)
    for i, client in enumerate(group.clients()):
        offset = i / group.count if group.arrival == "even" else 0.0
        first = 0
        for a, b, rate in pieces:
            if group.arrival == "even":
                n = max(0, math.ceil((b - a) * rate - offset - 1e-9))
            else:
                n = round((b - a) * rate)
            if group.messages is not None:
                n = min(n, group.messages - first)
            if n > 0:
                out.append(Segment(client, a, b, rate, first, n, offset))
                first += n
    return out


def chunk_plan(workload: Workload, chunk: int) -> Iterator[tuple[int, Segment, int, int]]:
    """Every producer segment cut into pieces of at most ``chunk`` messages:
    ``(group index, segment, first index within the segment, messages)``. Both
    workload engines expand these pieces, one row per message."""
    for gidx, g in enumerate(workload.producers):
        for s in producer_segments(g):
            for j0 in range(0, s.count, chunk):
                yield gidx, s, j0, min(chunk, s.count - j0)


def send_counts(workload: Workload) -> dict[str, int]:
    """Messages each producer client sends, from the plan alone."""
    counts: dict[str, int] = {}
    for g in workload.producers:
        for c in g.clients():
            counts[c] = 0
        for seg in producer_segments(g):
            counts[seg.client] += seg.count
    return counts
