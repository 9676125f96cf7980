"""The writer process of an offloaded trace: spool batches in, JSON lines (or Parquet) out.

Run by ``spool.start_writer`` as ``python -m minibroker.trace.run_writer``; the
format of the spool is in ``spool.py``. ``format`` says what it writes: the
JSON-lines file (``jsonl``), Parquet segments beside it (``parquet``, see
``parquet.py``: only then is pyarrow imported), or both. The process runs at low priority and
defers its work while the broker is busy (``BrokerLoad``), so that on a small
machine the trace lags the broker rather than slowing it.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import select
import time
from json import encoder as _json_encoder

from .encoding import encode_batch
from .segments import clear_segments, twin_dir
from .spool import NEXT_SEGMENT, segment_path

__all__ = ["LOAD_WINDOW", "BUSY_FRACTION", "FORMATS", "BrokerLoad", "write_from_spool"]

#: What a trace can be written as: the JSON-lines file, its Parquet twin, or both.
FORMATS = ("jsonl", "parquet", "both")

#: The writer samples the broker's CPU over windows this long (seconds)...
LOAD_WINDOW = 0.1
#: ...and calls it busy at this fraction of one core or more.
BUSY_FRACTION = 0.5


class BrokerLoad:
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
        elif now - self._last[0] >= LOAD_WINDOW:
            then, before = self._last
            self._busy = (cpu - before) / (now - then) >= BUSY_FRACTION
            self._last = (now, cpu)
        return self._busy


def write_from_spool(path: str, broker: str, nice: int, lag_limit: int, load_stat: str, format: str = "jsonl") -> int:
    """The offload writer: spool batches (see above) -> JSON lines in ``path``, and/or
    Parquet segments in its twin directory (``format``, one of ``FORMATS``).

    It converts while the broker is not busy (``BrokerLoad``), or when more
    than ``lag_limit`` bytes of spool wait (0: never wait), and everything once
    the broker closes the trace or dies. A new trace replaces the old one in
    every form: the file is truncated and the twin's segments removed, and the
    form not written is removed too, so that no reader takes an earlier run's
    trace for this one.
    """
    if format not in FORMATS:
        raise ValueError(f"trace format {format!r}: expected one of {', '.join(FORMATS)}")
    if nice:
        os.nice(nice)
    if nice >= 19 and hasattr(os, "SCHED_IDLE"):
        # Linux: run only when a CPU would otherwise idle (a waking broker preempts at once).
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    load = BrokerLoad(load_stat) if lag_limit > 0 else None
    broker_json = _json_encoder.encode_basestring(broker)
    seq = 1
    k, offset = 0, 0
    fd = os.open(segment_path(path, 0), os.O_RDONLY)

    def backlog() -> int:
        """Spool bytes not converted yet."""
        waiting = os.fstat(fd).st_size - offset
        later = k + 1
        while True:
            try:
                waiting += os.stat(segment_path(path, later)).st_size
            except FileNotFoundError:
                return waiting
            later += 1

    def may_wait() -> bool:
        return load is not None and load.busy() and backlog() <= lag_limit

    segments = None
    if format == "jsonl":
        clear_segments(twin_dir(path))
    else:
        from .parquet import SegmentWriter  # pyarrow: in this process only, and only when asked

        segments = SegmentWriter(twin_dir(path))
        if format == "parquet":
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                os.unlink(path)
    with contextlib.ExitStack() as stack:
        out = stack.enter_context(open(path, "w", encoding="utf-8")) if format != "parquet" else None

        def convert(finish: bool) -> None:
            nonlocal seq, k, offset, fd
            checked = time.monotonic()
            while True:
                if not finish and time.monotonic() - checked >= LOAD_WINDOW / 2:
                    if may_wait():  # the broker got busy again: leave the rest for later
                        return
                    checked = time.monotonic()
                header = os.pread(fd, 8, offset)
                if len(header) < 8:
                    return
                size = int.from_bytes(header, "little")
                if size == NEXT_SEGMENT:
                    os.close(fd)
                    os.unlink(segment_path(path, k))
                    k, offset = k + 1, 0
                    fd = os.open(segment_path(path, k), os.O_RDONLY)
                    continue
                blob = os.pread(fd, size, offset + 8)
                if len(blob) < size:  # the broker is still writing it; its doorbell follows
                    return
                offset += 8 + size
                text = encode_batch(seq, marshal.loads(blob), broker_json)
                lines = text.count("\n")  # one per line (JSON escapes newlines in strings); a pair is two
                if out is not None:
                    out.write(text)
                if segments is not None:
                    segments.write(text.encode(), lines)
                seq += lines

        while True:
            ready, _, _ = select.select([0], [], [], LOAD_WINDOW)
            if ready and not os.read(0, 65536):  # EOF: the trace was closed, or the broker died
                convert(finish=True)
                break
            if not may_wait():
                convert(finish=False)
                if out is not None:
                    out.flush()
                if segments is not None:
                    segments.poll()
        if segments is not None:
            segments.close()
    os.close(fd)
    os.unlink(segment_path(path, k))
    return 0
