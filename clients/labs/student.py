"""A student's consumer, run against a lab's real server (``lab check NN --client FILE.py``).

The file defines ``consume(host, port, queue, count, work)``: connect, subscribe to
``queue``, call ``work(message_id)`` for each message (it takes the lab's working time),
acknowledge, return after ``count`` messages. A lab may pass more keyword arguments (lab
05: ``replies``, the queue to answer on) and may name a *poison* body: ``work(message_id,
body)`` raises ``ValueError`` for it, as a real handler fails on a message it cannot
process (lab 07). It runs in a child process (``_CHILD``), so a client that hangs is stopped
at the deadline and one that raises cannot take the check down; each processed message, and
each time the poison one was tried, comes back as one line on the child's stdout.

A client that cannot be imported, has no ``consume``, raises, or processed nothing before
the deadline is ``StudentError``: one line saying what is wrong. Otherwise ``ClientRun``
says what it did, for the scenario to grade, and ``ClientRun.story`` says it in a line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ClientRun", "StudentError", "run_beside", "run_consumer"]


class StudentError(Exception):
    """The student's client could not be graded: what went wrong, in one line."""


@dataclass
class ClientRun:
    """What the student's consumer did before it returned, or before the deadline."""

    processed: list[str]
    finished: bool
    seconds: float
    #: Seconds from the start to the last message processed (0.0 when none was).
    last_processed_at: float = 0.0
    #: When ``work`` was given the poison message, in seconds from the start.
    poison_tried_at: list[float] = field(default_factory=list)
    #: When ``consume`` returned, in seconds from the start (when ``finished``).
    returned_at: float = 0.0

    @property
    def duplicates(self) -> int:
        return len(self.processed) - len(set(self.processed))

    def story(self, count: int, deadline: float) -> str:
        """What the consumer did, plainly: how many it processed, by when, and whether it returned."""
        processed = len(set(self.processed))
        done = f"your consumer processed {processed} of {count} messages"
        done += f" (the last at {self.last_processed_at:.1f} s)" if processed else ""
        done += f", {self.duplicates} of them a second time"
        if self.finished:
            return f"{done}; consume() returned at {self.returned_at:.1f} s"
        return f"{done}; consume() had not returned when the check stopped it at its {deadline:.0f} s deadline"


_CHILD = r"""
import importlib.util, json, sys, time, traceback
path, host, port, queue, count, work_s = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5]), float(sys.argv[6])
extra, poison = json.loads(sys.argv[7]), sys.argv[8]
try:
    spec = importlib.util.spec_from_file_location("student_consumer", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
except BaseException as exc:
    print(f"cannot import {path}: {type(exc).__name__}: {exc}", file=sys.stderr)
    sys.exit(3)
if not callable(getattr(module, "consume", None)):
    print(f"{path} defines no consume(host, port, queue, count, work) function", file=sys.stderr)
    sys.exit(3)
start = time.monotonic()
def work(message_id, body=None):
    text = body.decode("utf-8", "replace") if isinstance(body, (bytes, bytearray)) else body
    if poison and text == poison:
        print(json.dumps(["!", str(message_id), round(time.monotonic() - start, 3)]), flush=True)
        raise ValueError(f"cannot process this message: {text!r}")
    time.sleep(work_s)
    print(json.dumps(["ok", str(message_id), round(time.monotonic() - start, 3)]), flush=True)
try:
    module.consume(host, port, queue, count, work, **extra)
except BaseException as exc:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == path]
    where = f" (line {frames[-1].lineno} of {path})" if frames else ""
    print(f"your client raised {type(exc).__name__}: {exc}{where}", file=sys.stderr)
    sys.exit(3)
print(json.dumps(["done", "", round(time.monotonic() - start, 3)]), flush=True)
"""


def run_consumer(
    path: Path,
    host: str,
    port: int,
    queue: str,
    count: int,
    work_seconds: float,
    deadline: float,
    *,
    extra: dict[str, str] | None = None,
    poison: str = "",
) -> ClientRun:
    """Run ``path``'s ``consume`` against ``host:port`` for at most ``deadline`` seconds
    (``extra``: more keyword arguments for it; ``poison``: the body ``work`` fails on)."""
    import json
    import time

    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    args = [str(path.resolve()), host, str(port), queue, str(count), str(work_seconds), json.dumps(extra or {}), poison]
    start = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        out, err = child.communicate(timeout=deadline)
        timed_out = False
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        timed_out = True
    seconds = time.monotonic() - start
    lines = out.splitlines()
    told = [json.loads(line) for line in lines if line.startswith("[")]
    processed = [(m, t) for what, m, t in told if what == "ok"]
    if child.returncode == 3:
        raise StudentError((err.strip().splitlines() or ["your client failed"])[-1])
    if not timed_out and child.returncode != 0:
        raise StudentError(f"your client ended with exit status {child.returncode}: {err.strip()[-200:]}")
    if timed_out and not processed:
        raise StudentError(f"your client processed no message in {deadline:.0f} s: does it hang, or never subscribe?")
    return ClientRun(
        [m for m, _ in processed],
        any(what == "done" for what, _, _ in told),
        seconds,
        max((t for _, t in processed), default=0.0),
        [t for what, _, t in told if what == "!"],
        next((t for what, _, t in told if what == "done"), 0.0),
    )


def run_beside(
    clients: Callable[[threading.Event], Coroutine[Any, Any, None]],
    path: Path,
    port: int,
    queue: str,
    count: int,
    work_seconds: float,
    deadline: float,
    *,
    extra: dict[str, str] | None = None,
    poison: str = "",
    settled: Callable[[], bool] = lambda: True,
) -> ClientRun:
    """``run_consumer`` against ``127.0.0.1:port`` while the lab's own clients play beside it.

    - ``clients(stop)`` is a coroutine run on an event loop of its own, in a thread, from
      before the student's client starts; it must end soon after ``stop`` is set;
    - once the student's client is done, ``settled()`` is polled for up to 2 s (the last
      messages on their way), then ``stop`` is set and the thread joined;
    - a client that cannot be graded is ``LabError``: the check's one line.
    """
    import asyncio
    import time

    from .model import LabError

    stop = threading.Event()
    thread = threading.Thread(target=asyncio.run, args=(clients(stop),), daemon=True)
    thread.start()
    try:
        run = run_consumer(path, "127.0.0.1", port, queue, count, work_seconds, deadline, extra=extra, poison=poison)
        until = time.monotonic() + 2.0
        while not settled() and time.monotonic() < until:
            time.sleep(0.05)
        return run
    except StudentError as exc:
        raise LabError(str(exc)) from None
    finally:
        stop.set()
        thread.join(5.0)
