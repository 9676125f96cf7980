"""The recorder: what the broker (and the replay driver) call to trace.

Cost
----
``emit`` is on the broker's hot path, so it only appends ``(ts, event,
fields)`` to a list. Encoding (``encoding.py``) and writing happen in
``flush``, which runs when the buffer holds ``buffer_events`` events, when the
server's periodic timer calls it, and on ``close``. ``seq`` is assigned at
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
process at idle priority, fed through a spool file (``spool.py``), so the
broker never waits for it; docs/trace-schema.md, "Cost", has what tracing costs
the broker's throughput and how it was measured.
"""

from __future__ import annotations

import logging
import marshal
import os
import subprocess
from collections.abc import Callable
from json import encoder as _json_encoder
from typing import Any, TextIO

from .encoding import (
    DISPATCH,
    DISPATCH_AUTO_ACK,
    ENQUEUE,
    EXTRA_LINES,
    SEND,
    SEND_ENQUEUE,
    SEND_ENQUEUE_DISPATCH,
    SEND_ENQUEUE_DISPATCH_AUTO_ACK,
    dumps_events,
    encode_batch,
    expand,
)
from .schema import SCHEMA_VERSION
from .spool import SpoolAppender, start_writer
from .writer import FORMATS

__all__ = ["Recorder", "Trace", "NullTrace", "MemoryTrace"]

log = logging.getLogger("minibroker.trace")


class Recorder:
    """What the broker calls to trace, one method per fact; subclasses say where records go.

    A subclass implements ``emit`` (one named event) and ``emit_fixed`` (one
    fixed-shape record, ``encoding.py``); this class turns the broker's facts
    into records, merging those that come together.

    Theory of operation: routing a SEND is one synchronous call in the broker,
    framed by ``send_received`` and ``send_routed``. The send is held back
    until then, so that what usually follows at once joins its record: the
    enqueue of that message on the send's queue (``SEND_ENQUEUE``), then its
    dispatch to a waiting consumer (``SEND_ENQUEUE_DISPATCH``, with the ack of
    auto mode: one record, one timestamp, for four lines). Any other fact writes
    the held send first, so the trace's order is the order of the facts.
    """

    #: False when nothing is recorded: callers check it before building a fact's values.
    enabled = True
    #: The send held back (``SEND``'s values), until ``send_routed`` or another fact.
    _held: tuple[Any, ...] | None = None
    #: SEND, or SEND_ENQUEUE once its enqueue joined it (a dispatch may still join).
    _held_kind = SEND
    #: The joined enqueue's ``cached``.
    _held_cached = False

    def emit(self, event: str, **fields: Any) -> None:
        """Record one named event now."""
        raise NotImplementedError

    def emit_fixed(self, kind: int, values: tuple[Any, ...]) -> None:
        """Record one fixed-shape record now (``encoding.py`` has the kinds)."""
        raise NotImplementedError

    def flush(self) -> None:
        """Hand on what is buffered (nothing to do where nothing is buffered)."""

    def close(self) -> None:
        """Flush and stop recording."""

    def event(self, event: str, **fields: Any) -> None:
        """A fact with no record of its own shape: one ``event`` line, the fields
        that are None left out."""
        if self._held is not None:
            self._write_held()
        self.emit(event, **{k: v for k, v in fields.items() if v is not None})

    def send_received(
        self, session: str, dest: str, msg: str, size: int, persistent: bool, priority: int, tx: str | None
    ) -> None:
        """A SEND is being routed (held until ``send_routed``: its enqueue and dispatch may join it)."""
        if self._held is not None:
            self._write_held()
        self._held = (session, dest, msg, size, persistent, priority, tx)
        self._held_kind = SEND

    def send_routed(self) -> None:
        """The SEND of ``send_received`` was routed: write it, with what joined it."""
        if self._held is not None:
            self._write_held()

    def enqueued(
        self,
        dest: str,
        msg: str,
        size: int,
        cached: bool,
        priority: int,
        persistent: bool,
        origin: int,
        session_tag: Callable[[int], str],
    ) -> None:
        """A message entered a queue (``cached``: in memory, or store-only). ``origin``
        is the sending connection (0: none), ``session_tag`` names it."""
        held = self._held
        if held is not None:
            if held[2] == msg and held[1] == dest and self._held_kind == SEND:
                self._held_cached = cached
                self._held_kind = SEND_ENQUEUE
                return
            self._write_held()
        self.emit_fixed(
            ENQUEUE, (dest, msg, size, cached, priority, persistent, session_tag(origin) if origin else None)
        )

    def dispatched(
        self, ids: tuple[str, str, str], msg: str, size: int, redelivered: bool, priority: int, auto_ack: bool
    ) -> None:
        """A MESSAGE went to the subscription ``ids`` (session, sub, dest); with
        ``auto_ack`` the ack of auto mode follows it."""
        held = self._held
        if held is not None:
            if self._held_kind == SEND_ENQUEUE and held[2] == msg:
                # A new message went straight to a waiting consumer: never delivered before.
                self._held = None
                self.emit_fixed(
                    SEND_ENQUEUE_DISPATCH_AUTO_ACK if auto_ack else SEND_ENQUEUE_DISPATCH,
                    (*held, self._held_cached, ids, False),
                )
                return
            self._write_held()  # a topic's dispatch, or another message's: the send comes first
        self.emit_fixed(DISPATCH_AUTO_ACK if auto_ack else DISPATCH, (ids, msg, size, redelivered, priority))

    def _write_held(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            if self._held_kind == SEND_ENQUEUE:
                self.emit_fixed(SEND_ENQUEUE, (*held, self._held_cached))
            else:
                self.emit_fixed(SEND, held)


class Trace(Recorder):
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

    ``format`` (offload only): ``"jsonl"`` (the file), ``"parquet"`` (Parquet
    segments in the twin directory ``<path>.parquet/`` instead, ``segments.py``)
    or ``"both"``. Only the writer process imports pyarrow.
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
        format: str = "jsonl",
    ) -> None:
        if buffer_events < 1:
            raise ValueError("buffer_events must be at least 1")
        if format not in FORMATS:
            raise ValueError(f"trace format {format!r}: expected one of {', '.join(FORMATS)}")
        if format != "jsonl" and not offload:
            raise ValueError(f"format={format!r} needs offload=True (the writer process writes Parquet)")
        self._child: subprocess.Popen[bytes] | None = None
        self._spool: SpoolAppender | None = None
        self._file: TextIO | None = None
        self._owns_file = False
        if offload:
            if not isinstance(sink, (str, os.PathLike)):
                raise ValueError("offload=True needs a path to write to")
            path = os.path.abspath(os.fspath(sink))
            self._child, self._spool = start_writer(
                path,
                broker,
                writer_nice,
                lag_limit,
                load_stat or f"/proc/{os.getpid()}/stat",
                spool_segment_bytes,
                format,
            )
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
        self._extra_lines += EXTRA_LINES[kind]
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


class NullTrace(Recorder):
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


class MemoryTrace(Recorder):
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
