#!/usr/bin/env python3
"""One limited broker's RSS, phase by phase: what a backlog on disk costs in memory.

The target: memory accounting keeps the broker's RSS within 1.5 x
its ``memory_limit`` plus a fixed base. Messages in memory are charged to the
usages; a store-only backlog is not (only its index is in memory, and mostly
not even that: ``docs/design-notes.md``). This starts ``minibroker serve``
with the backlog limits (``bench/configs/backlog.toml``: 4 MB) and reads its
VmRSS from ``/proc``:

1. idle, after start-up;
2. warm: after 2,000 persistent messages went through a queue;
3. after producing ``--messages`` persistent messages with no consumer (all
   but the first few hundred store-only);
4. after draining them.

and prints them beside the bound, ``1.5 x memory_limit`` over the idle and
over the warm RSS::

    .venv/bin/python bench/rss.py [--messages 1000000] [--config FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from backlog import ask_statistics, consume, produce, queue_statistics
from brokers import BrokerStartError, Ours, proc_status_mb

from minibroker.config import load_config

HERE = Path(__file__).resolve().parent
WARM = 2000


def vm_rss_mb(pid: int) -> float:
    """The process's resident set size now, in MB (the harness's reader)."""
    return proc_status_mb(pid)["VmRSS"]


def measure(
    messages: int, config: Path, settle: float = 0.3, expires_in: float = 0, persistent: bool = True
) -> dict[str, float]:
    """RSS (MB) of a fresh broker with ``config`` after each phase, and the backlog's statistics."""
    with tempfile.TemporaryDirectory(prefix="minibroker-rss-") as workdir:
        broker = Ours("limits", Path(workdir), str(config))
        broker.start()
        try:
            pid = broker.pid
            assert pid is not None
            time.sleep(settle)
            phases = {"idle": vm_rss_mb(pid)}
            asyncio.run(produce(broker.port, "/queue/warm", WARM, 256))
            asyncio.run(consume(broker.port, "/queue/warm", WARM))
            time.sleep(settle)
            phases["warm"] = vm_rss_mb(pid)
            asyncio.run(produce(broker.port, "/queue/backlog", messages, 256, expires_in, persistent))
            time.sleep(settle)
            phases["backlog"] = vm_rss_mb(pid)
            stats = asyncio.run(queue_statistics(broker.port, "/queue/backlog"))
            broker_stats = asyncio.run(ask_statistics(broker.port, "/queue/ActiveMQ.Statistics.Broker"))
            asyncio.run(consume(broker.port, "/queue/backlog", messages))
            time.sleep(settle)
            phases["drained"] = vm_rss_mb(pid)
        finally:
            broker.stop()
    phases["store_only"] = stats.get("storeOnlyCount", 0)
    phases["index_bytes"] = broker_stats.get("indexBytes", 0)
    phases["index_spilled_bytes"] = broker_stats.get("indexSpilledBytes", 0)
    return phases


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1_000_000, help="backlog size (default 1,000,000)")
    parser.add_argument(
        "--config",
        type=Path,
        default=HERE / "configs" / "backlog.toml",
        help="the broker's configuration (default: bench/configs/backlog.toml, 4 MB)",
    )
    parser.add_argument(
        "--non-persistent",
        action="store_true",
        help="a non-persistent backlog, spilled to the temp store by the file cursor "
        "(use --config bench/configs/spill.toml)",
    )
    parser.add_argument(
        "--expires-in",
        type=float,
        default=0,
        metavar="S",
        help="give every backlog message an expires header S seconds ahead (default: none)",
    )
    a = parser.parse_args(argv)
    if a.expires_in < 0:
        parser.error(f"--expires-in must not be negative, not {a.expires_in:g}")
    if 0 < a.expires_in < 600:  # the drain waits for every message: none may expire during the run
        parser.error(f"--expires-in must be at least 600 s (the messages must outlive the run), not {a.expires_in:g}")
    if a.messages < 1:
        parser.error(f"--messages must be at least 1, not {a.messages}")
    limit_mb = load_config(a.config).system_usage.memory_limit / 2**20
    try:
        phases = measure(a.messages, a.config, expires_in=a.expires_in, persistent=not a.non_persistent)
    except BrokerStartError as exc:
        print(f"rss.py: {exc}", file=sys.stderr)
        return 2
    ttl = f", each expiring {a.expires_in:g} s ahead" if a.expires_in else ""
    kind = "non-persistent" if a.non_persistent else "persistent"
    print(f"# one broker, memory_limit {limit_mb:g} MB ({a.config}); {a.messages:,} {kind} messages x 256 B{ttl}")
    print("| phase | VmRSS MB |")
    print("|---|---|")
    for name in ("idle", "warm", "backlog", "drained"):
        label = f"{a.messages:,} produced ({phases['store_only']:,} store-only)" if name == "backlog" else name
        print(f"| {label} | {phases[name]:.1f} |")
    print()
    for base in ("idle", "warm"):
        bound = phases[base] + 1.5 * limit_mb
        verdict = "within" if phases["backlog"] <= bound else "OVER"
        print(
            f"bound over the {base} base: {phases[base]:.1f} + 1.5 x {limit_mb:g} = {bound:.1f} MB: "
            f"the backlog is {verdict} it"
        )
    print(f"index: {phases['index_bytes']:,} bytes in memory, {phases['index_spilled_bytes']:,} on disk")
    print(json.dumps(phases))
    return 0


if __name__ == "__main__":
    sys.exit(main())
