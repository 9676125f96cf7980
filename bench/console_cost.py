#!/usr/bin/env python3
"""console_cost.py - what one open web console page costs the broker, in CPU.

    .venv/bin/python bench/console_cost.py [--seconds 60]

Starts our broker with the web console (free ports) and measures the broker
process's CPU time (utime + stime from /proc) over --seconds with no page open,
then over --seconds with one console page open in Debian's headless Chromium
(which polls the statistics every second over STOMP over WebSocket). Prints
both as percent of one core, and the difference: the page's cost. On a shared
machine this is steadier than a throughput difference, which the other
processes' load swamps; a broker flat out on scenario A uses about one core,
so the page's percent of a core is about the throughput it takes away.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from brokers import ConsolePage, Ours  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid``, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def cpu_percent(pid: int, seconds: float) -> float:
    start_cpu, start = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return 100 * (cpu_seconds(pid) - start_cpu) / (time.monotonic() - start)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each measurement (default 60)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="minibroker-console-cost-") as tmp:
        broker = Ours("ours:console", Path(tmp), console_page=True)
        broker.start()
        try:
            assert broker.page is not None and broker.pid is not None
            broker.page.stop()  # first without the page
            time.sleep(2)
            without = cpu_percent(broker.pid, args.seconds)
            broker.page = ConsolePage(broker.page.url, Path(tmp) / "chromium-2")
            time.sleep(5)  # the page loads and connects
            with_page = cpu_percent(broker.pid, args.seconds)
        finally:
            broker.stop()
    print(f"broker CPU, no page:        {without:5.2f}% of a core over {args.seconds:.0f} s")
    print(f"broker CPU, one page open:  {with_page:5.2f}% of a core over {args.seconds:.0f} s")
    print(f"the page's cost:            {with_page - without:5.2f}% of a core")
    return 0


if __name__ == "__main__":
    sys.exit(main())
