"""``minibroker stat``: live statistics from a running broker.

Asks the broker's statistics destinations (``ActiveMQ.Statistics.*``, as
ActiveMQ's statisticsBrokerPlugin) over STOMP and prints tables, sizes in
binary units and stamped with the broker's time: the broker's memory, store
and temp percent; per destination its size split into ready (waiting) and
unacked (delivered, not acknowledged), counters, enqueue and dequeue rates
(per second over the last five seconds), consumers, messages cached and
store-only and memory of its own limit (ActiveMQ's MemoryPercentUsage,
qpid-stat's queue table); with ``--connections`` each connection's user,
protocol, outbound buffer and unacknowledged messages; and any diagnosis the
broker makes (consumers starving behind a blocked cursor ...). ``--watch`` refreshes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from datetime import UTC, datetime
from typing import Any

from minibroker.durability import size_text

from ..cli import CommandError
from ..stomp import StompClient, StompClientError
from ._common import FAILURE, add_connection_args, connected, describe, parse_float, run

__all__ = ["register", "fetch_statistics", "format_tables"]


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "stat",
        help="show live broker statistics",
        description=(__doc__ or "").replace("``", ""),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--destination",
        "-d",
        default=">",
        metavar="PATTERN",
        help="destinations to show, an ActiveMQ wildcard (default: all)",
    )
    parser.add_argument("--connections", action="store_true", help="also show connections")
    parser.add_argument("--subscriptions", action="store_true", help="also show subscriptions")
    parser.add_argument("--json", action="store_true", help="print the raw statistics as one JSON object")
    parser.add_argument("--watch", nargs="?", const="2", metavar="S", help="refresh every S seconds (default 2)")
    parser.add_argument("--timeout", default="5", metavar="S", help="how long to wait for the broker's answers")
    add_connection_args(parser)
    parser.set_defaults(func=main)


async def _ask(client: StompClient, reply: Any, what: str, timeout: float) -> list[dict[str, Any]]:
    await client.send(f"/queue/ActiveMQ.Statistics.{what}", b"", headers={"reply-to": "/temp-queue/minibroker-stat"})
    items: list[dict[str, Any]] = []
    while True:
        msg = await reply.get(timeout=timeout)
        total = int(msg.headers.get("statistics-total", "1"))
        if total:
            items.append(json.loads(msg.body))
        if len(items) >= total:
            return items


async def fetch_statistics(
    client: StompClient,
    pattern: str = ">",
    *,
    connections: bool = False,
    subscriptions: bool = False,
    timeout: float = 5.0,
) -> dict[str, Any]:
    """Ask a connected broker for its statistics; returns broker, destinations (and more)."""
    reply = await client.subscribe("/temp-queue/minibroker-stat")
    try:
        result: dict[str, Any] = {
            "broker": (await _ask(client, reply, "Broker", timeout))[0],
            "destinations": await _ask(client, reply, f"Destination.{pattern}", timeout),
        }
        if connections:
            result["connections"] = await _ask(client, reply, "Connection", timeout)
        if subscriptions:
            result["subscriptions"] = await _ask(client, reply, "Subscription", timeout)
    finally:
        await reply.unsubscribe()
    return result


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(row, widths, strict=True)))
        for row in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _store_detail(b: dict[str, Any]) -> str:
    """What the store's percent is made of: reserved (what the limit counts) and written."""
    if "storeWrittenBytes" not in b:
        return ""
    reserved = f"{size_text(b['storeUsage'])} of {size_text(b['storeLimit'])} reserved"
    written = size_text(b["storeWrittenBytes"])
    if b.get("storeRings"):
        return f" ({reserved} by {b['storeRings']} rings of {size_text(b['storeRingBytes'])}, {written} written)"
    return f" ({reserved}, {written} written)"


def _when(stats: dict[str, Any]) -> str:
    """The broker's ``timestamp`` (ms since the epoch) as UTC."""
    ms = stats.get("timestamp")
    if ms is None:
        return ""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return f" at {moment.strftime('%Y-%m-%d %H:%M:%S')}.{ms % 1000:03d} UTC"


def _of(used: int, limit: int) -> str:
    return f" ({size_text(used)} of {size_text(limit)})"


def _compact(count: int) -> str:
    """A size for a table cell: 512B, 15.1KiB."""
    return size_text(count).replace(" bytes", "B").replace(" ", "")


def _rate(value: float) -> str:
    return f"{value:.1f}"


def _store_state(b: dict[str, Any]) -> str:
    """`` (FULL: why)`` when the store is full or failed, else nothing."""
    state = b.get("storeState", "ok")
    return "" if state == "ok" else f" ({state.upper()}: {b.get('storeProblem', '')})"


