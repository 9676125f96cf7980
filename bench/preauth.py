#!/usr/bin/env python3
"""Hostile sockets before authentication: what they cost the broker's memory.

Starts the real ``minibroker serve`` (the embedded configuration, or
``--config``), reads its idle RSS, then opens ``--sockets`` connections that
each send a CONNECT announcing ``content-length:104857600`` (100 MB) and then
trickle its body at ``--rate`` bytes per second per socket, for ``--seconds``,
never sending it whole, all from 127.0.0.2 (the bystander's address is
127.0.0.1). With a small ``--content-length`` (under the limit on a
frame before login) the sockets are not refused at once but hold their
incomplete CONNECTs as long as the broker lets them.
Meanwhile a bystander connects, sends a persistent message with a receipt and
receives it, again and again. Reported:

- the broker's peak RSS during the attack (sampled every 0.1 s), against its
  idle RSS and the goal (under 200 MB with 1,000 sockets);
- how many hostile sockets the broker accepted, closed (with or without an
  ERROR first) or refused;
- the bystander's round trips (median, worst) and failures.

The run stops early (and says so) if the broker's RSS passes ``--rss-cap``
MB, so an unprotected broker cannot take the machine with it. Prints a table
and leaves JSON under bench/results/::

    .venv/bin/python bench/preauth.py [--sockets 1000] [--seconds 20] [--rate 16384] [--config FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from brokers import BrokerStartError, Ours, RssSampler, proc_status_mb
from report import print_table, save

from clients.stomp import StompClient, StompClientError

GOAL_MB = 200
HUGE = 100 * 1024 * 1024
#: Where the hostile sockets come from (the bystander connects from 127.0.0.1).
HOSTILE_ADDRESS = "127.0.0.2"


@dataclass
class Attack:
    opened: int = 0
    refused: int = 0
    errored: int = 0  # the broker sent something (an ERROR) before closing
    closed: int = 0
    sent: int = 0
    round_trips: list[float] = field(default_factory=list)
    bystander_failures: list[str] = field(default_factory=list)
    capped: bool = False


async def hostile(port: int, attack: Attack, rate: int, until: float, length: int) -> None:
    """One socket: a CONNECT announcing ``length`` bytes, then its body a little at a time."""
    try:
        # From another loopback address than the bystander's: the broker's limit on
        # connections not logged in per address (100) applies to the attacker alone.
        reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(HOSTILE_ADDRESS, 0))
    except OSError:
        attack.refused += 1
        return
    attack.opened += 1
    head = f"CONNECT\naccept-version:1.2\nhost:localhost\ncontent-length:{length}\n\n".encode()
    left = length
    answered = asyncio.ensure_future(reader.read(1))
    try:
        writer.write(head)
        interval = 0.25
        step = max(1, int(rate * interval))
        while time.monotonic() < until and not answered.done():
            piece = min(step, left - 1)  # never the whole body: the frame stays incomplete
            if piece > 0:
                writer.write(b"x" * piece)
                await asyncio.wait_for(writer.drain(), timeout=5)
                attack.sent += piece
                left -= piece
            await asyncio.wait([answered], timeout=interval)
        if answered.done():
            if answered.result():
                attack.errored += 1
            attack.closed += 1
    except (TimeoutError, OSError):
        attack.closed += 1
    finally:
        answered.cancel()
        writer.close()


async def bystander(port: int, attack: Attack, until: float) -> None:
    """Connect, send a persistent message with a receipt, receive it; over and over."""
    n = 0
    while time.monotonic() < until:
        started = time.monotonic()
        try:
            async with await StompClient.connect(port=port, connect_timeout=30) as client:
                sub = await client.subscribe(f"/queue/bystander{n}")
                await client.send(
                    f"/queue/bystander{n}", "still here", headers={"persistent": "true"}, receipt=True, timeout=30
                )
                await sub.get(timeout=30)
            attack.round_trips.append(time.monotonic() - started)
        except (StompClientError, OSError, TimeoutError) as exc:
            attack.bystander_failures.append(f"{type(exc).__name__}: {exc}")
        n += 1
        await asyncio.sleep(0.2)


async def _attack(broker: Ours, sockets: int, seconds: float, rate: int, cap_mb: float, length: int) -> Attack:
    attack = Attack()
    until = time.monotonic() + seconds
    tasks = [asyncio.ensure_future(bystander(broker.port, attack, until))]
    for _ in range(sockets):
        tasks.append(asyncio.ensure_future(hostile(broker.port, attack, rate, until, length)))
        await asyncio.sleep(0)  # let it connect before the next
    while time.monotonic() < until:
        if proc_status_mb(broker.pid or 0).get("VmRSS", 0.0) > cap_mb:
            attack.capped = True
            for task in tasks:
                task.cancel()
            break
        await asyncio.sleep(0.1)
    await asyncio.gather(*tasks, return_exceptions=True)
    return attack


def run(
    sockets: int, seconds: float, rate: int, config: str | None, cap_mb: float, workdir: Path, length: int = HUGE
) -> dict:
    broker = Ours("preauth", workdir, config)
    sampler = RssSampler(0.1)
    sampler.start()
    broker.start()
    try:
        time.sleep(0.5)
        assert broker.pid is not None
        idle = proc_status_mb(broker.pid).get("VmRSS", 0.0)
        sampler.watch(broker.pid)
        sampler.reset(broker.pid)
        attack = asyncio.run(_attack(broker, sockets, seconds, rate, cap_mb, length))
        peak = sampler.peak(broker.pid)
        alive = broker.exit_status() is None
    finally:
        sampler.stop()
        broker.stop()
    trips = sorted(attack.round_trips)
    return {
        "sockets": sockets,
        "seconds": seconds,
        "rate_per_socket": rate,
        "content_length": length,
        "config": config or "embedded default",
        "idle_rss_mb": idle,
        "peak_rss_mb": peak,
        "goal_mb": GOAL_MB,
        "met": peak < GOAL_MB and not attack.capped,
        "capped_at_mb": cap_mb if attack.capped else None,
        "broker_alive": alive,
        "opened": attack.opened,
        "refused": attack.refused,
        "closed_by_broker": attack.closed,
        "answered_before_close": attack.errored,
        "hostile_bytes_sent": attack.sent,
        "bystander_round_trips": len(trips),
        "bystander_median_ms": round(statistics.median(trips) * 1000, 1) if trips else None,
        "bystander_worst_ms": round(trips[-1] * 1000, 1) if trips else None,
        "bystander_failures": attack.bystander_failures[:5],
        "bystander_failed": len(attack.bystander_failures),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sockets", type=int, default=1000, help="hostile connections (default 1000)")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long they trickle (default 20)")
    parser.add_argument("--rate", type=int, default=16384, help="body bytes per second per socket (default 16384)")
    parser.add_argument(
        "--content-length",
        type=int,
        default=HUGE,
        help="the CONNECT's announced body, never sent whole (default 104857600: 100 MB)",
    )
    parser.add_argument(
        "--rss-cap", type=float, default=1500.0, help="stop the attack past this RSS in MB (default 1500)"
    )
    parser.add_argument("--config", help="broker configuration (default: the embedded one)")
    parser.add_argument("--json", help="write the JSON here instead of bench/results/")
    a = parser.parse_args(argv)
    if a.sockets < 1 or a.seconds <= 0 or a.rate <= 0 or a.content_length < 2:
        parser.error("--sockets must be at least 1, --seconds and --rate positive, --content-length at least 2")
    with tempfile.TemporaryDirectory(prefix="minibroker-preauth-") as workdir:
        try:
            r = run(a.sockets, a.seconds, a.rate, a.config, a.rss_cap, Path(workdir), a.content_length)
        except BrokerStartError as exc:
            print(f"preauth: {exc}", file=sys.stderr)
            return 1
    capped = f" (stopped at {r['capped_at_mb']:.0f} MB)" if r["capped_at_mb"] else ""
    print_table(
        [
            "hostile sockets",
            "CONNECT body",
            "accepted",
            "closed by broker",
            "refused",
            "idle RSS MB",
            "peak RSS MB",
            f"goal < {GOAL_MB} MB",
            "bystander trips",
            "median ms",
            "worst ms",
            "failed",
        ],
        [
            [
                r["sockets"],
                f"{r['content_length']:,} B",
                r["opened"],
                r["closed_by_broker"],
                r["refused"],
                r["idle_rss_mb"],
                f"{r['peak_rss_mb']}{capped}",
                "met" if r["met"] else "NOT met",
                r["bystander_round_trips"],
                r["bystander_median_ms"],
                r["bystander_worst_ms"],
                r["bystander_failed"],
            ]
        ],
    )
    save("preauth", r, a.json)
    return 0 if r["met"] and r["broker_alive"] else 1


if __name__ == "__main__":
    sys.exit(main())
