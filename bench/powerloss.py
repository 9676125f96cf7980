#!/usr/bin/env python3
"""Power-loss rounds on ext4: nothing receipted is lost, no receipted ACK is undone.

A SIGKILL cannot find a missing fsync (the page cache outlives the process);
a power loss drops every write that was not fsynced. This run makes one on a
real file system the way xfstests' "godown" does: an ext4 file system on a
loop device, cut with ``EXT4_IOC_SHUTDOWN`` and ``EXT4_GOING_FLAGS_NOLOGFLUSH``
(from that instant nothing more reaches the disk, and the log is not
flushed), then unmounted and mounted again (the log replayed): what is left is
what was durable.

Each round starts the real ``minibroker serve`` on a data directory on that
file system, with tiny journal files (rolls and collections all the time),
alternately in the ``growing`` and the ``ring`` layout (one data directory
each), and runs at once: a producer of persistent SENDs to a queue and one to
a topic, each SEND with a receipt (up to ``--window`` in flight), a
client-individual consumer of the queue and one of a durable subscription to
the topic, each ACK with a receipt. At a random moment 0.3 to 1.5 s in, the
file system is shut down; the broker stops (its next fsync fails: status 3)
or is killed. After the last round each layout's broker starts once more and
drains both. Counted per layout, as ``bench/sigkill.py`` counts:

- ``lost``: messages whose SEND got a RECEIPT and that never came to a
  consumer that ACKed them (or whose unconfirmed ACK then never came again);
- ``ACKs undone``: deliveries of a message after its ACK got a RECEIPT;
- ``duplicated``: a message delivered twice on one connection;
- ``ACKed, RECEIPT lost, gone`` and ``redelivered``: allowed, for scale.

It needs root, loop devices, ``mkfs.ext4`` and ``mount``; without them it
says why and stops (status 2): ``tests/durability/test_power_loss_model.py`` is the same
check on a disk simulated through storage's file seam, in the suite. Prints a
table and leaves JSON under bench/results/::

    sudo .venv/bin/python bench/powerloss.py [--rounds 100] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from brokers import BrokerStartError, Ours
from report import print_table, save
from sigkill import Ledger, consume, produce

from clients.stomp import StompClient

QUEUE = "/queue/powerloss"
TOPIC = "/topic/powerloss"
CLIENT_ID = "powerloss"
DURABLE = "kept"
LAYOUTS = ("growing", "ring")
PREFETCH = 50
#: ``_IOR('X', 125, __u32)``, as ``linux/ext4.h`` defines it; NOLOGFLUSH: drop the log's unwritten part.
EXT4_IOC_SHUTDOWN = 0x8004587D
EXT4_GOING_FLAGS_NOLOGFLUSH = 2
STORE_CONFIG = {
    "growing": '[store]\nlayout = "growing"\njournal_max_file_length = "64 kb"\n',
    "ring": '[store]\nlayout = "ring"\nfile_size = "64 kb"\nfile_count = 16\n',
}


class CannotRun(Exception):
    """This machine cannot make a real file system to cut (the message says why)."""


class Ext4OnLoop:
    """An ext4 file system in an image file on a loop device, mounted at ``mount``."""

    def __init__(self, workdir: Path, size_mb: int) -> None:
        self.image = workdir / "disk.img"
        self.mount = workdir / "mnt"
        self.size_mb = size_mb
        self.device: str | None = None
        self.mounted = False

    @staticmethod
    def check() -> None:
        """Raise ``CannotRun`` saying what is missing."""
        if os.geteuid() != 0:
            raise CannotRun("it needs root (losetup, mount and the EXT4_IOC_SHUTDOWN ioctl)")
        for tool in ("losetup", "mkfs.ext4", "mount", "umount"):
            if shutil.which(tool) is None:
                raise CannotRun(f"{tool} is not installed")
        if not Path("/dev/loop-control").exists():
            raise CannotRun("there are no loop devices (/dev/loop-control is missing)")

    def _run(self, *argv: str) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise CannotRun(f"`{' '.join(argv)}` failed: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout.strip()

    def __enter__(self) -> Ext4OnLoop:
        with open(self.image, "wb") as f:
            f.truncate(self.size_mb * 1024 * 1024)
        self._run("mkfs.ext4", "-q", "-F", str(self.image))
        self.device = self._run("losetup", "--find", "--show", str(self.image))
        self.mount.mkdir()
        self.remount()
        return self

    def remount(self) -> None:
        """Unmount (if mounted) and mount again: ext4 replays its log, and what was durable is what is there."""
        if self.mounted:
            self._run("umount", str(self.mount))
            self.mounted = False
        assert self.device is not None
        self._run("mount", "-t", "ext4", self.device, str(self.mount))
        self.mounted = True

    def shutdown(self) -> None:
        """The power goes: nothing more reaches the disk, the log is not flushed."""
        fd = os.open(self.mount, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, EXT4_IOC_SHUTDOWN, struct.pack("I", EXT4_GOING_FLAGS_NOLOGFLUSH))
        finally:
            os.close(fd)

    def __exit__(self, *exc: object) -> None:
        if self.mounted:
            subprocess.run(["umount", str(self.mount)], capture_output=True, timeout=60)
        if self.device is not None:
            subprocess.run(["losetup", "--detach", self.device], capture_output=True, timeout=60)


def counts(ledger: Ledger) -> dict:
    """What ``ledger`` saw, counted as ``bench/sigkill.py`` counts it."""
    unconfirmed = ledger.receipted - ledger.confirmed
    lost = sorted(unconfirmed - ledger.acked)
    return {
        "receipted": len(ledger.receipted),
        "acks_confirmed": len(ledger.confirmed),
        "deliveries": ledger.deliveries,
        "lost": len(lost),
        "lost_examples": lost[:10],
        "acks_undone": len(ledger.after_ack),
        "acks_undone_examples": ledger.after_ack[:10],
        "duplicated": len(ledger.duplicated),
        "ack_unconfirmed_gone": len(unconfirmed & ledger.acked),
        "redelivered_unconfirmed": ledger.redelivered,
        "unknown_bodies": len(ledger.unknown),
    }


async def _traffic(broker: Ours, ledgers: dict[str, Ledger], window: int, idle: float | None) -> list[asyncio.Task]:
    """Consumers of the queue and of the durable subscription, and (``idle`` None:
    until the broker dies) a producer for each."""
    durable = {"activemq.subscriptionName": DURABLE}
    tasks = [
        asyncio.ensure_future(consume(broker.port, ledgers["queue"], PREFETCH, idle, QUEUE)),
        asyncio.ensure_future(consume(broker.port, ledgers["topic"], PREFETCH, idle, TOPIC, CLIENT_ID, durable)),
    ]
    if idle is None:
        tasks += [
            asyncio.ensure_future(produce(broker.port, ledgers["queue"], window, destination=QUEUE)),
            asyncio.ensure_future(produce(broker.port, ledgers["topic"], window, destination=TOPIC)),
        ]
    return tasks


async def _round(broker: Ours, disk: Ext4OnLoop, ledgers: dict[str, Ledger], rng: random.Random, window: int) -> int:
    """One round; returns the broker's exit status (3: it stopped on the failed fsync itself)."""
    tasks = await _traffic(broker, ledgers, window, None)
    await asyncio.sleep(rng.uniform(0.3, 1.5))
    disk.shutdown()
    proc = broker.proc
    assert proc is not None
    try:
        status = await asyncio.to_thread(proc.wait, 10)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        status = proc.wait(30)
    broker.proc = None
    await asyncio.gather(*tasks, return_exceptions=True)
    return status


