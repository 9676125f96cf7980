"""Pause the brokers not under measurement (SIGSTOP) and resume each for its own reps (SIGCONT).

bench/compare.py starts every broker of a run at once and alternates reps between
them. An idle broker is not quiet (the JVM's and the Erlang VM's own threads keep
running), so while one broker is measured, ``Pauser.measure(name)`` stops every
process of the others and lets the measured one's run.

Theory of operation:

- a broker names its root processes (``root_pids()``: ours and the relay their
  process, ActiveMQ its JVM, RabbitMQ its start script, its node and its epmd);
  what is paused is each root and every descendant (``process_tree``), walked
  again after the stop until no new process appears (one forked meanwhile);
- a pause waits (with a deadline) until each process is in state ``T`` in
  /proc/PID/stat, a resume until none is: SIGSTOP and SIGCONT are delivered
  asynchronously, and a rep must not start beside a broker still running;
- between reps a broker has no client: each rep's harness process has exited, its
  connections closed, before the next pause. A client that lives beside the broker
  (the console page that ``ours:console`` keeps open) is one of its root processes
  and is paused and resumed with it, so neither side sees the other go silent;
- a pause never outlives the run: ``resume_all`` (compare.py calls it in a
  ``finally``, so on Ctrl-C and SIGTERM too) resumes every paused process, and a
  guard process of our own holds the list of what is paused: when the run's process
  ends without resuming (SIGKILL), the guard reads the end of its pipe and resumes
  them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

#: The guard: reads lines of paused pids from its stdin; at end of file (the run's
#: process closed it, or died), sends SIGCONT to the last line's pids.
GUARD = """\
import os, signal, sys
pids = []
for line in sys.stdin:
    pids = [int(p) for p in line.split()]
for pid in pids:
    try:
        os.kill(pid, signal.SIGCONT)
    except OSError:
        pass
"""


class Pausable(Protocol):
    """A broker as the pauser sees it: a name and the processes it runs as."""

    name: str

    def root_pids(self) -> list[int]:
        """The broker's root processes (their descendants are paused with them)."""
        ...


def state(pid: int) -> str | None:
    """The one-letter state of ``pid`` in /proc/PID/stat (``T`` when stopped), None when gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _parents() -> dict[int, int]:
    """Every live process's parent pid."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return parents


def process_tree(roots: Iterable[int]) -> list[int]:
    """``roots`` that are alive and all their descendants, each parent before its children."""
    parents = _parents()
    children: dict[int, list[int]] = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    tree: list[int] = []
    todo = [pid for pid in roots if pid in parents]
    while todo:
        pid = todo.pop(0)
        if pid not in tree:
            tree.append(pid)
            todo.extend(sorted(children.get(pid, [])))
    return tree


def _signal(pids: Sequence[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


def _wait_until(pids: Sequence[int], stopped: bool, timeout: float) -> list[int]:
    """Wait until every live pid of ``pids`` is stopped (or none is); the ones that are not, at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        states = {pid: state(pid) for pid in pids}
        late = [pid for pid, st in states.items() if st not in (None, "Z", "X") and (st == "T") != stopped]
        if not late or time.monotonic() > deadline:
            return late
        time.sleep(0.005)


class Pauser:
    """Pauses every broker but the one measured; ``resume_all`` before the brokers are stopped."""

    def __init__(self, brokers: Sequence[Pausable], timeout: float = 10.0) -> None:
        self.brokers = list(brokers)
        self.timeout = timeout
        #: broker name -> the pids paused, in the order they were stopped
        self.paused: dict[str, list[int]] = {}
        self._guard: subprocess.Popen[str] | None = None

    def measure(self, name: str) -> list[str]:
        """Pause every broker but ``name`` and resume ``name`` if it was paused; the names paused."""
        for broker in self.brokers:
            if broker.name != name and broker.name not in self.paused:
                self._pause(broker)
        if name in self.paused:
            late = self._resume(name)
            if late:
                raise RuntimeError(f"{name}: processes {late} still stopped {self.timeout:.0f} s after SIGCONT")
        return [b.name for b in self.brokers if b.name in self.paused]

    def resume_all(self) -> None:
        """Resume every paused process and end the guard (safe to call twice); RuntimeError
        naming the processes still stopped at the deadline, once every one was sent SIGCONT."""
        late = [pid for name in list(self.paused) for pid in self._resume(name)]
        guard, self._guard = self._guard, None
        if guard is not None and guard.stdin is not None:
            with contextlib.suppress(OSError):
                guard.stdin.close()
            try:
                guard.wait(10)  # it resumes what the last line named (nothing now) and exits
            except subprocess.TimeoutExpired:
                guard.kill()
        if late:
            raise RuntimeError(f"processes {late} still stopped {self.timeout:.0f} s after SIGCONT")

    def _pause(self, broker: Pausable) -> None:
        pids: list[int] = []
        self.paused[broker.name] = pids  # before any SIGSTOP: an interruption still resumes what was stopped
        roots = broker.root_pids()
        while True:
            new = [pid for pid in process_tree(roots) if pid not in pids]
            if not new:
                break
            pids.extend(new)
            self._tell_guard()
            _signal(new, signal.SIGSTOP)
        late = _wait_until(pids, True, self.timeout)
        if late:
            raise RuntimeError(f"{broker.name}: processes {late} not stopped {self.timeout:.0f} s after SIGSTOP")

    def _resume(self, name: str) -> list[int]:
        """SIGCONT to every process of ``name``; those still stopped at the deadline."""
        pids = self.paused[name]
        _signal(list(reversed(pids)), signal.SIGCONT)
        late = _wait_until(pids, False, self.timeout)
        del self.paused[name]
        self._tell_guard()
        return late

    def _tell_guard(self) -> None:
        """Give the guard the pids paused now (it is started at the first pause)."""
        if self._guard is None:
            if not self.paused:
                return
            self._guard = subprocess.Popen(
                [sys.executable, "-c", GUARD],
                stdin=subprocess.PIPE,
                text=True,
                start_new_session=True,  # a Ctrl-C at the terminal ends the run, not its guard
            )
        assert self._guard.stdin is not None
        line = " ".join(str(pid) for pids in self.paused.values() for pid in pids)
        with contextlib.suppress(OSError):  # a guard gone: the run goes on, resume_all still resumes
            self._guard.stdin.write(line + "\n")
            self._guard.stdin.flush()
