#!/usr/bin/env python3
"""A full disk: the broker keeps its promises and comes back when space does.

Mounts a tmpfs of ``--size`` MB (this needs root: ``mount -t tmpfs``) and runs
the real ``minibroker serve`` with its data directory there
(``configs/diskfull.toml``: 4 MB journal files, a store limit far above the
disk). Then:

1. a producer sends persistent 4 KB messages, each with a receipt, until the
   broker refuses one (an ERROR), stops answering for 10 s, or closes;
2. while the disk is full: a non-persistent message goes through another
   connection (sent with a receipt and received), and a persistent SEND of
   the same size gets an ERROR, or no RECEIPT within 10 s (producer flow
   control): what happened is kept;
3. a consumer drains the queue, each ACK with a receipt: every receipted
   message must arrive (``lost`` counts those that did not);
4. with the acknowledged files freed, a persistent SEND gets its receipt again,
   without a restart;
5. the broker stops (SIGTERM) and starts again on the same data directory:
   it must start; a consumer takes what is left;
6. a copy of the data directory, on a disk with room, is started and
   drained too: ``lost`` counts the receipted messages that no consumer
   received in any of these (so a message is lost only if it is gone from
   the disk, not merely stuck behind a full one).

Without root (or with ``--simulated``) no tmpfs can be mounted: the broker
then runs in this process and the disk is simulated through storage's file
seam (``storage/fileio.py``): every write or allocation of the store that
would take its data directory past ``--size`` MB fails with ENOSPC, as the
tmpfs would make it fail (the store's files are counted at their size,
preallocation included). The steps and the table are the same; the JSON says
which disk it was.

Prints a table and leaves JSON under bench/results/::

    sudo .venv/bin/python bench/diskfull.py [--size 40]
    .venv/bin/python bench/diskfull.py [--size 40] [--simulated]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from brokers import BrokerStartError, Ours
from report import print_table, save

from clients.labs.model import LabError
from clients.labs.runner import LiveBroker
from clients.stomp import ConnectionLost, StompClient, StompClientError
from minibroker.config import load_config
from storage.fileio import FileOps, PathLike, using

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "configs" / "diskfull.toml"
QUEUE = "/queue/diskfull"
BODY = "x" * 4096
GONE = (StompClientError, ConnectionLost, ConnectionError, TimeoutError, OSError)


def mount_tmpfs(target: Path, size_mb: int) -> str | None:
    """Mount a tmpfs of ``size_mb`` at ``target``; None, or why it could not be."""
    if os.geteuid() != 0:
        return "mounting a tmpfs needs root (run it with sudo)"
    p = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(target)], capture_output=True, text=True
    )
    return None if p.returncode == 0 else f"mount -t tmpfs failed: {p.stderr.strip()}"


class QuotaDisk(FileOps):
    """A disk of ``size`` bytes holding ``root``: a write or an allocation of storage's
    that would take the files under ``root`` past it fails with ENOSPC, before it
    changes anything (the seam's contract for a full disk). A file counts the blocks
    it holds, as a tmpfs does: a file made long by truncate is sparse and holds
    none, and storage writes each file from its start, so what it holds is the end
    of its furthest write or allocation."""

    def __init__(self, root: Path, size: int) -> None:
        self.root = str(root.resolve())
        self.size = size
        self.sizes: dict[str, int] = {}  # path -> bytes it holds, for the files under root
        self.paths: dict[int, str] = {}  # open fd -> path
        self._scan()

    def _inside(self, path: PathLike) -> str | None:
        full = os.path.abspath(os.fspath(path))
        return full if full.startswith(self.root + os.sep) else None

    def _scan(self) -> None:
        """Count the files under root afresh (a copy, a recovery: anything not written through us)."""
        self.sizes = {
            os.path.join(d, f): os.stat(os.path.join(d, f)).st_blocks * 512
            for d, _, files in os.walk(self.root)
            for f in files
            if os.path.exists(os.path.join(d, f))
        }

    def _grow(self, fd: int, end: int) -> None:
        path = self.paths.get(fd)
        if path is None:
            return
        growth = end - self.sizes.get(path, 0)
        if growth > 0 and sum(self.sizes.values()) + growth > self.size:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC) + " (simulated disk)")

    def _grew(self, fd: int, end: int) -> None:
        path = self.paths.get(fd)
        if path is not None:
            self.sizes[path] = max(self.sizes.get(path, 0), end)

    def open(self, path: PathLike, flags: int, mode: int = 0o644) -> int:
        fd = super().open(path, flags, mode)
        inside = self._inside(path)
        if inside is not None and not os.path.isdir(inside):
            self.paths[fd] = inside
            self.sizes[inside] = os.fstat(fd).st_blocks * 512
        return fd

    def close(self, fd: int) -> None:
        self.paths.pop(fd, None)
        super().close(fd)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        self._grow(fd, offset + len(data))
        n = super().pwrite(fd, data, offset)
        self._grew(fd, offset + n)
        return n

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        self._grow(fd, offset + length)
        super().fallocate(fd, offset, length)
        self._grew(fd, offset + length)

    def ftruncate(self, fd: int, length: int) -> None:
        super().ftruncate(fd, length)
        path = self.paths.get(fd)
        if path is not None:
            self.sizes[path] = min(self.sizes.get(path, 0), length)

    def truncate(self, path: PathLike, length: int) -> None:
        super().truncate(path, length)
        inside = self._inside(path)
        if inside is not None:
            self.sizes[inside] = min(self.sizes.get(inside, 0), length)

    def replace(self, source: PathLike, target: PathLike) -> None:
        super().replace(source, target)
        self._scan()

    def unlink(self, path: PathLike) -> None:
        super().unlink(path)
        inside = self._inside(path)
        if inside is not None:
            self.sizes.pop(inside, None)


class InProcess:
    """The broker in this process (``LiveBroker``), with ``Ours``'s interface as ``run`` uses it:
    for the simulated disk, whose seam is this process's."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.data_dir = Path()
        self.live: LiveBroker | None = None

    @property
    def port(self) -> int:
        assert self.live is not None
        return self.live.port

    def start(self) -> None:
        config = load_config(str(self.config)).on_free_ports()
        config = config.replace(transport={"host": "127.0.0.1"}, broker={"data_dir": str(self.data_dir)})
        config = config.replace(transport={"websocket_port": 0}, console={"port": 0})
        self.live = LiveBroker(config)
        try:
            self.live.start()
        except LabError as exc:
            self.live = None
            raise BrokerStartError(str(exc)) from None

    def exit_status(self) -> int | None:
        """None while serving; 1 once it stopped by itself (its store failed)."""
        thread = self.live._thread if self.live is not None else None
        return None if thread is not None and thread.is_alive() else 1

    def stop(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


async def fill(port: int, limit: int) -> dict:
    """Persistent SENDs with a receipt each until a refusal, silence or ``limit`` messages."""
    receipted: list[int] = []
    outcome = "sent them all"
    client = await StompClient.connect(port=port, connect_timeout=10)
    try:
        for n in range(limit):
            await client.send(QUEUE, f"{n}:{BODY}", headers={"persistent": "true"}, receipt=True, timeout=10)
            receipted.append(n)
    except StompClientError as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    except (TimeoutError, ConnectionError, OSError) as exc:
        outcome = f"{type(exc).__name__}: {exc}"
    finally:
        client.close()
    return {"receipted": receipted, "outcome": outcome[:300]}


async def round_trip(port: int, persistent: bool, destination: str) -> str:
    """Send one message with a receipt and receive it: "ok", or what went wrong."""
    try:
        async with await StompClient.connect(port=port, connect_timeout=10) as client:
            sub = await client.subscribe(destination)
            await client.send(
                destination,
                f"probe:{BODY}",
                headers={"persistent": "true" if persistent else "false"},
                receipt=True,
                timeout=10,
            )
            await sub.get(timeout=10)
        return "ok"
    except GONE as exc:
        return f"{type(exc).__name__}: {exc}"[:300]


async def drain(port: int) -> tuple[set[int], str]:
    """Receive and ACK (with a receipt each) until nothing comes for 5 s."""
    received: set[int] = set()
    try:
        async with await StompClient.connect(port=port, connect_timeout=10) as client:
            sub = await client.subscribe(QUEUE, ack="client-individual", prefetch=100)
            while True:
                try:
                    message = await sub.get(timeout=5)
                except TimeoutError:
                    break
                received.add(int(message.body.split(b":", 1)[0]))
                await client.ack(message, receipt=True, timeout=10)
        return received, "ok"
    except GONE as exc:
        return received, f"{type(exc).__name__}: {exc}"[:300]


def run(size_mb: int, mount: Path, workdir: Path, config: Path = CONFIG, simulated: bool = False) -> dict:
    """The steps above on a tmpfs mounted at ``mount``, or (``simulated``) on a ``QuotaDisk`` there."""
    broker: Ours | InProcess = InProcess(config) if simulated else Ours("diskfull", workdir, str(config))
    broker.data_dir = mount / "data"
    broker.data_dir.mkdir(parents=True, exist_ok=True)
    with using(QuotaDisk(broker.data_dir, size_mb * 1024 * 1024)) if simulated else contextlib.nullcontext():
        result = _steps(broker, size_mb, workdir)
    return {"disk": "simulated (ENOSPC injected)" if simulated else "tmpfs", **result, "config": config.name}


def _steps(broker: Ours | InProcess, size_mb: int, workdir: Path) -> dict:
    limit = size_mb * 1024 * 1024 // len(BODY) * 2
    started = time.monotonic()
    broker.start()
    try:
        filled = asyncio.run(fill(broker.port, limit))
        alive_when_full = broker.exit_status() is None
        non_persistent = asyncio.run(round_trip(broker.port, False, "/queue/np")) if alive_when_full else "broker gone"
        persistent_full = asyncio.run(round_trip(broker.port, True, "/queue/p")) if alive_when_full else "broker gone"
        received, drained = asyncio.run(drain(broker.port)) if alive_when_full else (set(), "broker gone")
        after = (
            asyncio.run(round_trip(broker.port, True, "/queue/after"))
            if broker.exit_status() is None
            else "broker gone"
        )
        status = broker.exit_status()
    finally:
        broker.stop()
    try:
        broker.start()
        restarted = "ok"
        left, _ = asyncio.run(drain(broker.port))
    except BrokerStartError as exc:
        restarted, left = f"did not start: {str(exc).splitlines()[-1][:200]}", set()
    finally:
        broker.stop()
    # What the disk holds, read where there is room: a copy of the data directory.
    shutil.copytree(broker.data_dir, workdir / "copy-data")
    broker.data_dir = workdir / "copy-data"
    try:
        broker.start()
        recovered, _ = asyncio.run(drain(broker.port))
    finally:
        broker.stop()
    receipted = set(filled["receipted"])
    lost = receipted - received - left - recovered
    return {
        "tmpfs_mb": size_mb,
        "receipted": len(receipted),
        "fill_ended_by": filled["outcome"],
        "broker_alive_when_full": alive_when_full,
        "exit_status_before_stop": status,
        "non_persistent_when_full": non_persistent,
        "persistent_when_full": persistent_full,
        "drained": len(received),
        "drain_ended_by": drained,
        "drained_after_restart": len(left),
        "recovered_from_a_copy": len(recovered),
        "lost": len(lost),
        "lost_examples": sorted(lost)[:10],
        "persistent_after_drain": after,
        "restart": restarted,
        "redelivered_after_restart": len(left & received),
        "seconds": round(time.monotonic() - started, 1),
    }


def _cell(text: str, width: int = 60) -> str:
    """A table cell: an outcome cut to ``width`` characters (the JSON keeps it whole)."""
    return text if len(text) <= width else text[: width - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--size", type=int, default=40, help="tmpfs size in MB (default 40)")
    parser.add_argument(
        "--config",
        type=Path,
        default=CONFIG,
        help="broker configuration (default configs/diskfull.toml; configs/diskfull-fail.toml "
        "refuses a SEND at once instead of holding its producer)",
    )
    parser.add_argument("--json", help="write the JSON here instead of bench/results/")
    parser.add_argument(
        "--simulated", action="store_true", help="simulate the disk through storage's file seam even as root"
    )
    a = parser.parse_args(argv)
    if a.size < 8:
        parser.error("--size must be at least 8 (MB)")
    with tempfile.TemporaryDirectory(prefix="minibroker-diskfull-") as workdir:
        mount = Path(workdir) / "disk"
        mount.mkdir()
        why = "--simulated" if a.simulated else mount_tmpfs(mount, a.size)
        if why is not None:
            print(
                f"diskfull: no tmpfs ({why}): the disk is simulated, storage's writes past {a.size} MB "
                "fail with ENOSPC (storage/fileio.py's seam)",
                file=sys.stderr,
            )
        try:
            r = run(a.size, mount, Path(workdir), a.config.resolve(), simulated=why is not None)
        except BrokerStartError as exc:
            print(f"diskfull: {exc}", file=sys.stderr)
            return 1
        finally:
            if why is None:
                subprocess.run(["umount", str(mount)], capture_output=True)
    print_table(
        [
            "disk",
            "MB",
            "config",
            "receipted",
            "filling ended by",
            "non-persistent when full",
            "persistent when full",
            "drained",
            "persistent after drain",
            "restart",
            "drained after restart",
            "from a copy",
            "lost",
        ],
        [
            [
                r["disk"],
                r["tmpfs_mb"],
                r["config"],
                r["receipted"],
                _cell(r["fill_ended_by"]),
                _cell(r["non_persistent_when_full"]),
                _cell(r["persistent_when_full"]),
                r["drained"],
                _cell(r["persistent_after_drain"]),
                _cell(r["restart"]),
                r["drained_after_restart"],
                r["recovered_from_a_copy"],
                r["lost"],
            ]
        ],
    )
    save("diskfull", r, a.json)
    good = (
        r["lost"] == 0
        and r["non_persistent_when_full"] == "ok"
        and r["persistent_after_drain"] == "ok"
        and r["restart"] == "ok"
        and r["persistent_when_full"] != "ok"
    )
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
