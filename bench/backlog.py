#!/usr/bin/env python3
"""A persistent backlog drained through the store cursor (its target: the backlog drained at
least as fast as the same messages through memory, RSS bounded by the limits).

The shared harness runs producer and consumer at once, so in its scenario B
the queue never holds more than a message or two and nothing ever pages: a
memory limit changes nothing there. This benchmark builds the backlog first.
Per rep and per broker configuration:

1. produce N persistent messages to a queue with no consumer (a receipt every
   100 sends, at most 10 receipts outstanding);
2. then subscribe one auto-ack consumer and time how long it takes to receive
   all N ("consume": the consumer is the bottleneck, every message is paged in);
3. produce N again (untimed), then subscribe the consumer while a producer
   sends N more, and time until all 2N are received ("through": a persistent
   queue in use, producer and consumer at once over a standing backlog; under
   limits the new messages go to the store only too, and everything is paged).

Under ``--limits FILE`` (default: ``bench/configs/backlog.toml``, a 4 MB
memory limit) the backlog passes the cursor's high-water mark, so most of it
goes to the store only and the consumer's phase pages it in, ``max_page_size``
messages at a time. The plain broker (``--plain FILE``, default a 1 GB memory
limit) keeps it all in memory; the table says how many messages each broker
held store-only and paged in, read from its statistics over STOMP. Brokers run side
by side and the reps alternate which goes first; the table gives each phase's
msg/s and the ratio limits / plain, with each broker's peak RSS.

With ``--with-activemq`` it then runs the same phases against Debian's
ActiveMQ 5.17 (``apt-get install -y activemq``), once with a 4 MB memoryUsage
(``configs/activemq-backlog-limits.xml``: its store cursor pages from KahaDB)
and once with 600 MB (``configs/activemq-backlog-plain.xml``: all cached), one
after the other on port 61613 (the vendored scripts allow one instance), and
prints the same ratio for it: what paging costs the reference broker.

    .venv/bin/python bench/backlog.py [--messages 100000] [--reps 3] [--limits FILE] [--with-activemq]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from brokers import ActiveMQ, BrokerStartError, Ours, RssSampler

from minibroker.frames import Frame
from minibroker.protocol import FrameParser, encode

HERE = Path(__file__).resolve().parent
RECEIPT_EVERY = 100
RECEIPT_WINDOW = 10


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, FrameParser]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    parser = FrameParser(role="client")
    writer.write(encode(Frame("CONNECT", {"accept-version": "1.2", "host": "localhost"}, b"")))
    while True:
        frames = parser.feed(await reader.read(65536))
        if frames:
            if frames[0].command != "CONNECTED":
                raise RuntimeError(f"broker refused: {frames[0].headers.get('message')}")
            return reader, writer, parser


async def produce(port: int, dest: str, count: int, size: int, expires_in: float = 0, persistent: bool = True) -> float:
    """Send ``count`` persistent messages (``expires_in`` seconds: each with an
    ``expires`` header that far ahead; not ``persistent``: without the header);
    seconds until the last receipt."""
    reader, writer, parser = await _connect(port)
    body = b"x" * size
    started = time.perf_counter()
    outstanding = 0
    for i in range(count):
        headers = {"destination": dest, "persistent": "true"} if persistent else {"destination": dest}
        if expires_in:
            headers["expires"] = str(int((time.time() + expires_in) * 1000))
        last = i == count - 1
        if (i + 1) % RECEIPT_EVERY == 0 or last:
            headers["receipt"] = str(i)
            outstanding += 1
        writer.write(encode(Frame("SEND", headers, body)))
        while outstanding >= RECEIPT_WINDOW or (last and outstanding):
            await writer.drain()
            for frame in parser.feed(await reader.read(65536)):
                if frame.command == "ERROR":
                    raise RuntimeError(f"ERROR while producing: {frame.headers.get('message')}")
                if frame.command == "RECEIPT":
                    outstanding -= 1
    elapsed = time.perf_counter() - started
    writer.close()
    return elapsed


async def consume(port: int, dest: str, count: int) -> float:
    """Receive ``count`` messages (auto ack); seconds from SUBSCRIBE to the last."""
    reader, writer, parser = await _connect(port)
    started = time.perf_counter()
    writer.write(encode(Frame("SUBSCRIBE", {"destination": dest, "id": "0", "ack": "auto"}, b"")))
    received = 0
    while received < count:
        data = await asyncio.wait_for(reader.read(262144), 60)
        if not data:
            raise RuntimeError(f"connection closed after {received} of {count} messages")
        for frame in parser.feed(data):
            if frame.command == "ERROR":
                raise RuntimeError(f"ERROR while consuming: {frame.headers.get('message')}")
            received += frame.command == "MESSAGE"
    elapsed = time.perf_counter() - started
    writer.close()
    return elapsed


async def through(port: int, dest: str, count: int, size: int) -> float:
    """With ``count`` messages already waiting, send ``count`` more while one consumer
    drains the queue: seconds from SUBSCRIBE until all ``2 * count`` are received."""
    consumer = asyncio.ensure_future(consume(port, dest, 2 * count))
    await produce(port, dest, count, size)
    return await consumer


async def queue_statistics(port: int, dest: str) -> dict:
    """The destination's statistics, asked of the broker over STOMP (the statistics plugin)."""
    return await ask_statistics(port, f"/queue/ActiveMQ.Statistics.Destination.{dest[len('/queue/') :]}")