async def _subscribe_durably(port: int) -> None:
    """Make the durable subscription (receipted) before anything is sent to the topic."""
    client = await StompClient.connect(port=port, connect_timeout=10, client_id=CLIENT_ID)
    try:
        await client.subscribe(TOPIC, ack="client-individual", headers={"activemq.subscriptionName": DURABLE})
        await client.disconnect()
    finally:
        client.close()


async def _drain(broker: Ours, ledgers: dict[str, Ledger]) -> None:
    await asyncio.gather(*await _traffic(broker, ledgers, 0, 5.0))


def run(rounds: int, seed: int, window: int, workdir: Path, size_mb: int) -> list[dict]:
    """Every round, then a drain per layout; returns the counts per layout."""
    rng = random.Random(seed)
    results = []
    with Ext4OnLoop(workdir, size_mb) as disk:
        brokers = {}
        ledgers: dict[str, dict[str, Ledger]] = {}
        for layout in LAYOUTS:
            config = workdir / f"powerloss-{layout}.toml"
            config.write_text(STORE_CONFIG[layout], encoding="utf-8")
            broker = Ours(f"powerloss-{layout}", workdir, str(config))
            broker.data_dir = disk.mount / f"data-{layout}"
            brokers[layout] = broker
            ledgers[layout] = {"queue": Ledger(), "topic": Ledger()}
            broker.start(timeout=120)
            asyncio.run(_subscribe_durably(broker.port))
            broker.stop()
        stopped_itself = {layout: 0 for layout in LAYOUTS}
        started = time.monotonic()
        for n in range(rounds):
            layout = LAYOUTS[n % len(LAYOUTS)]
            brokers[layout].start(timeout=120)
            if asyncio.run(_round(brokers[layout], disk, ledgers[layout], rng, window)) == 3:
                stopped_itself[layout] += 1
            disk.remount()
        for layout in LAYOUTS:
            broker = brokers[layout]
            broker.start(timeout=120)
            try:
                asyncio.run(_drain(broker, ledgers[layout]))
            finally:
                broker.stop()
            for destination, ledger in ledgers[layout].items():
                results.append(
                    {
                        "layout": layout,
                        "destination": QUEUE if destination == "queue" else f"{TOPIC} (durable)",
                        "power_losses": len(range(LAYOUTS.index(layout), rounds, len(LAYOUTS))),
                        "broker_stopped_on_failed_fsync": stopped_itself[layout],
                        **counts(ledger),
                        "seconds": round(time.monotonic() - started, 1),
                    }
                )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=100, help="power losses, alternating layouts (default 100)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--window", type=int, default=20, help="SENDs in flight per producer (default 20)")
    parser.add_argument("--size", type=int, default=256, help="MB of the ext4 file system (default 256)")
    parser.add_argument("--json", help="write the JSON here instead of bench/results/")
    a = parser.parse_args(argv)
    if a.rounds < 1:
        parser.error("--rounds must be at least 1")
    try:
        Ext4OnLoop.check()
        with tempfile.TemporaryDirectory(prefix="minibroker-powerloss-") as workdir:
            runs = run(a.rounds, a.seed, a.window, Path(workdir), a.size)
    except CannotRun as exc:
        print(
            f"powerloss: cannot cut a real file system here: {exc}. Nothing was run; the same check on a "
            "simulated disk runs in the suite (tests/durability/test_power_loss_model.py).",
            file=sys.stderr,
        )
        return 2
    except BrokerStartError as exc:
        print(f"powerloss: {exc}", file=sys.stderr)
        return 1
    print_table(
        [
            "layout",
            "destination",
            "power losses",
            "sends receipted",
            "ACKs receipted",
            "lost",
            "ACKs undone",
            "duplicated",
            "ACKed, RECEIPT lost, gone",
            "redelivered (ACK unconfirmed)",
        ],
        [
            [
                r["layout"],
                r["destination"],
                r["power_losses"],
                r["receipted"],
                r["acks_confirmed"],
                r["lost"],
                r["acks_undone"],
                r["duplicated"],
                r["ack_unconfirmed_gone"],
                r["redelivered_unconfirmed"],
            ]
            for r in runs
        ],
    )
    save("powerloss", {"rounds": a.rounds, "seed": a.seed, "filesystem": "ext4 on a loop device", "runs": runs}, a.json)
    bad = any(r["lost"] or r["acks_undone"] or r["duplicated"] or r["unknown_bodies"] for r in runs)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
