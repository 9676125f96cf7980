"""The broker's side of an offloaded trace: the spool file and the writer process it feeds.

With ``Trace(offload=True)`` the broker does not make JSON: each flushed batch
of records is marshalled and appended to a spool file beside the trace, and a
writer process (``writer.py``, run as ``python -m minibroker.trace.run_writer``)
turns the spool into the trace file at idle priority.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

__all__ = ["NEXT_SEGMENT", "segment_path", "SpoolAppender", "start_writer"]

#
# Theory of operation: the broker appends each flushed batch to a spool file as
# an 8-byte length and a marshalled list, then writes one byte (a doorbell) to
# the child's stdin. The child sleeps on stdin; on a doorbell it converts every
# complete batch it finds in the spool, from where it stopped. Regular-file
# appends never block the broker on the child (a pipe would: it holds 64 KB),
# which is what lets the child run at low priority. The spool is cut into
# segments ``<trace>.spool.<k>``: a batch whose length is ``NEXT_SEGMENT``
# says "go on in segment k+1" (created before the mark is written), and the
# child deletes a segment when it leaves it. EOF on stdin (the broker closed
# the trace, or died) means: convert what is left, delete the spool, exit.

NEXT_SEGMENT = (1 << 64) - 1


def segment_path(path: str, k: int) -> str:
    head, tail = os.path.split(path)
    return os.path.join(head, f".{tail}.spool.{k}")


class SpoolAppender:
    """The broker's side of the spool: appends batches, rings the doorbell."""

    def __init__(self, path: str, segment_bytes: int) -> None:
        self.path = path
        self.segment_bytes = segment_bytes
        self.doorbell = -1
        head, tail = os.path.split(path)
        stale = f".{tail}.spool."
        for name in os.listdir(head or "."):  # left by a writer that was killed
            if name.startswith(stale) and name[len(stale) :].isdigit():
                os.unlink(os.path.join(head, name))
        self._k = 0
        self._fd = self._open(0)
        self._size = 0

    def _open(self, k: int) -> int:
        return os.open(segment_path(self.path, k), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def append(self, blob: bytes) -> None:
        if self._size >= self.segment_bytes:
            next_fd = self._open(self._k + 1)
            self._write(NEXT_SEGMENT.to_bytes(8, "little"))
            os.close(self._fd)
            self._fd, self._k, self._size = next_fd, self._k + 1, 0
        self._write(len(blob).to_bytes(8, "little") + blob)
        self._size += 8 + len(blob)
        with contextlib.suppress(BlockingIOError):  # 64K doorbells unread: the child will find this batch anyway
            os.write(self.doorbell, b"\x01")

    def on_disk(self) -> int:
        """Bytes of spool the writer has not deleted yet (an upper bound of its lag)."""
        total = 0
        for k in range(self._k + 1):
            with contextlib.suppress(FileNotFoundError):
                total += os.stat(segment_path(self.path, k)).st_size
        return total

    def close(self) -> None:
        os.close(self._fd)


def start_writer(
    path: str,
    broker: str,
    writer_nice: int,
    lag_limit: int,
    load_stat: str,
    segment_bytes: int,
    format: str = "jsonl",
) -> tuple[subprocess.Popen[bytes], SpoolAppender]:
    """Start the writer process for the trace at ``path`` (absolute) and open its spool;
    ``format`` is what the writer writes (``writer.FORMATS``).

    The child is started as a module (``-m``) of the package this one was loaded
    from: its directory goes first on the child's ``PYTHONPATH``, so the writer
    is this very code whether minibroker is installed or run from a checkout.
    ``-P`` keeps the working directory off the child's path, so no file there
    shadows a standard module.
    """
    spool = SpoolAppender(path, segment_bytes)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    child = subprocess.Popen(
        [
            sys.executable,
            "-P",
            "-m",
            "minibroker.trace.run_writer",
            "--write",
            path,
            broker,
            str(writer_nice),
            str(lag_limit),
            load_stat,
            format,
        ],
        stdin=subprocess.PIPE,
        env=env,
    )
    assert child.stdin is not None
    spool.doorbell = child.stdin.fileno()
    os.set_blocking(spool.doorbell, False)
    return child, spool
