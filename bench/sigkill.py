#!/usr/bin/env python3
"""SIGKILL rounds: nothing receipted is lost, nothing acknowledged comes back.

Each round starts the real ``minibroker serve`` on one data directory, runs a
producer (persistent SENDs, each with a receipt, up to ``--window`` in
flight) and a client-individual consumer (each ACK with a receipt) against one
queue at once, and SIGKILLs the broker at a random moment 0.3 to 1.5 s in.
After the last round the broker starts once more and a consumer drains the
queue. Counted over the whole run:

- ``lost``: messages whose SEND got a RECEIPT and that no consumer ever
  received, or that one received but never sent an ACK for (its connection
  had died) and that never came again (the final drain takes everything
  left);
- ``ACK unconfirmed``: messages received and ACKed, the ACK's RECEIPT lost in
  the kill, and never delivered again: allowed (the broker applied the ACK
  before it died; a SIGKILL's reset can drop a RECEIPT already sent), but
  counted apart, since a client cannot tell it from a loss;
- ``after ack``: deliveries of a message after its ACK got a RECEIPT;
- ``duplicated``: a message delivered twice on one connection;
- ``redelivered``: deliveries again after a kill of a message whose ACK was
  not confirmed (allowed: the broker could not know), for scale.

With ``--backlog N`` the queue first receives N persistent messages and the
broker runs under ``configs/sigkill-backlog.toml`` (a 1 MB memory limit), so
the rounds run over a deep store-only backlog that is paged in as it drains.
Prints a table and leaves JSON under bench/results/::

    .venv/bin/python bench/sigkill.py [--rounds 100] [--backlog 20000] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from brokers import BrokerStartError, Ours
from report import print_table, save

from clients.stomp import ConnectionLost, StompClient, StompClientError

HERE = Path(__file__).resolve().parent
QUEUE = "/queue/sigkill"
BACKLOG_CONFIG = HERE / "configs" / "sigkill-backlog.toml"
GONE = (StompClientError, ConnectionLost, ConnectionError, TimeoutError, OSError)


@dataclass
class Ledger:
    """What the clients were told, and what they saw, over every round."""

    next_id: int = 0
    attempted: int = 0
    receipted: set[int] = field(default_factory=set)
    confirmed: set[int] = field(default_factory=set)  # ACK receipted
    acked: set[int] = field(default_factory=set)  # ACK written on an open connection
    deliveries: int = 0
    after_ack: list[int] = field(default_factory=list)
    duplicated: list[int] = field(default_factory=list)
    redelivered: int = 0
    delivered_ever: set[int] = field(default_factory=set)
    unknown: list[str] = field(default_factory=list)  # bodies no producer sent


def _track(tasks: set[asyncio.Task], task: asyncio.Task) -> None:
    """Keep ``task`` in ``tasks`` until it ends; its error (the broker died) is expected, not reported."""
    tasks.add(task)

    def done(t: asyncio.Task) -> None:
        tasks.discard(t)
        if not t.cancelled():
            t.exception()

    task.add_done_callback(done)


@contextlib.asynccontextmanager
async def _connected(port: int, tasks: set[asyncio.Task], client_id: str | None = None) -> AsyncIterator[StompClient]:
    """A client for the body; the broker dying under it ends the body quietly, and
    the requests still in ``tasks`` are collected before the client is closed."""
    client = await StompClient.connect(port=port, connect_timeout=10, client_id=client_id)
    try:
        yield client
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.disconnect()
    except GONE:
        pass
    finally:
        await asyncio.gather(*tasks, return_exceptions=True)
        client.close()


async def produce(port: int, ledger: Ledger, window: int, count: int | None = None, destination: str = QUEUE) -> None:
    """Persistent SENDs with a receipt each until the broker dies (or ``count`` are receipted)."""
    in_flight: set[asyncio.Task] = set()
    with contextlib.suppress(*GONE):  # the broker died before the connection was made
        async with _connected(port, in_flight) as client:

            async def one(n: int) -> None:
                await client.send(destination, f"m{n}", headers={"persistent": "true"}, receipt=True, timeout=30)
                ledger.receipted.add(n)

            while (count is None or ledger.next_id < count) and not client.is_closed:
                n = ledger.next_id
                ledger.next_id += 1
                ledger.attempted += 1
                _track(in_flight, asyncio.ensure_future(one(n)))
                if len(in_flight) >= window:
                    await asyncio.wait(in_flight, return_when=asyncio.FIRST_COMPLETED)


async def consume(
    port: int,
    ledger: Ledger,
    prefetch: int,
    idle: float | None,
    destination: str = QUEUE,
    client_id: str | None = None,
    headers: dict[str, str] | None = None,
) -> None:
    """Receive and ACK with a receipt each until the broker dies (or nothing comes for ``idle`` s).
    ``client_id`` and ``headers`` (of the SUBSCRIBE): for a durable subscription."""
    seen_here: set[int] = set()
    acks: set[asyncio.Task] = set()
    with contextlib.suppress(*GONE):
        async with _connected(port, acks, client_id) as client:

            async def ack(message: object, n: int) -> None:
                if client.is_closed:
                    return  # never sent: the message must come again
                ledger.acked.add(n)  # written at once by ack() below (no await before)
                await client.ack(message, receipt=True, timeout=30)  # type: ignore[arg-type]
                ledger.confirmed.add(n)

            sub = await client.subscribe(destination, ack="client-individual", prefetch=prefetch, headers=headers)
            while True:
                try:
                    message = await sub.get(timeout=idle)
                except TimeoutError:
                    break
                body = message.body.decode()
                if not body.startswith("m") or not body[1:].isdecimal():
                    ledger.unknown.append(body[:40])
                    continue
                n = int(body[1:])
                ledger.deliveries += 1
                if n in ledger.confirmed:
                    ledger.after_ack.append(n)
                if n in seen_here:
                    ledger.duplicated.append(n)
                elif n in ledger.delivered_ever:
                    ledger.redelivered += 1
                seen_here.add(n)
                ledger.delivered_ever.add(n)
                _track(acks, asyncio.ensure_future(ack(message, n)))


def _sigkill(broker: Ours) -> None:
    proc = broker.proc
    assert proc is not None
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    broker.proc = None


async def _round(broker: Ours, ledger: Ledger, rng: random.Random, window: int, prefetch: int) -> float:
    tasks = [
        asyncio.ensure_future(produce(broker.port, ledger, window)),
        asyncio.ensure_future(consume(broker.port, ledger, prefetch, None)),
    ]
    after = rng.uniform(0.3, 1.5)
    await asyncio.sleep(after)
    _sigkill(broker)
    await asyncio.gather(*tasks, return_exceptions=True)
    return after


def run(rounds: int, backlog: int, seed: int, window: int, prefetch: int, workdir: Path) -> dict:
    """Every round, then the final drain; returns the counts."""
    rng = random.Random(seed)
    config = str(BACKLOG_CONFIG) if backlog else None
    broker = Ours("sigkill", workdir, config)
    ledger = Ledger()
    started = time.monotonic()
    if backlog:
        broker.start()
        asyncio.run(produce(broker.port, ledger, 200, count=backlog))
        broker.stop()
    for _ in range(rounds):
        broker.start(timeout=120)
        asyncio.run(_round(broker, ledger, rng, window, prefetch))
    broker.start(timeout=120)
    try:
        asyncio.run(consume(broker.port, ledger, 200, idle=5.0))
    finally:
        broker.stop()
    unconfirmed = ledger.receipted - ledger.confirmed
    lost = sorted(unconfirmed - ledger.acked)
    ack_unconfirmed = sorted(unconfirmed & ledger.acked)
    return {
        "rounds": rounds,
        "backlog": backlog,
        "seed": seed,
        "config": config or "embedded default",
        "sends": ledger.attempted,
        "receipted": len(ledger.receipted),
        "acks_confirmed": len(ledger.confirmed),
        "deliveries": ledger.deliveries,
        "lost": len(lost),
        "lost_examples": lost[:10],
        "never_delivered": len(ledger.receipted - ledger.delivered_ever),
        "ack_unconfirmed": len(ack_unconfirmed),
        "ack_unconfirmed_examples": ack_unconfirmed[:10],
        "delivered_after_ack": len(ledger.after_ack),
        "after_ack_examples": ledger.after_ack[:10],
        "duplicated": len(ledger.duplicated),
        "duplicated_examples": ledger.duplicated[:10],
        "redelivered_unconfirmed": ledger.redelivered,
        "unknown_bodies": len(ledger.unknown),
        "seconds": round(time.monotonic() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100, help="SIGKILLs (default 100)")
    parser.add_argument(
        "--backlog",
        type=int,
        default=0,
        help="persistent messages queued first, under a 1 MB memory limit (default 0: none)",
    )
    parser.add_argument(
        "--both", action="store_true", help="run without a backlog, then with --backlog (default 20000)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--window", type=int, default=20, help="SENDs in flight (default 20)")
    parser.add_argument("--prefetch", type=int, default=20)
    parser.add_argument("--json", help="write the JSON here instead of bench/results/")
    a = parser.parse_args(argv)
    if a.rounds < 1 or a.backlog < 0:
        parser.error("--rounds must be at least 1 and --backlog at least 0")
    backlogs = [0, a.backlog or 20000] if a.both else [a.backlog]
    runs = []
    for backlog in backlogs:
        with tempfile.TemporaryDirectory(prefix="minibroker-sigkill-") as workdir:
            try:
                runs.append(run(a.rounds, backlog, a.seed, a.window, a.prefetch, Path(workdir)))
            except BrokerStartError as exc:
                print(f"sigkill: {exc}", file=sys.stderr)
                return 1
    print_table(
        [
            "backlog",
            "SIGKILLs",
            "sends receipted",
            "ACKs receipted",
            "lost",
            "delivered after ACK receipt",
            "duplicated",
            "ACKed, RECEIPT lost, gone",
            "redelivered (ACK unconfirmed)",
            "s",
        ],
        [
            [
                r["backlog"],
                r["rounds"],
                r["receipted"],
                r["acks_confirmed"],
                r["lost"],
                r["delivered_after_ack"],
                r["duplicated"],
                r["ack_unconfirmed"],
                r["redelivered_unconfirmed"],
                r["seconds"],
            ]
            for r in runs
        ],
    )
    save("sigkill", {"runs": runs}, a.json)
    bad = any(r["lost"] or r["delivered_after_ack"] or r["duplicated"] or r["unknown_bodies"] for r in runs)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
