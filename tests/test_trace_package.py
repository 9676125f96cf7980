"""The trace package's shape: low in the import graph, its writer process run as a module."""

from __future__ import annotations

import ast
import sys
import time
from pathlib import Path

from minibroker.trace import Trace

ROOT = Path(__file__).resolve().parent.parent
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


def test_the_trace_package_imports_only_the_standard_library() -> None:
    """The broker imports the trace, and the writer process imports it on its own:
    nothing in it may import the broker (or anything not in the standard library)."""
    outside = sorted(
        f"{path.name} imports {name}"
        for path in PACKAGE.glob("*.py")
        for name in _imported(path)
        if name.partition(".")[0] not in sys.stdlib_module_names and name != "__future__"
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