def _plural(count: int, noun: str) -> str:
    """``1 connection``, ``2 connections``."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def format_tables(stats: dict[str, Any]) -> str:
    """The human-readable report for ``stats``."""
    b = stats["broker"]
    out = [
        f"broker {b['brokerName']}{_when(b)}: memory {b['memoryPercentUsage']}%"
        f"{_of(b['memoryUsage'], b['memoryLimit'])}, "
        f"store {b['storePercentUsage']}%{_store_state(b)}"
        f"{_store_detail(b) or _of(b['storeUsage'], b['storeLimit'])}, "
        f"temp {b['tempPercentUsage']}%{_of(b['tempUsage'], b['tempLimit'])}, "
        f"index {size_text(b.get('indexBytes', 0))} in memory (in no usage), "
        f"{size_text(b.get('indexSpilledBytes', 0))} on disk",
        f"  {_plural(b['connectionCount'], 'connection')}, {_plural(b['destinationCount'], 'destination')}, "
        f"{_plural(b['blockedProducers'], 'blocked send')}; messages {b['size']} ({b.get('readyCount', 0)} ready, "
        f"{b.get('inflightCount', 0)} unacked), in {_rate(b.get('enqueueRate', 0))}/s, "
        f"out {_rate(b.get('dequeueRate', 0))}/s",
        "",
    ]
    header = [
        "destination",
        "size",
        "ready",
        "unacked",
        "enqueued",
        "dequeued",
        "in/s",
        "out/s",
        "consumers",
        "cached",
        "store-only",
        "mem%",
        "memory",
        "discarded",
    ]
    rows = [
        [
            d["destinationName"],
            d["size"],
            d.get("readyCount", d["size"]),
            d.get("inflightCount", 0),
            d["enqueueCount"],
            d["dequeueCount"],
            _rate(d.get("enqueueRate", 0)),
            _rate(d.get("dequeueRate", 0)),
            d["consumerCount"],
            d["cachedCount"],
            d["storeOnlyCount"],
            d["memoryPercentUsage"],
            _compact(d["memoryUsage"]),
            d.get("discardedCount", 0),
        ]
        for d in stats["destinations"]
    ]  # (our own reply queue is not among them)
    out.append(_table(rows, header) if rows else "(no destinations)")
    out += [
        f"journal of {d['destinationName']} FULL ({_plural(d['journalLive'], 'live message')} in "
        f"{d['journalFiles']} files): {d['journalProblem']}"
        for d in stats["destinations"]
        if d.get("journalState") == "full"
    ]
    if "connections" in stats:
        header = [
            "connection",
            "peer",
            "user",
            "client-id",
            "protocol",
            "subs",
            "unacked",
            "out-bytes",
            "blocked",
            "not-read",
            "idle-read-s",
            "idle-write-s",
        ]
        rows = [
            [
                c["connection"],
                c["remoteAddress"],
                c.get("user", "-"),
                c["clientId"] or "-",
                c.get("protocol", "tcp"),
                c["subscriptions"],
                c["unacknowledged"],
                _compact(c["outboundQueuedBytes"]),
                c["blockedSends"],
                "yes" if c["readingPaused"] else "",
                c["secondsSinceLastRead"],
                c["secondsSinceLastWrite"],
            ]
            for c in stats["connections"]
        ]
        out += ["", _table(rows, header) if rows else "(no connections)"]
    if "subscriptions" in stats:
        header = ["subscription", "connection", "destination", "ack", "prefetch", "in-flight", "pending", "slow"]
        rows = [
            [
                s["subscription"],
                s["connection"],
                s["destinationName"],
                s["ack"],
                s["prefetchSize"],
                s["dispatchedQueueSize"],
                s["pendingQueueSize"],
                "yes" if s["slowConsumer"] else "",
            ]
            for s in stats["subscriptions"]
        ]
        out += ["", _table(rows, header) if rows else "(no subscriptions)"]
    for finding in b.get("diagnosis", []):
        out += ["", f"DIAGNOSIS {finding['pathology']}: {finding['summary']}", f"  cure: {finding['cure']}"]
    return "\n".join(out)


def main(args: argparse.Namespace) -> int:
    timeout = parse_float(args.timeout, "--timeout")
    interval = None if args.watch is None else parse_float(args.watch, "--watch")
    return run(_stat(args, timeout, interval))


async def _stat(args: argparse.Namespace, timeout: float, interval: float | None) -> int:
    async with connected(args) as client:
        try:
            while True:
                stats = await fetch_statistics(
                    client,
                    args.destination,
                    connections=args.connections,
                    subscriptions=args.subscriptions,
                    timeout=timeout,
                )
                text = json.dumps(stats, sort_keys=True) if args.json else format_tables(stats)
                if interval is not None and sys.stdout.isatty():
                    print("\x1b[H\x1b[2J", end="")
                print(text, flush=True)
                if interval is None:
                    break
                await asyncio.sleep(interval)
                if not sys.stdout.isatty():
                    print()
            await client.disconnect()
        except TimeoutError:
            raise CommandError(f"the broker did not answer within {timeout:g}s", FAILURE) from None
        except StompClientError as exc:
            raise CommandError(describe(exc), FAILURE) from None
    return 0
