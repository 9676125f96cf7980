#!/usr/bin/env python3
"""Restart time with many persistent messages in the journal (its target: a restart
with a million messages in a few seconds, nothing read into memory).

Fills a data directory with N persistent messages (written through the
broker's own store, as a broker would), then times what a restart does before
it accepts connections: open the journals (scan, CRC-check, index), recover
every message into its queue (store-only: nothing is read into memory), and
start listening. Prints one JSON line.

    python bench/restart.py --messages 1000000 [--size 256] [--layout growing] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import shutil
import tempfile
import time
from pathlib import Path

from minibroker.config import BrokerConfig
from minibroker.connection import SystemClock
from minibroker.core import Broker
from minibroker.durability import MessageStore, encode_payload
from minibroker.edge import BrokerServer


def fill(data: Path, config: BrokerConfig, messages: int, size: int) -> float:
    store = MessageStore(config.store, data)
    body = b"x" * size
    started = time.perf_counter()
    for seq in range(1, messages + 1):
        headers = {
            "destination": "/queue/restart",
            "timestamp": "0",
            "expires": "0",
            "priority": "4",
            "persistent": "true",
        }
        payload = encode_payload(
            seq, f"ID:bench-0-{seq}", headers, body, persistent=True, priority=4, expires=0, timestamp=0
        )
        store.enqueue("/queue/restart", payload)
    store.close()
    return time.perf_counter() - started


async def restart(data: Path, config: BrokerConfig) -> dict:
    t0 = time.perf_counter()
    store = MessageStore(config.store, data)
    t1 = time.perf_counter()
    broker = Broker(config, SystemClock(), store=store)
    recovered = broker.recover()
    t2 = time.perf_counter()
    server = BrokerServer(broker)
    await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"CONNECT\naccept-version:1.2\nhost:h\n\n\x00")
    await reader.readuntil(b"\x00")
    t3 = time.perf_counter()
    writer.close()
    await server.close()
    broker.close()
    return {
        "recovered": recovered,
        "open_journal_s": round(t1 - t0, 2),
        "recover_s": round(t2 - t1, 2),
        "accepting_connections_s": round(t3 - t0, 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--layout", choices=("growing", "ring"), default="growing")
    ap.add_argument("--keep", metavar="DIR", help="use (and keep) this data directory instead of a temporary one")
    a = ap.parse_args()
    config = BrokerConfig().replace(store={"layout": a.layout, "fsync": "never"})
    data = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="minibroker-restart-"))
    try:
        fill_s = fill(data, config, a.messages, a.size) if not (data / "journal").exists() else 0.0
        result = asyncio.run(restart(data, config))
        result.update(
            {
                "messages": a.messages,
                "size": a.size,
                "layout": a.layout,
                "fill_s": round(fill_s, 1),
                "journal_bytes": sum(p.stat().st_size for p in (data / "journal").rglob("*") if p.is_file()),
            }
        )
        print(json.dumps(result))
    finally:
        if not a.keep:
            shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
