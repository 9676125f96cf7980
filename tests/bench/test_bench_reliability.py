"""The reliability benches run, with tiny counts, so that they cannot rot.

Each prints its table and leaves its JSON; what they count (lost messages,
internal errors, invariant breaks) is asserted where a tiny run can already
tell. No speed and no memory figure is asserted: those are the benches' own
business, run at full size on a quiet machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from broker_support import patches_a_core_object

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"


def bench(script: str, tmp_path: Path, *args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, Any]:
    out = tmp_path / f"{script}.json"
    p = subprocess.run(
        [sys.executable, str(BENCH / f"{script}.py"), *args, "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )
    document = json.loads(out.read_text()) if out.exists() else None
    if document is not None:
        assert document["bench"] == script and document["date"] and document["command"].startswith(f"{script}.py")
        assert f"JSON: {out}" in p.stdout
    return p, document


@pytest.mark.slow
def test_sigkill_rounds_count_what_was_lost_with_and_without_a_backlog(tmp_path: Path) -> None:
    p, doc = bench("sigkill", tmp_path, "--rounds", "1", "--both", "--backlog", "300")
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert re.search(r"^\| backlog \| SIGKILLs \| sends receipted \| ACKs receipted \| lost ", p.stdout, re.M)
    assert [r["backlog"] for r in doc["runs"]] == [0, 300]
    for r in doc["runs"]:
        assert r["rounds"] == 1 and r["receipted"] >= r["backlog"] > -1 and r["acks_confirmed"] > 0, r
        assert (r["lost"], r["delivered_after_ack"], r["duplicated"], r["unknown_bodies"]) == (0, 0, 0, 0), r
    assert doc["runs"][1]["config"].endswith("sigkill-backlog.toml")


@pytest.mark.slow
def test_powerloss_cuts_a_real_file_system_or_says_why_it_cannot(tmp_path: Path) -> None:
    """As root with loop devices: ext4 cut with EXT4_IOC_SHUTDOWN, once per layout; else
    status 2 and the reason, never a silent skip."""
    p, doc = bench("powerloss", tmp_path, "--rounds", "2", "--size", "64")
    if p.returncode == 2:
        assert doc is None and "powerloss: cannot cut a real file system here:" in p.stderr, p.stderr
        assert os.geteuid() != 0 or "failed" in p.stderr or "no loop devices" in p.stderr, p.stderr
        return
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert re.search(r"^\| layout +\| destination +\| power losses \| sends receipted \|", p.stdout, re.M)
    assert [(r["layout"], r["power_losses"]) for r in doc["runs"]] == [("growing", 1)] * 2 + [("ring", 1)] * 2
    for r in doc["runs"]:
        assert r["receipted"] > 0 and r["acks_confirmed"] > 0, r
        assert (r["lost"], r["acks_undone"], r["duplicated"], r["unknown_bodies"]) == (0, 0, 0, 0), r


@pytest.mark.slow
def test_fuzz_runs_the_generator_s_frames_and_checks_every_connection(tmp_path: Path) -> None:
    p, doc = bench("fuzz", tmp_path, "--frames", "300", "--pool", "40", "--per-broker", "60")
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert doc["frames"] >= 300 and doc["connections"] > 0 and doc["brokers"] >= 2  # with and without a journal
    assert (doc["internal_errors"], doc["errors_without_message"], doc["invariant_breaks"], doc["bystander_hurt"]) == (
        0,
        0,
        0,
        0,
    ), doc["examples"]
    assert doc["bystander_checks"] >= doc["brokers"] and doc["connection_ends_checked"] >= doc["connections"]


@patches_a_core_object
def test_fuzz_counts_a_connection_end_that_leaves_something_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench counts what the core's checker of connection ends finds: here a
    queue whose removal of a subscription raises (as a bug would)."""
    sys.path.insert(0, str(BENCH))
    import fuzz

    from minibroker.destinations import Queue
    from minibroker.frames import Frame
    from minibroker.protocol import encode

    fuzzer = fuzz.Fuzzer()
    fuzzer.start_broker(0)
    subscribe = encode(Frame("SUBSCRIBE", {"destination": "/queue/f", "id": "s", "ack": "client"}), "1.2")
    fuzzer.connection("1.2", [subscribe])
    assert fuzzer.counts["invariant breaks"] == 0

    def broken(self: Queue, sub: object) -> None:
        raise RuntimeError("a bug in the queue")

    monkeypatch.setattr(Queue, "remove_subscription", broken)
    fuzzer.connection("1.2", [subscribe])
    found = fuzzer.examples["invariant breaks"]
    assert fuzzer.counts["invariant breaks"] == len(found) > 0
    assert "its close failed at removing subscription 's' on /queue/f" in found[0], found
    monkeypatch.undo()
    fuzzer.finish()


@pytest.mark.slow
def test_preauth_reports_the_broker_s_memory_under_hostile_sockets(tmp_path: Path) -> None:
    p, doc = bench("preauth", tmp_path, "--sockets", "10", "--seconds", "2")
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert re.search(
        r"^\| hostile sockets \| CONNECT body +\| accepted \| closed by broker \| refused \| idle RSS MB "
        r"\| peak RSS MB ",
        p.stdout,
        re.M,
    )
    assert doc["opened"] + doc["refused"] == 10 and doc["peak_rss_mb"] >= doc["idle_rss_mb"] > 0, doc
    assert doc["broker_alive"] and doc["bystander_round_trips"] > 0 and doc["bystander_failed"] == 0, doc
    # Under the limit on a frame before login: the sockets hold their CONNECTs, never sent whole.
    p, doc = bench(
        "preauth", tmp_path, "--sockets", "10", "--seconds", "2", "--content-length", "2000", "--rate", "400"
    )
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert doc["content_length"] == 2000 and 0 < doc["hostile_bytes_sent"] < 10 * 2000, doc


@pytest.mark.slow
@pytest.mark.parametrize(
    ("config", "disk"),
    [("diskfull.toml", "tmpfs"), ("diskfull-fail.toml", "tmpfs"), ("diskfull-fail.toml", "simulated")],
)
def test_diskfull_runs_on_a_tmpfs_or_a_simulated_disk(tmp_path: Path, config: str, disk: str) -> None:
    """On a tmpfs when it can mount one (root), else, or with --simulated, on a disk
    simulated through storage's file seam: the same steps and the same promises."""
    extra = ["--simulated"] if disk == "simulated" else []
    p, doc = bench("diskfull", tmp_path, "--size", "8", "--config", str(BENCH / "configs" / config), *extra)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    if disk == "simulated" or os.geteuid() != 0:
        assert doc["disk"] == "simulated (ENOSPC injected)" and "the disk is simulated" in p.stderr, p.stderr
    assert doc["receipted"] > 0 and doc["lost"] == 0 and doc["drained"] == doc["receipted"], doc
    assert doc["persistent_when_full"] != "ok" and doc["persistent_after_drain"] == "ok", doc
    assert doc["non_persistent_when_full"] == "ok" and doc["restart"] == "ok", doc
    if config == "diskfull-fail.toml":  # refused at once, saying why
        assert "has no space left" in doc["fill_ended_by"] and "has no space left" in doc["persistent_when_full"]
