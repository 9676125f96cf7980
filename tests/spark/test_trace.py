"""The trace contract: writer, schema table, docs and Spark reader agree on one sample."""

from __future__ import annotations

import io
import json
import re
from itertools import pairwise
from pathlib import Path

import pytest

from minibroker.trace import (
    _LOAD_WINDOW,
    COMMON,
    DISPATCH,
    DISPATCH_AUTO_ACK,
    ENQUEUE,
    EVENTS,
    FIELDS,
    SEND,
    SEND_ENQUEUE,
    SEND_ENQUEUE_DISPATCH,
    SEND_ENQUEUE_DISPATCH_AUTO_ACK,
    MemoryTrace,
    NullTrace,
    Trace,
    dumps_events,
    validate_event,
)

from .sample_events import BROKER, SAMPLE, write_sample

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_PATH = ROOT / "tests" / "data" / "sample-trace.jsonl"
DOC_PATH = ROOT / "docs" / "trace-schema.md"


def sample_lines() -> list[dict]:
    return [json.loads(line) for line in SAMPLE_PATH.read_text().splitlines()]


def test_writer_output_equals_sample_file():
    out = io.StringIO()
    write_sample(out)
    assert out.getvalue() == SAMPLE_PATH.read_text()


def test_sample_is_valid_and_covers_every_event():
    lines = sample_lines()
    for line in lines:
        assert validate_event(line) == [], line
    assert {line["event"] for line in lines} == set(EVENTS)
    assert [line["seq"] for line in lines] == list(range(1, len(lines) + 1))
    assert all(a["ts"] <= b["ts"] for a, b in pairwise(lines))
    # every optional field appears somewhere, so the reader sees every column
    seen = {k for line in lines for k, v in line.items() if v is not None}
    assert seen == set(FIELDS)


def test_offloaded_writer_output_equals_sample_file(tmp_path):
    path = tmp_path / "t.jsonl"
    times = iter([ts for ts, _, _ in SAMPLE])
    trace = Trace(path, lambda: next(times), broker=BROKER, buffer_events=5, offload=True)
    for _, event, fields in SAMPLE:
        trace.emit(event, **fields)
    trace.close()
    assert trace.written == len(SAMPLE)
    assert path.read_text() == SAMPLE_PATH.read_text()


def _spool_files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if ".spool." in p.name)


def test_offloaded_writer_rotates_its_spool_and_leaves_none(tmp_path):
    """Tiny spool segments: every batch after the first starts a segment; the
    child deletes each one it leaves and the last at the end, and the trace is
    still the sample, line for line."""
    path = tmp_path / "t.jsonl"
    times = iter([ts for ts, _, _ in SAMPLE])
    trace = Trace(path, lambda: next(times), broker=BROKER, buffer_events=2, offload=True, spool_segment_bytes=1)
    for _, event, fields in SAMPLE:
        trace.emit(event, **fields)
    assert _spool_files(tmp_path)  # the spool exists while the trace is open
    assert trace._spool is not None and trace._spool.on_disk() > 0
    trace.close()
    assert path.read_text() == SAMPLE_PATH.read_text()
    assert _spool_files(tmp_path) == []


def test_offloaded_writer_runs_at_low_priority_and_removes_a_stale_spool(tmp_path):
    import os

    path = tmp_path / "t.jsonl"
    stale = tmp_path / ".t.jsonl.spool.7"  # left behind by a writer that was killed
    stale.write_bytes(b"junk")
    trace = Trace(path, lambda: 1.0, broker=BROKER, offload=True, writer_nice=5)
    assert not stale.exists()
    child = trace._child
    assert child is not None
    import time

    wanted = min(os.getpriority(os.PRIO_PROCESS, 0) + 5, 19)
    deadline = time.monotonic() + 30  # the child renices itself as it starts
    while os.getpriority(os.PRIO_PROCESS, child.pid) != wanted and time.monotonic() < deadline:
        time.sleep(0.02)
    assert os.getpriority(os.PRIO_PROCESS, child.pid) == wanted
    trace.emit("expire", dest="/queue/q", msg="m-1")
    trace.close()
    assert [json.loads(line)["event"] for line in path.read_text().splitlines()] == ["expire"]


