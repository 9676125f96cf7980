"""The trace package's shape: low in the import graph, its writer process run as a module."""

from __future__ import annotations

import ast
import io
import json
import sys
import time
from pathlib import Path

from minibroker.trace import MemoryTrace, Trace, dumps_events, encoding

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "minibroker" / "trace"


def _imported(path: Path) -> set[str]:
    """The absolute modules ``path`` imports (relative imports stay inside its package)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            found.add(node.module or "")
    return found


#: The one module that imports more: the Parquet form, which only the writer process
#: (and the tools that read or convert a trace) import.
PARQUET_MODULE = {"parquet.py": {"pyarrow", "pyarrow.json", "pyarrow.parquet"}}


def test_the_trace_package_imports_only_the_standard_library() -> None:
    """The broker imports the trace, and the writer process imports it on its own:
    nothing in it may import the broker (or anything not in the standard library),
    but for pyarrow in the Parquet form's module."""
    outside = sorted(
        f"{path.name} imports {name}"
        for path in PACKAGE.glob("*.py")
        for name in _imported(path)
        if name.partition(".")[0] not in sys.stdlib_module_names
        and name != "__future__"
        and name not in PARQUET_MODULE.get(path.name, ())
    )
    assert outside == []


def test_the_offloaded_writer_process_runs_the_package_as_a_module(tmp_path: Path) -> None:
    """The writer process is ``python -m minibroker.trace.run_writer``, not a file
    of the package run by its path (which would put the package's own directory
    first on its import path)."""
    trace = Trace(tmp_path / "t.jsonl", lambda: 1.0, broker="b", offload=True)
    try:
        assert trace._child is not None
        # Popen returns as the child execs; the kernel shows its new command line a moment later.
        cmdline = Path(f"/proc/{trace._child.pid}/cmdline")
        deadline = time.monotonic() + 30
        while not cmdline.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)
        argv = cmdline.read_bytes().split(b"\0")
        assert b"-m" in argv and argv[argv.index(b"-m") + 1] == b"minibroker.trace.run_writer"
        assert not [arg for arg in argv if arg.endswith(b".py")]
        trace.emit("expire", dest="/queue/q", msg="m-1")
    finally:
        trace.close()
    assert trace.error is None
    assert (tmp_path / "t.jsonl").read_text().count('"event":"expire"') == 1


# -- the recorder: the broker's facts in, records out, merged inside the package ---------

#: What only the trace package should know: the shapes of its records (the kinds of
#: ``encoding.py``) and the call that records one.
RECORD_SHAPES = {name for name in encoding.__all__ if isinstance(getattr(encoding, name), int)} | {"emit_fixed"}


def test_no_module_outside_the_trace_package_builds_or_merges_records() -> None:
    """The broker tells the recorder its facts (``send_received``, ``enqueued``,
    ``dispatched``, ``event`` ...); which of them share a record is the package's
    business alone."""
    found = []
    for path in sorted((ROOT / "minibroker").rglob("*.py")):
        if PACKAGE in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.ImportFrom)
                else [node.attr]
                if isinstance(node, ast.Attribute)
                else [node.id]
                if isinstance(node, ast.Name)
                else []
            )
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names if n in RECORD_SHAPES]
    assert found == []


class _Ticks:
    """A clock that moves one second per reading: lines that share a reading share a record."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def _lines(trace: Trace, out: io.StringIO) -> list[dict[str, object]]:
    trace.close()
    return [json.loads(line) for line in out.getvalue().splitlines()]


def _send(trace: Trace, msg: str, dest: str = "/queue/A") -> None:
    trace.send_received("s-1", dest, msg, 10, False, 4, None)


def test_a_send_enqueued_and_dispatched_at_once_is_one_record_of_four_lines() -> None:
    out = io.StringIO()
    trace = Trace(out, _Ticks(), broker="b")
    _send(trace, "m-1")
    trace.enqueued("/queue/A", "m-1", 10, True, 4, False, 1, lambda sid: f"s-{sid}")
    trace.dispatched(("s-2", "sub-1", "/queue/A"), "m-1", 10, True, 4, True)
    trace.send_routed()
    lines = _lines(trace, out)
    assert [(e["seq"], e["ts"], e["event"]) for e in lines] == [
        (1, 1.0, "send"),
        (2, 1.0, "enqueue"),
        (3, 1.0, "dispatch"),
        (4, 1.0, "ack"),
    ]
    assert lines[1]["session"] == "s-1" and lines[1]["cached"] is True
    assert lines[2]["redelivered"] is False  # a message sent a moment ago was never delivered
    assert lines[3]["mode"] == "auto" and lines[3]["sub"] == "sub-1"


def test_any_other_fact_writes_the_held_send_first() -> None:
    """The trace's order is the order of the facts: a send whose enqueue does not
    come next is written before what comes instead."""
    out = io.StringIO()
    trace = Trace(out, _Ticks(), broker="b")
    _send(trace, "m-1")
    trace.event("flow_block", session="s-1", dest="/queue/A", usage="memory", pct=100, msg=None)
    trace.send_routed()
    _send(trace, "m-2")
    trace.enqueued("/queue/B", "m-9", 10, False, 4, True, 0, str)  # another queue's message
    trace.send_routed()
    _send(trace, "m-3", "/topic/T")
    trace.dispatched(("s-2", "sub-1", "/topic/T"), "m-3", 10, False, 4, False)  # a topic: no enqueue
    trace.send_routed()
    lines = _lines(trace, out)
    assert [(e["ts"], e["event"], e.get("msg")) for e in lines] == [
        (1.0, "send", "m-1"),
        (2.0, "flow_block", None),
        (3.0, "send", "m-2"),
        (4.0, "enqueue", "m-9"),
        (5.0, "send", "m-3"),
        (6.0, "dispatch", "m-3"),
    ]
    assert "session" not in lines[3]  # no sending connection: no session
    assert [e["seq"] for e in lines] == list(range(1, 7))


def test_a_memory_trace_records_the_same_lines_as_a_file_trace() -> None:
    """(On a clock that stands still: a memory trace stamps each line of a record on its own.)"""
    out = io.StringIO()
    file_trace, memory = Trace(out, lambda: 7.0, broker="b"), MemoryTrace(lambda: 7.0, broker="b")
    for trace in (file_trace, memory):
        _send(trace, "m-1")
        trace.enqueued("/queue/A", "m-1", 10, False, 4, False, 1, lambda sid: f"s-{sid}")
        trace.send_routed()
        trace.dispatched(("s-2", "sub-1", "/queue/A"), "m-1", 10, True, 4, False)
    file_trace.close()
    assert dumps_events(memory.events(), broker="b") == out.getvalue()