async def ask_statistics(port: int, address: str) -> dict:
    """What the statistics destination ``address`` answers (a request with a ``reply-to``)."""
    reader, writer, parser = await _connect(port)
    reply_to = "/temp-queue/backlog-stats"
    writer.write(encode(Frame("SUBSCRIBE", {"destination": reply_to, "id": "s"}, b"")))
    writer.write(encode(Frame("SEND", {"destination": address, "reply-to": reply_to}, b"")))
    while True:
        data = await asyncio.wait_for(reader.read(65536), 10)
        for frame in parser.feed(data):
            if frame.command == "ERROR":
                raise RuntimeError(f"statistics refused: {frame.headers.get('message')}")
            if frame.command == "MESSAGE":
                writer.close()
                return json.loads(frame.body)


def run_phases(port: int, dest: str, count: int, size: int, statistics: bool = True) -> dict[str, float]:
    """One rep's phases against one broker: msg/s of each, and (``statistics``:
    asked of the broker over STOMP) how many messages were store-only and paged in."""
    p = asyncio.run(produce(port, dest, count, size))
    before = asyncio.run(queue_statistics(port, dest)) if statistics else {}
    c = asyncio.run(consume(port, dest, count))
    after = asyncio.run(queue_statistics(port, dest)) if statistics else {}
    asyncio.run(produce(port, dest, count, size))  # a standing backlog again
    t = asyncio.run(through(port, dest, count, size))
    return {
        "produce": count / p,
        "consume": count / c,
        "through": 2 * count / t,
        "store_only": before.get("storeOnlyCount", -1),
        "paged_in": after.get("pagedInCount", -1),
    }


def ratio_table(results: dict[str, dict[str, list[float]]], reference: str, limited: str) -> list[str]:
    """Markdown rows: each phase's msg/s under ``reference`` and ``limited``, and their ratio."""
    lines = [
        f"| phase | {reference} msg/s, median [min–max] | {limited} msg/s | {limited} / {reference} (paired reps) |",
        "|---|---|---|---|",
    ]
    for phase in ("produce", "consume", "through"):
        plain, limits = results[reference][phase], results[limited][phase]
        paired = [l / p for l, p in zip(limits, plain, strict=True)]
        lines.append(
            f"| {phase} | {statistics.median(plain):,.0f} [{min(plain):,.0f}–{max(plain):,.0f}] "
            f"| {statistics.median(limits):,.0f} [{min(limits):,.0f}–{max(limits):,.0f}] "
            f"| **{statistics.median(limits) / statistics.median(plain):.2f}** "
            f"[{min(paired):.2f}–{max(paired):.2f}] |"
        )
    return lines