def test_offloaded_writer_finishes_the_trace_when_the_broker_dies(tmp_path):
    """The broker process is killed with batches flushed: the writer sees its
    stdin close, converts what the spool holds, deletes the spool and exits."""
    import subprocess
    import sys
    import textwrap

    path = tmp_path / "t.jsonl"
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from minibroker.trace import Trace
        t = Trace({str(path)!r}, lambda: 2.5, broker="b", offload=True, buffer_events=10)
        for i in range(25):
            t.emit("expire", dest="/queue/q", msg="m-%d" % i)
        t.flush()
        print(t._child.pid, flush=True)
        os.kill(os.getpid(), 9)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9
    writer_pid = int(proc.stdout.split()[0])
    import os
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(writer_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [e["msg"] for e in lines] == [f"m-{i}" for i in range(25)]
    assert [e["seq"] for e in lines] == list(range(1, 26))
    assert _spool_files(tmp_path) == []


# The hot events, written the fast way (emit_fixed) and the plain way (emit):
# (kind, values, the same events as (event, fields) for emit).
FIXED_CASES = [
    (
        SEND,
        ("b-1-3", "/queue/q", "ID:b-1-7", 300, True, 4, None),
        [("send", dict(session="b-1-3", dest="/queue/q", msg="ID:b-1-7", size=300, persistent=True, priority=4))],
    ),
    (
        SEND,
        ("b-1-3", "/queue/q", "ID:b-1-8", 12, False, 9, "b.3.1"),
        [
            (
                "send",
                dict(
                    session="b-1-3", dest="/queue/q", msg="ID:b-1-8", size=12, persistent=False, priority=9, tx="b.3.1"
                ),
            )
        ],
    ),
    (
        SEND,
        ("b-1-3", '/queue/naïve "q"\\', "ID:b-1-9", 0, False, 0, None),  # escaping as the JSON encoder does
        [
            (
                "send",
                dict(session="b-1-3", dest='/queue/naïve "q"\\', msg="ID:b-1-9", size=0, persistent=False, priority=0),
            )
        ],
    ),
    (
        ENQUEUE,
        ("/queue/q", "ID:b-1-7", 300, False, 4, True, "b-1-3"),
        [
            (
                "enqueue",
                dict(
                    dest="/queue/q",
                    msg="ID:b-1-7",
                    size=300,
                    cached=False,
                    priority=4,
                    persistent=True,
                    session="b-1-3",
                ),
            )
        ],
    ),
    (
        ENQUEUE,
        ("/queue/ActiveMQ.DLQ", "ID:b-1-7", 300, True, 4, True, None),
        [
            (
                "enqueue",
                dict(dest="/queue/ActiveMQ.DLQ", msg="ID:b-1-7", size=300, cached=True, priority=4, persistent=True),
            )
        ],
    ),
    (
        SEND_ENQUEUE,
        ("b-1-3", "/queue/q", "ID:b-1-10", 20, True, 7, "b.3.2", False),
        [
            (
                "send",
                dict(
                    session="b-1-3", dest="/queue/q", msg="ID:b-1-10", size=20, persistent=True, priority=7, tx="b.3.2"
                ),
            ),
            (
                "enqueue",
                dict(
                    dest="/queue/q",
                    msg="ID:b-1-10",
                    size=20,
                    cached=False,
                    priority=7,
                    persistent=True,
                    session="b-1-3",
                ),
            ),
        ],
    ),
    (
        SEND_ENQUEUE,
        ("b-1-3", "/queue/q", "ID:b-1-11", 20, False, 4, None, True),
        [
            ("send", dict(session="b-1-3", dest="/queue/q", msg="ID:b-1-11", size=20, persistent=False, priority=4)),
            (
                "enqueue",
                dict(
                    dest="/queue/q",
                    msg="ID:b-1-11",
                    size=20,
                    cached=True,
                    priority=4,
                    persistent=False,
                    session="b-1-3",
                ),
            ),
        ],
    ),
    (
        DISPATCH,
        (("b-1-4", "s", "/queue/q"), "ID:b-1-7", 300, True, 4),
        [
            (
                "dispatch",
                dict(session="b-1-4", sub="s", dest="/queue/q", msg="ID:b-1-7", size=300, redelivered=True, priority=4),
            )
        ],
    ),
    (
        DISPATCH_AUTO_ACK,
        (("b-1-4", "0", "/topic/t"), "ID:b-1-9", 64, False, 0),
        [
            (
                "dispatch",
                dict(session="b-1-4", sub="0", dest="/topic/t", msg="ID:b-1-9", size=64, redelivered=False, priority=0),
            ),
            ("ack", dict(session="b-1-4", sub="0", dest="/topic/t", msg="ID:b-1-9", mode="auto")),
        ],
    ),
    (
        SEND_ENQUEUE_DISPATCH,
        ("b-1-3", "/queue/q", "ID:b-1-20", 5, True, 4, "t\\1", True, ("b-1-4", "s", "/queue/q"), False),
        [
            (
                "send",
                dict(session="b-1-3", dest="/queue/q", msg="ID:b-1-20", size=5, persistent=True, priority=4, tx="t\\1"),
            ),
            (
                "enqueue",
                dict(
                    dest="/queue/q", msg="ID:b-1-20", size=5, cached=True, priority=4, persistent=True, session="b-1-3"
                ),
            ),
            (
                "dispatch",
                dict(session="b-1-4", sub="s", dest="/queue/q", msg="ID:b-1-20", size=5, redelivered=False, priority=4),
            ),
        ],
    ),
    (
        SEND_ENQUEUE_DISPATCH_AUTO_ACK,
        ("b-1-3", '/queue/"q"', "ID:b-1-21", 0, False, 0, None, False, ("b-1-4", "0", '/queue/"q"'), True),
        [
            ("send", dict(session="b-1-3", dest='/queue/"q"', msg="ID:b-1-21", size=0, persistent=False, priority=0)),
            (
                "enqueue",
                dict(
                    dest='/queue/"q"',
                    msg="ID:b-1-21",
                    size=0,
                    cached=False,
                    priority=0,
                    persistent=False,
                    session="b-1-3",
                ),
            ),
            (
                "dispatch",
                dict(
                    session="b-1-4", sub="0", dest='/queue/"q"', msg="ID:b-1-21", size=0, redelivered=True, priority=0
                ),
            ),
            ("ack", dict(session="b-1-4", sub="0", dest='/queue/"q"', msg="ID:b-1-21", mode="auto")),
        ],
    ),
]


@pytest.mark.parametrize("offload", [False, True])
def test_fixed_shape_events_write_the_same_lines_as_emit(tmp_path, offload):
    fast, plain = tmp_path / "fast.jsonl", tmp_path / "plain.jsonl"
    # One tick per record: emit_fixed stamps both lines of a pair with one clock reading.
    fast_trace = Trace(fast, iter(range(100)).__next__, broker=BROKER, buffer_events=4, offload=offload)
    ticks = [i for i, (_, _, lines) in enumerate(FIXED_CASES * 2) for _ in lines]
    plain_trace = Trace(plain, iter(ticks).__next__, broker=BROKER, buffer_events=3)
    for kind, values, lines in FIXED_CASES * 2:  # twice: the seq runs on across buffer flushes
        fast_trace.emit_fixed(kind, values)
        for event, fields in lines:
            plain_trace.emit(event, **fields)
    fast_trace.close()
    plain_trace.close()
    assert fast.read_text() == plain.read_text()
    assert fast_trace.written == plain_trace.written == 2 * sum(len(lines) for _, _, lines in FIXED_CASES)
    for line in fast.read_text().splitlines():
        assert validate_event(json.loads(line)) == [], line


def test_memory_trace_expands_fixed_shape_events():
    mem = MemoryTrace(lambda: 1.0, broker=BROKER)
    for kind, values, _ in FIXED_CASES:
        mem.emit_fixed(kind, values)
    expected = [(event, fields) for _, _, lines in FIXED_CASES for event, fields in lines]
    got = [(e["event"], {k: v for k, v in e.items() if k not in COMMON}) for e in mem.events()]
    assert got == expected
    NullTrace().emit_fixed(SEND, FIXED_CASES[0][1])  # accepted, ignored


def test_memory_trace_matches_file_trace():
    times = iter([ts for ts, _, _ in SAMPLE])
    mem = MemoryTrace(lambda: next(times), broker=BROKER)
    for _, event, fields in SAMPLE:
        mem.emit(event, **fields)
    assert mem.events() == sample_lines()
    assert [e["seq"] for e in mem.events("journal_full")] == [32]
    out = io.StringIO()
    mem.dump(out)
    assert out.getvalue() == SAMPLE_PATH.read_text()
    assert dumps_events(mem.events(), broker=BROKER) == SAMPLE_PATH.read_text()


def test_buffer_flushes_itself_and_on_close(tmp_path):
    path = tmp_path / "t.jsonl"
    clock = iter(range(100)).__next__
    trace = Trace(path, clock, broker="x", buffer_events=3)
    for i in range(7):
        trace.emit("expire", dest="/queue/A", msg=str(i))
    assert trace.written == 6  # two automatic flushes of three
    assert len(path.read_text().splitlines()) == 6
    trace.close()
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert [x["seq"] for x in lines] == list(range(1, 8))
    assert [x["ts"] for x in lines] == list(range(7))
    trace.emit("expire", dest="/queue/A", msg="late")  # after close: buffered, never written
    trace.flush()
    assert len(path.read_text().splitlines()) == 7


def test_strings_are_escaped():
    out = io.StringIO()
    trace = Trace(out, lambda: 1.5, broker='b"1')
    trace.emit("error", message='line\nbreak "quoted" \u00e9', code=None)
    trace.close()
    line = json.loads(out.getvalue())
    assert line["broker"] == 'b"1' and line["message"] == 'line\nbreak "quoted" \u00e9'
    assert out.getvalue().count("\n") == 1


def test_null_trace_is_disabled():
    trace = NullTrace()
    assert trace.enabled is False
    trace.emit("expire", dest="/queue/A", msg="1")
    trace.flush()
    trace.close()


@pytest.mark.parametrize(
    "event, problem",
    [
        (
            {
                "v": 1,
                "seq": 1,
                "ts": 0.0,
                "event": "ack",
                "broker": "b",
                "session": "s",
                "sub": "0",
                "dest": "/queue/A",
            },
            "ack: missing msg",
        ),
        (
            {
                "v": 1,
                "seq": 1,
                "ts": 0.0,
                "event": "usage",
                "broker": "b",
                "mem_pct": "70",
                "store_pct": 0,
                "temp_pct": 0,
            },
            "mem_pct: expected int",
        ),
        (
            {
                "v": 1,
                "seq": 1,
                "ts": 0.0,
                "event": "usage",
                "broker": "b",
                "mem_pct": True,
                "store_pct": 0,
                "temp_pct": 0,
            },
            "mem_pct: expected int",
        ),
        ({"v": 2, "seq": 1, "ts": 0.0, "event": "expire", "broker": "b", "dest": "d", "msg": "m"}, "v is 2"),
        ({"v": 1, "seq": 1, "ts": 0.0, "event": "teleport", "broker": "b"}, "unknown event"),
        (
            {"v": 1, "seq": 1, "ts": 0.0, "event": "expire", "broker": "b", "dest": "d", "msg": "m", "colour": "red"},
            "unknown field 'colour'",
        ),
    ],
)
def test_validate_event_reports_problems(event, problem):
    problems = validate_event(event)
    assert any(problem in p for p in problems), problems


def test_unknown_fields_and_events_pass_when_not_strict():
    event = {"v": 1, "seq": 1, "ts": 0.0, "event": "teleport", "broker": "b", "colour": "red"}
    assert validate_event(event, strict=False) == []


def _doc_tables() -> tuple[dict[str, str], dict[str, tuple[list, list]]]:
    text = DOC_PATH.read_text()
    glossary_part = text.split("## Field glossary", 1)[1].split("## Events", 1)[0]
    common_part = text.split("## Common fields", 1)[1].split("## Field glossary", 1)[0]
    row = re.compile(r"^\| `([a-z_]+)` \| ([^|]+?) \| ([^|]+?) \|$", re.M)
    types = {m[0]: m[1] for m in row.findall(common_part + glossary_part)}
    events = {}
    events_part = text.split("\n## Events", 1)[1].split("\n## ", 1)[0]
    for section in re.split(r"^### ", events_part, flags=re.M)[1:]:
        name = re.match(r"`([a-z_]+)`", section)[1]
        rows = row.findall(section)
        events[name] = ([m[0] for m in rows if m[2] == "yes"], [m[0] for m in rows if m[2] == "no"])
        for field, kind, _ in rows:
            assert FIELDS[field] == kind, (name, field)
    return types, events


def test_docs_match_the_schema_table():
    types, events = _doc_tables()
    assert types == FIELDS
    assert list(events) == list(EVENTS)
    for name, spec in EVENTS.items():
        assert events[name] == (list(spec.required), list(spec.optional)), name
        assert not set(spec.required + spec.optional) & set(COMMON)


@pytest.mark.spark
def test_spark_reader_reads_the_sample(spark):
    from pyspark.sql import functions as F

    from clients.spark.schema import CORRUPT, SOURCE, check_trace, read_trace

    df = read_trace(spark, [str(SAMPLE_PATH)]).cache()
    info = check_trace(df)
    assert info["lines"] == len(SAMPLE) and info["corrupt"] == 0
    assert (info["t0"], info["t1"]) == (0.0, 14.75)
    rows = [r.asDict(recursive=True) for r in df.drop(SOURCE, CORRUPT).orderBy("seq").collect()]
    # every required field is non-null, every value equals what was written
    for row, line in zip(rows, sample_lines(), strict=True):
        spec = EVENTS[row["event"]]
        for name in COMMON + spec.required:
            assert row[name] is not None, (row["seq"], name)
        assert {k: v for k, v in row.items() if v is not None} == {k: v for k, v in line.items() if v is not None}
    assert df.filter(F.col("event") == "journal_full").first()["file_live"]["0006.jdat"] == 1
    df.unpersist()


@pytest.mark.spark
def test_spark_reader_drops_unknown_fields_and_counts_corrupt_lines(spark, tmp_path):
    from clients.spark.schema import check_trace, read_trace

    path = tmp_path / "t.jsonl"
    path.write_text(
        '{"v":1,"seq":1,"ts":1.0,"event":"expire","broker":"b","dest":"/queue/A","msg":"m",'
        '"colour":"red"}\n'
        '{"v":1,"seq":2,"ts":2.0,"event":"teleport","broker":"b","dest":"/queue/A"}\n'
        "not json\n"
    )
    df = read_trace(spark, [str(path)]).cache()
    info = check_trace(df)
    assert info["lines"] == 3 and info["corrupt"] == 1
    assert "colour" not in df.columns
    assert [r["event"] for r in df.filter("event is not null").orderBy("seq").collect()] == ["expire", "teleport"]
    df.unpersist()


def test_a_trace_that_cannot_write_stops_and_the_caller_goes_on(tmp_path, caplog):
    """A full disk or a dead writer: flush logs why, tracing stops (``enabled``
    turns False, so the broker builds no more events), nothing is raised."""
    import errno
    import logging
    import os

    trace = Trace(tmp_path / "t.jsonl", lambda: 1.0, broker=BROKER, offload=True, buffer_events=2)
    real_write = os.write

    def full_disk(fd, data):
        if fd == trace._spool._fd:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    trace.emit("expire", dest="/queue/q", msg="m-1")
    trace.flush()
    os.write = full_disk
    try:
        with caplog.at_level(logging.ERROR, logger="minibroker.trace"):
            trace.emit("expire", dest="/queue/q", msg="m-2")
            trace.emit_fixed(SEND, ("s", "/queue/q", "m-3", 1, False, 4, None))  # fills the buffer: flush fails
    finally:
        os.write = real_write
    assert trace.enabled is False and trace.error == "No space left on device"
    assert "cannot write (No space left on device); tracing stops here" in caplog.text
    trace.close()
    assert [json.loads(line)["msg"] for line in (tmp_path / "t.jsonl").read_text().splitlines()] == ["m-1"]


class _FakeLoad:
    """A ``/proc/<pid>/stat`` look-alike whose CPU time grows two seconds per
    second while ``busy`` (a broker using two cores), and stays put when not:
    the writer's view of the broker's load, without depending on this machine's."""

    def __init__(self, path):
        import threading

        self.path = path
        self.busy = True
        self._ticks = 0
        #: The longest time between two of its writes while busy: a loaded machine can
        #: leave this thread unscheduled long enough for the writer to see an idle window.
        self.longest_gap = 0.0
        self._write()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _write(self):
        fields = ["S"] + ["0"] * 10 + [str(self._ticks), "0"] + ["0"] * 30
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("1 (broker) " + " ".join(fields) + "\n")
        tmp.replace(self.path)

    def _run(self):
        import os
        import time

        tick = os.sysconf("SC_CLK_TCK")
        last = time.monotonic()
        while not self._stop.wait(0.01):
            now = time.monotonic()
            if self.busy:
                self.longest_gap = max(self.longest_gap, now - last)
                self._ticks += int(2 * tick * (now - last)) + 1
                self._write()
            last = now

    def close(self):
        self._stop.set()
        self._thread.join()


def _lines(path):
    return path.read_text().splitlines() if path.exists() else []


def _wait_for(predicate, seconds):
    import time

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_the_writer_waits_while_the_broker_is_busy_and_catches_up_when_it_idles(tmp_path):
    """While the broker uses two cores the writer converts nothing; once it
    idles, the trace catches up without a close."""
    load = _FakeLoad(tmp_path / "stat")
    path = tmp_path / "t.jsonl"
    trace = Trace(path, lambda: 1.0, broker=BROKER, offload=True, buffer_events=10, load_stat=str(load.path))
    try:
        for i in range(30):
            trace.emit("expire", dest="/queue/q", msg=f"m-{i}")
        trace.flush()
        written = _wait_for(lambda: len(_lines(path)) > 0, 1.5)  # busy for 1.5 s: nothing written ...
        # ... unless this fake load itself went a whole window of the writer's without growing
        # (the machine did not schedule its thread): only then may the writer have seen an idle broker.
        assert not written or load.longest_gap >= _LOAD_WINDOW, f"written while busy (gap {load.longest_gap:.3f} s)"
        load.busy = False
        assert _wait_for(lambda: len(_lines(path)) == 30, 30)  # idle now
    finally:
        load.close()
        trace.close()


def test_past_its_lag_limit_the_writer_converts_even_while_the_broker_is_busy(tmp_path):
    load = _FakeLoad(tmp_path / "stat")
    path = tmp_path / "t.jsonl"
    trace = Trace(
        path,
        lambda: 1.0,
        broker=BROKER,
        offload=True,
        buffer_events=10,
        writer_nice=0,
        lag_limit=1,
        load_stat=str(load.path),
    )
    try:
        for i in range(30):
            trace.emit("expire", dest="/queue/q", msg=f"m-{i}")
        trace.flush()
        assert _wait_for(lambda: len(_lines(path)) == 30, 30)
    finally:
        load.close()
        trace.close()
    assert [json.loads(line)["seq"] for line in _lines(path)] == list(range(1, 31))
