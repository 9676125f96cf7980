"""Crash tests: the real broker process killed with SIGKILL under persistent load.

Every message the broker acknowledged with a RECEIPT must come back after the
restart, and no message whose ACK was acknowledged may ever be delivered again.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from broker_support import start_broker_process
from clients.stomp import ConnectionLost, StompClient, StompClientError


def start(data_dir: Path) -> tuple[subprocess.Popen, int]:
    return start_broker_process(data_dir, "--log-level", "info")


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


async def kill_midway(proc: subprocess.Popen, work: Coroutine[Any, Any, None], after: float) -> None:
    """Run ``work`` against the broker ``proc`` and SIGKILL the broker ``after`` seconds into it."""
    task = asyncio.ensure_future(work)
    await asyncio.sleep(after)
    kill(proc)
    await task


async def produce(port: int, start_at: int, receipted: set[int], seconds: float) -> None:
    """Send persistent messages, each with a receipt, until killed or time is up."""
    pending: list[tuple[int, asyncio.Task]] = []
    try:
        client = await StompClient.connect(port=port)
        i = start_at
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            pending.append(
                (
                    i,
                    asyncio.ensure_future(
                        client.send("/queue/crash", f"m{i}", headers={"persistent": "true"}, receipt=True, timeout=10)
                    ),
                )
            )
            i += 1
            if len(pending) >= 50:
                for n, task in pending:
                    await task
                    receipted.add(n)
                pending.clear()
        for n, task in pending:
            await task
            receipted.add(n)
    except (StompClientError, ConnectionError, TimeoutError, OSError):
        # The broker died under us: only receipted messages count. Collect the sends still
        # in flight, so that their ConnectionLost is not reported as never retrieved.
        await asyncio.gather(*(task for _, task in pending), return_exceptions=True)


async def consume(port: int, seen: list[list], acked: set[int], limit: int | None, idle: float = 2.0) -> None:
    """Receive and ACK (with a receipt for each ACK) until idle or ``limit`` acks."""
    try:
        client = await StompClient.connect(port=port)
        sub = await client.subscribe("/queue/crash", ack="client-individual", prefetch=20)
        while limit is None or len(acked) < limit:
            try:
                msg = await sub.get(timeout=idle)
            except TimeoutError:
                break
            n = int(msg.body[1:])
            delivery = [n, False]
            seen.append(delivery)
            await client.ack(msg, receipt=True, timeout=10)
            delivery[1] = True  # the broker confirmed this ACK
            acked.add(n)
        await client.disconnect()
    except (StompClientError, ConnectionLost, ConnectionError, TimeoutError, OSError):
        pass


def test_sigkill_loses_nothing_receipted_and_redelivers_nothing_acked(tmp_path: Path) -> None:
    rng = random.Random(7)
    data = tmp_path / "data"
    receipted: set[int] = set()
    acked: set[int] = set()
    seen: list[list] = []  # [message number, ACK confirmed] per delivery, in order
    next_id = 0
    # Two cycles: the second crashes a broker that recovered from a crash, which is all a
    # third one proved again (each cycle is two broker starts and their recoveries).
    for _cycle in range(2):
        proc, port = start(data)
        try:
            # produce for a while, then SIGKILL in the middle of the load
            asyncio.run(kill_midway(proc, produce(port, next_id, receipted, 5.0), rng.uniform(0.4, 1.0)))
        finally:
            if proc.poll() is None:
                kill(proc)
        next_id = max(receipted, default=next_id) + 1000
        # restart, consume with confirmed ACKs, and SIGKILL in the middle of that too
        proc, port = start(data)
        try:
            asyncio.run(kill_midway(proc, consume(port, seen, acked, limit=None), rng.uniform(0.3, 0.8)))
        finally:
            if proc.poll() is None:
                kill(proc)
    proc, port = start(data)
    try:
        asyncio.run(consume(port, seen, acked, limit=None))
    finally:
        proc.terminate()
        proc.wait(10)
    print(f"receipted={len(receipted)} deliveries={len(seen)} acked={len(acked)}")
    assert receipted, "the producer never got a receipt"
    missing = receipted - {n for n, _ in seen}
    assert not missing, f"{len(missing)} receipted messages never delivered, e.g. {sorted(missing)[:5]}"
    # A message whose ACK was confirmed is never delivered after that ACK.
    confirmed: set[int] = set()
    for n, ack_confirmed in seen:
        assert n not in confirmed, f"message m{n} delivered again after its ACK was confirmed"
        if ack_confirmed:
            confirmed.add(n)
    assert confirmed == acked
