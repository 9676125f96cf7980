#!/usr/bin/env python3
"""startup.py - how long ``minibroker serve`` takes from its start to its STOMP port open.

    .venv/bin/python bench/startup.py --starts 10 [--floor]
    MINIBROKER_CORE=interpreted .venv/bin/python bench/startup.py --starts 10   # the interpreted build

Starts the broker ``--starts`` times, one after the other, as compare.py does
(``bench/brokers.py``: ``minibroker serve`` on a free port, a fresh data
directory, the embedded configuration), and times each from the process's
start to the first accepted connection on its STOMP port: the interpreter's
start, the imports, the configuration, opening the empty store and listening.
Each broker is stopped before the next starts. ``--floor`` also times, the
same way, a Python process that only opens a listening socket (nothing but
``socket`` imported): what any broker written in Python pays before its port
opens, on the same machine in the same minutes.

The broker's modules are byte-compiled first (``compileall``), as an
installed broker's are (pip compiles them at install; a checkout keeps
``__pycache__`` after its first run): without that, where
``PYTHONDONTWRITEBYTECODE`` is set and nothing is cached, every start compiles
each module from its source, which measured 0.7 s more (1.59 against 0.89 s
under a load of 6). ``--no-compile`` times the starts as the tree is.

Prints a Markdown table (the median, the fastest and the slowest start, RSS at
start, the build and the loop the broker named) and keeps the JSON in
``bench/results/`` (``report.py``). The machine's load moves the figure: the
load average before and after is printed with it.
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import report  # noqa: E402
from brokers import Ours, free_port, start_listening, terminate  # noqa: E402

#: The project's root, and the packages a start imports (byte-compiled before the starts).
ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("minibroker", "storage", "clients")

#: The floor: the interpreter's start and a listening socket, nothing else.
FLOOR = (
    "import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); "
    "s.listen(); time.sleep(600)"
)


def measure(starts: int, config: str | None) -> list[dict]:
    """The ``info`` of each start (``startup_ms``, ``rss_mb_at_start``, ``core``, ``loop``)."""
    runs = []
    for i in range(starts):
        workdir = Path(tempfile.mkdtemp(prefix="minibroker-startup-"))
        broker = Ours(f"start{i + 1}", workdir, config)
        try:
            broker.start()
            runs.append(dict(broker.info))
        finally:
            broker.stop()
            shutil.rmtree(workdir, ignore_errors=True)
    return runs


def byte_compile() -> bool:
    """Write the bytecode of the broker's packages (what an installed broker has);
    False if a module could not be compiled."""
    return all(compileall.compile_dir(ROOT / package, quiet=1) for package in PACKAGES)


def measure_floor(starts: int) -> list[int]:
    """Milliseconds from start to port open of ``FLOOR``, ``starts`` times."""
    out = []
    with tempfile.TemporaryDirectory(prefix="minibroker-startup-floor-") as workdir:
        for _ in range(starts):
            port = free_port()
            t0 = time.monotonic()
            proc = start_listening("floor", [sys.executable, "-c", FLOOR, str(port)], Path(workdir) / "log", port, 20.0)
            out.append(round((time.monotonic() - t0) * 1000))
            terminate(proc)
    return out


def row(label: str, ms: list[int], runs: list[dict]) -> list[str]:
    """A table row: the median, fastest and slowest start, RSS at start, build and loop."""
    first = runs[0] if runs else {}
    return [
        label,
        str(len(ms)),
        f"{statistics.median(ms) / 1000:.2f} s",
        f"{min(ms) / 1000:.2f} s",
        f"{max(ms) / 1000:.2f} s",
        f"{statistics.median(r['rss_mb_at_start'] or 0 for r in runs):.1f} MB" if runs else "-",
        first.get("core") or "-",
        first.get("loop") or "-",
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--starts", type=int, default=10, help="how many starts (default 10)")
    ap.add_argument("--config", metavar="FILE", help="TOML configuration for the broker (default: embedded)")
    ap.add_argument("--floor", action="store_true", help="also time a Python process that only opens its port")
    ap.add_argument("--json", metavar="FILE", help="where the JSON goes (default bench/results/)")
    ap.add_argument(
        "--no-compile", action="store_true", help="do not byte-compile the broker's modules before the starts"
    )
    a = ap.parse_args(argv)
    if a.starts < 1:
        ap.error("--starts must be >= 1")
    if not a.no_compile and not byte_compile():
        print("a module of the broker does not compile", file=sys.stderr)
        return 1
    bytecode = "as the tree is" if a.no_compile else "compiled first"
    load_before = os.getloadavg()
    runs = measure(a.starts, a.config)
    ms = [r["startup_ms"] for r in runs]
    floor = measure_floor(a.starts) if a.floor else []
    load_after = os.getloadavg()
    rows = [row("minibroker serve", ms, runs)]
    if floor:
        rows.append(row("floor: python, a listening socket", floor, []))
    report.print_table(
        ["process", "starts", "start to port open, median", "fastest", "slowest", "RSS at start", "core", "event loop"],
        rows,
    )
    print(f"the broker's bytecode: {bytecode}")
    print(
        "load average (1, 5, 15 min): "
        + ", then ".join(" ".join(f"{x:.2f}" for x in v) for v in (load_before, load_after))
    )
    report.save(
        "startup",
        {
            "starts": runs,
            "startup_ms": ms,
            "bytecode": bytecode,
            "floor_ms": floor,
            "load_before": load_before,
            "load_after": load_after,
        },
        a.json,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
