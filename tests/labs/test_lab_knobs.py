"""Knobs: one run, a setting changed, a setting swept, the brief; and the virtual clock's
runs cost CPU, not fsyncs."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from clients.cli import main as cli
from clients.labs import find_labs, run_lab
from clients.labs.settings import parse_setting
from storage.fileio import FileOps, using

LABS = {lab.number: lab for lab in find_labs()}


def _digest() -> str:
    h = hashlib.sha256()
    for lab in LABS.values():
        for p in sorted(lab.directory.glob("*.toml")):
            h.update(p.read_bytes())
    return h.hexdigest()


def test_one_run_with_a_setting_changed(capsys) -> None:
    """--run plays one run; --set cures lab 03's stall from the command line, no file edited."""
    before = _digest()
    assert (
        cli(["lab", "run", "03", "--run", "default-prefetch", "--set", "destination_policy[>].queue_prefetch=1"]) == 0
    )
    out = capsys.readouterr().out
    assert out.count("    verdict: ") == 1 and "[default-prefetch]" in out
    assert (
        "verdict: HEALTHY (with destination_policy[>].queue_prefetch=1; the lab's own configuration: PATHOLOGY)" in out
    )
    assert "processed 1000 of 1000 messages" in out
    assert _digest() == before


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("system_usage.memory_limt=2mb", "unknown key 'system_usage.memory_limt' in "),
        ("system_usage.memory_limit=lots", "bad value for 'system_usage.memory_limit': 'lots'"),
        ("destination_policy[>].prefetch=1", "unknown key 'destination_policy["),
        ("memory_limit=2mb", "unknown key 'memory_limit': a key is SECTION.KEY"),
        ("store.fsync", "--set wants KEY=VALUE"),
    ],
)
def test_a_bad_setting_is_refused_as_the_file_would_be(capsys, setting: str, message: str) -> None:
    assert cli(["lab", "run", "00", "--run", "restart-legacy", "--set", setting]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err, err


def test_a_bad_sweep_or_run_is_one_line(capsys) -> None:
    for args, message in [
        (["--sweep", "store.fsync=never"], "two values or more"),
        (["--sweep", "system_usage.memory_limit=1mb,lots"], "bad value for 'system_usage.memory_limit': 'lots'"),
        (["--sweep", "nope.key=1,2"], "unknown section 'nope'"),
        (["--run", "no-such-run"], "has no run 'no-such-run'; its runs: restart-legacy"),
    ]:
        assert cli(["lab", "run", "00", *args]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and message in err, err


def test_lab_03_prefetch_sweeps_on_the_virtual_clock(capsys, tmp_path: Path) -> None:
    """Prefetch 1 and 10 let the slow consumer through; 100 and 1000 stall it."""
    key = "destination_policy[>].queue_prefetch"
    assert cli(["lab", "run", "03", "--sweep", f"{key}=1,10,100,1000", "--plot", str(tmp_path)]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[2:6]}
    assert rows["1"][-1] == rows["10"][-1] == "healthy" and rows["1"][1] == "1000"
    assert rows["100"][-1] == rows["1000"][-1] == "pathology" and int(rows["1000"][1]) < 200
    assert (tmp_path / "03-prefetch-stalled-socket-sweep.png").stat().st_size > 0


def test_lab_00_destination_memory_limit_sweeps(capsys) -> None:
    """A limit of its own on the backlog queues feeds A; as large as the broker's, it does not."""
    args = ["--run", "restart-current-two-backlogs", "--sweep", "destination_policy[B.>].memory_limit=256kb,4mb"]
    assert cli(["lab", "run", "00", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    small, large = lines[2].split(), lines[3].split()
    assert small[0] == "256kb" and small[1] == "50" and small[-1] == "healthy"
    assert large[0] == "4mb" and large[1] == "0" and large[2] == "100%" and large[-1] == "pathology"


def test_brief_prints_each_grade_and_three_telling_lines(capsys) -> None:
    assert cli(["lab", "run", "03", "--brief", "--run", "link-stealing"]) == 0
    out = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(out) if line.startswith("  [link-stealing] MITIGATED (as promised): "))
    evidence = out[at + 1 : at + 4]
    assert evidence[0] == "      - not healthy: processed 154, healthy needs >= 100% of messages"
    assert all(line.startswith("      - ") for line in evidence) and not out[at + 4].startswith("      - ")
    assert "handout: examples/labs/03-prefetch-stalled-socket/handout.md; glossary: docs/glossary.md" in out[3]


class _CountingOps(FileOps):
    def __init__(self) -> None:
        self.fsyncs = 0

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        super().fsync(fd)


def test_lab_00_on_the_virtual_clock_makes_at_most_100_fsyncs() -> None:
    """Counted through the storage's file seam: lab 00 teaches memory, not durability
    (virtual_fsync = false), so its journals are written but not fsynced per message."""
    ops = _CountingOps()
    with using(ops):
        results = run_lab(LABS["00"], out=lambda line: None)
    assert all(r.as_promised for r in results)
    assert 0 < ops.fsyncs <= 100, ops.fsyncs


def test_a_lab_about_durability_keeps_its_fsyncs() -> None:
    """Lab 04 teaches the journal: its virtual runs fsync as their configurations say; lab
    00's get store.fsync = "never", unless the run sets it itself."""
    from clients.labs.runner import on_virtual_clock

    journal = LABS["04"].run_named("priority")
    assert on_virtual_clock(LABS["04"], journal) == journal
    memory = LABS["00"].run_named("restart-legacy")
    assert memory.config().store.fsync == "always"
    assert on_virtual_clock(LABS["00"], memory).config().store.fsync == "never"
    chosen = memory.with_settings(parse_setting("store.fsync=batch"))
    assert on_virtual_clock(LABS["00"], chosen).config().store.fsync == "batch"