def activemq_reps(a: argparse.Namespace, workdir: Path) -> tuple[dict[str, dict[str, list[float]]], dict[str, float]]:
    """The phases against ActiveMQ, limited then plain (alternating first each rep),
    each after a discarded warm-up round on another queue."""
    sampler = RssSampler()
    sampler.start()
    results: dict[str, dict[str, list[float]]] = {"amq-plain": {}, "amq-limits": {}}
    peaks: dict[str, float] = {}
    try:
        for rep in range(a.reps):
            names = ["amq-limits", "amq-plain"] if rep % 2 == 0 else ["amq-plain", "amq-limits"]
            for name in names:
                conf = HERE / "configs" / f"activemq-backlog-{name.split('-')[1]}.xml"
                amq = ActiveMQ(workdir, name=name, conf=conf, heap="-Xms1G -Xmx1G")
                amq.start()
                try:
                    assert amq.pid is not None
                    sampler.watch(amq.pid)
                    # Its JIT warms up on a discarded round first, as compare.py's warm-ups do.
                    run_phases(amq.port, "/queue/backlog.warmup", min(a.messages, 20_000), a.size, statistics=False)
                    got = run_phases(amq.port, f"/queue/backlog.{rep}", a.messages, a.size, statistics=False)
                    peaks[name] = max(peaks.get(name, 0.0), sampler.peak(amq.pid))
                finally:
                    amq.stop()
                for phase, value in got.items():
                    results[name].setdefault(phase, []).append(value)
                print(
                    f"rep {rep + 1} {name}: produce {got['produce']:,.0f} msg/s, consume {got['consume']:,.0f} "
                    f"msg/s, through {got['through']:,.0f} msg/s",
                    file=sys.stderr,
                )
    finally:
        sampler.stop()
    return results, peaks


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument(
        "--limits",
        default=str(HERE / "configs" / "backlog.toml"),
        help="configuration of the broker with limits (default: %(default)s)",
    )
    ap.add_argument(
        "--plain",
        default=str(HERE / "configs" / "backlog-plain.toml"),
        help="configuration of the reference broker, which must not page (default: %(default)s)",
    )
    ap.add_argument(
        "--with-activemq",
        action="store_true",
        help="then run the same phases against Debian's ActiveMQ, limited and plain",
    )
    a = ap.parse_args(argv)
    if a.messages < 1 or a.reps < 1:
        ap.error("--messages and --reps must be at least 1")
    if a.with_activemq:
        try:
            ActiveMQ.check_installed()
        except BrokerStartError as exc:
            ap.error(str(exc))
    with tempfile.TemporaryDirectory(prefix="minibroker-backlog-") as tmp:
        brokers = [Ours("plain", Path(tmp), config=a.plain), Ours("limits", Path(tmp), config=a.limits)]
        sampler = RssSampler()
        results: dict[str, dict[str, list[float]]] = {
            b.name: {"produce": [], "consume": [], "through": [], "store_only": [], "paged_in": []} for b in brokers
        }
        peaks: dict[str, float] = {}
        try:
            for b in brokers:
                b.start()
                sampler.watch(b.pid)
            sampler.start()
            for rep in range(a.reps):
                order = brokers if rep % 2 == 0 else brokers[::-1]
                for b in order:
                    got = run_phases(b.port, f"/queue/backlog.{rep}", a.messages, a.size)
                    for phase, value in got.items():
                        results[b.name][phase].append(value)
                    print(
                        f"rep {rep + 1} {b.name}: produce {got['produce']:,.0f} msg/s, "
                        f"consume {got['consume']:,.0f} msg/s, through {got['through']:,.0f} msg/s; "
                        f"store-only after producing {got['store_only']}, "
                        f"paged in {got['paged_in']}",
                        file=sys.stderr,
                    )
            peaks = {b.name: sampler.peak(b.pid) for b in brokers}
        finally:
            sampler.stop()
            for b in brokers:
                b.stop()
        if a.with_activemq:
            try:
                amq_results, amq_peaks = activemq_reps(a, Path(tmp))
            except BrokerStartError as exc:
                print(f"backlog.py: ActiveMQ could not be started: {exc}", file=sys.stderr)
                return 2
    print(
        f"# backlog of {a.messages:,} persistent messages x {a.size} B, produced then drained; "
        f"{a.reps} reps; limits: {a.limits}"
    )
    print("\n".join(ratio_table(results, "plain", "limits")))
    for b in ("plain", "limits"):
        print(
            f"\n{b}: store-only after producing (per rep) {results[b]['store_only']}, "
            f"paged in while draining {results[b]['paged_in']}"
        )
    print(f"\npeak RSS MB: plain {peaks.get('plain', 0):.1f}, limits {peaks.get('limits', 0):.1f}")
    if a.with_activemq:
        print(
            f"\n# ActiveMQ {ActiveMQ.version() or '(version unknown)'}, the same phases, one instance at a time; "
            "amq-limits: a 4 MB memoryUsage, amq-plain: 600 MB (configs/activemq-backlog-*.xml), 1 GB heap"
        )
        print("\n".join(ratio_table(amq_results, "amq-plain", "amq-limits")))
        print(
            f"\npeak RSS MB: amq-plain {amq_peaks.get('amq-plain', 0):.1f}, "
            f"amq-limits {amq_peaks.get('amq-limits', 0):.1f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
