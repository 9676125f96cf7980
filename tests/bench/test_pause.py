"""bench/pause.py: the brokers not under measurement are paused, and no pause outlives the run.

A fake broker here is a python process with a ``sleep`` child of its own (a broker
runs helpers below it: RabbitMQ's node below its start script); the state of each
is read from /proc/PID/stat, ``T`` while stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"

#: A broker stand-in: starts a child, prints its pid, waits.
FAKE = (
    "import subprocess, sys, time\nc = subprocess.Popen(['sleep', '600'])\nprint(c.pid, flush=True)\ntime.sleep(600)\n"
)


def proc_state(pid: int) -> str:
    """The one-letter state in /proc/PID/stat."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def wait_for_state(pids: list[int], stopped: bool, timeout: float = 10.0) -> None:
    """Wait, within ``timeout``, until every pid is stopped (``T``) or none is; fail the test naming the others."""
    deadline = time.monotonic() + timeout
    while True:
        states = {pid: proc_state(pid) for pid in pids}
        if all((st == "T") == stopped for st in states.values()):
            return
        assert time.monotonic() < deadline, f"{'stopped' if stopped else 'running'} wanted: {states}"
        time.sleep(0.01)


class FakeBroker:
    """A python process and its child, named like a broker."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.proc = subprocess.Popen([sys.executable, "-c", FAKE], stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.child = int(self.proc.stdout.readline())

    @property
    def pids(self) -> list[int]:
        return [self.proc.pid, self.child]

    def root_pids(self) -> list[int]:
        return [self.proc.pid]

    def stop(self) -> None:
        for pid in (self.child, self.proc.pid):
            for sig in (signal.SIGCONT, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
        self.proc.wait(10)


@pytest.fixture
def fakes() -> Iterator[list[FakeBroker]]:
    brokers = [FakeBroker(name) for name in ("ours", "activemq", "rabbitmq")]
    yield brokers
    for b in brokers:
        b.stop()


@pytest.fixture
def pause_module(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.syspath_prepend(str(BENCH))
    import pause

    return pause


def test_measuring_one_broker_pauses_the_others_and_resumes_each_for_its_own_reps(
    fakes: list[FakeBroker], pause_module: ModuleType
) -> None:
    ours, activemq, rabbitmq = fakes
    pauser = pause_module.Pauser(fakes)
    try:
        assert pauser.measure("ours") == ["activemq", "rabbitmq"]
        wait_for_state(ours.pids, stopped=False)
        wait_for_state(activemq.pids + rabbitmq.pids, stopped=True)  # the children too

        assert pauser.measure("rabbitmq") == ["ours", "activemq"]
        wait_for_state(rabbitmq.pids, stopped=False)
        wait_for_state(ours.pids + activemq.pids, stopped=True)
    finally:
        pauser.resume_all()
    wait_for_state(ours.pids + activemq.pids + rabbitmq.pids, stopped=False)
    assert pauser.paused == {}


def test_a_pause_ends_with_the_run_even_when_the_run_is_killed(fakes: list[FakeBroker]) -> None:
    ours, activemq, rabbitmq = fakes
    # a run that pauses two brokers, says so, and is then SIGKILLed: no finally of its own runs
    run = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nsys.path.insert(0, sys.argv[1])\nimport pause\n"
            "class B:\n    def __init__(self, name, pid): self.name, self.pid = name, pid\n"
            "    def root_pids(self): return [self.pid]\n"
            "brokers = [B(n, int(p)) for n, p in zip(sys.argv[2::2], sys.argv[3::2])]\n"
            "pause.Pauser(brokers).measure('ours')\nprint('paused', flush=True)\ntime.sleep(600)\n",
            str(BENCH),
            *[str(x) for b in fakes for x in (b.name, b.proc.pid)],
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert run.stdout is not None
    assert run.stdout.readline().strip() == "paused"
    wait_for_state(activemq.pids + rabbitmq.pids, stopped=True)
    run.kill()
    run.wait(10)
    wait_for_state(ours.pids + activemq.pids + rabbitmq.pids, stopped=False)


def _compare(tmp_path: Path, *args: str) -> tuple[str, list[dict[str, object]]]:
    """A --quick compare.py run of scenario A against ours and the relay: its stdout and its JSON lines."""
    out = tmp_path / "run.jsonl"
    p = subprocess.run(
        [sys.executable, str(BENCH / "compare.py"), "--quick", "--with-relay", "--scenarios", "A", "--out", str(out)]
        + list(args),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=BENCH.parent,
    )
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p.stdout, [json.loads(line) for line in out.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_compare_measures_each_broker_with_the_other_paused_unless_told_not_to(tmp_path: Path) -> None:
    stdout, recs = _compare(tmp_path / "paused")
    run = next(r for r in recs if r["type"] == "run")
    reps = [r for r in recs if r["type"] == "rep"]
    assert run["pause_idle"] is True
    assert "each measured with the others paused" in stdout.splitlines()[0], stdout
    assert {(r["broker"], r["phase"]): r["paused"] for r in reps} == {
        ("ours", "warmup"): ["relay"],
        ("relay", "warmup"): ["ours"],
        ("ours", "measure"): ["relay"],
        ("relay", "measure"): ["ours"],
    }
    assert all(r["ok"] for r in reps), reps

    stdout, recs = _compare(tmp_path / "running", "--no-pause-idle")
    run = next(r for r in recs if r["type"] == "run")
    assert run["pause_idle"] is False
    assert "the others running beside each one's reps (not paused)" in stdout.splitlines()[0], stdout
    assert all(r["paused"] == [] for r in recs if r["type"] == "rep")


@pytest.mark.slow
def test_ctrl_c_resumes_the_paused_broker_and_stops_every_one(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    run = subprocess.Popen(
        [sys.executable, str(BENCH / "compare.py"), "--quick", "--with-relay", "--scenarios", "A,B,C,D"]
        + ["--reps", "5", "--out", str(out)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=BENCH.parent,
    )
    try:
        # wait for the first rep's record: from there on, one broker or the other is paused
        deadline = time.monotonic() + 90
        while '"type": "rep"' not in (out.read_text() if out.exists() else ""):
            assert run.poll() is None and time.monotonic() < deadline, "no rep recorded"
            time.sleep(0.05)
        meta = json.loads(out.read_text().splitlines()[0])
        pids = [b["pid"] for b in meta["brokers"]]
        # from the first pause on, one is stopped at any moment (the other is resumed once it is)
        assert "T" in [proc_state(pid) for pid in pids], {pid: proc_state(pid) for pid in pids}
        run.send_signal(signal.SIGINT)
        _, stderr = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(10)
    assert run.returncode == 130, stderr
    # each broker was resumed, then ended by its SIGTERM: a process left stopped keeps the SIGTERM
    # pending, and the stop ends it with SIGKILL (exit status -9)
    for name, pid in zip(("ours", "relay"), pids, strict=True):
        said = re.search(rf"^stopped {name} pid {pid}, exit status (-?\d+)", stderr, re.M)
        assert said and said.group(1) != "-9", stderr
    assert not [pid for pid in pids if Path(f"/proc/{pid}").exists()], stderr
