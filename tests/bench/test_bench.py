"""Smoke tests for bench/compare.py: it runs, and the harness it vendors is the shared one.

No speed is asserted anywhere: the machine is shared and the numbers are the
benchmark's business, not the test suite's.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from clients import rabbitmq

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
HARNESS = BENCH / "harness"


@pytest.mark.slow
def test_quick_compare_prints_a_row_per_scenario_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    p = subprocess.run(
        [sys.executable, str(BENCH / "compare.py"), "--quick", "--scenarios", "A,C", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=ROOT,
    )
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"

    rows = {}
    for line in p.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[1] == "ours":
            rows[cells[0]] = cells
    assert set(rows) == {"A", "C"}, p.stdout
    for scen, cells in rows.items():
        assert cells[2].startswith("1/1"), f"{scen}: reps ok/run is {cells[2]!r}"
        assert cells[8] == "0 / 0", f"{scen}: lost / dup is {cells[8]!r}"
        assert re.fullmatch(r"[\d,]+(\s.*)?", cells[3]), f"{scen}: no msg/s in {cells[3]!r}"
    assert "Reference, not this run" in p.stdout

    recs = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    measured = [r for r in recs if r.get("type") == "rep" and r.get("phase") == "measure"]
    assert sorted(r["scenario"] for r in measured) == ["A", "C"]
    for r in measured:
        assert r["ok"] and r["lost"] == 0 and r["duplicates"] == 0, r
        assert r["received"] == r["expected"] > 0, r
        assert r["rss_peak_mb"] > 0, r


def test_compare_refuses_an_unknown_scenario() -> None:
    p = subprocess.run(
        [sys.executable, str(BENCH / "compare.py"), "--scenarios", "A,Z"],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
    )
    assert p.returncode == 2 and "unknown scenario(s) Z" in p.stderr, p.stderr


def test_vendored_harness_is_the_shared_one_but_for_its_origin_line() -> None:
    table = (HARNESS / "README.md").read_text()
    hashes = dict(re.findall(r"^\| `([^`]+)` \| `([0-9a-f]{64})` \|$", table, re.M))
    assert len(hashes) == 7, hashes
    for name, digest in hashes.items():
        lines = (HARNESS / name).read_text().splitlines(keepends=True)
        origin = [i for i, line in enumerate(lines[:2]) if "vendored from ../shared/bench/" in line]
        assert origin, f"{name}: no origin line"
        del lines[origin[0]]
        assert hashlib.sha256("".join(lines).encode()).hexdigest() == digest, f"{name} differs from the shared copy"


def test_missing_activemq_names_the_install_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import brokers

    from clients import activemq

    monkeypatch.setattr(activemq, "AMQ_JAR", tmp_path / "no-such" / "activemq.jar")
    with pytest.raises(brokers.BrokerStartError, match=re.escape("apt-get install -y activemq")):
        brokers.ActiveMQ.check_installed()


def test_missing_rabbitmq_names_the_install_command(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.syspath_prepend(str(BENCH))
    import brokers

    monkeypatch.setattr(rabbitmq, "RABBITMQ_SERVER", tmp_path / "no-such" / "rabbitmq-server")
    with pytest.raises(brokers.BrokerStartError, match=re.escape("apt-get install -y rabbitmq-server")):
        brokers.RabbitMQ.check_installed()


@pytest.mark.slow
@pytest.mark.skipif(rabbitmq.installed_problem() is not None, reason="RabbitMQ is needed")
def test_quick_compare_with_rabbitmq_adds_its_column_and_ratio(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, str(BENCH / "compare.py"), "--quick", "--with-rabbitmq", "--scenarios", "A"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    table = [[c.strip() for c in line.strip().strip("|").split("|")] for line in p.stdout.splitlines()]
    rows = {cells[1]: cells for cells in table if len(cells) == 9}
    assert rows["rabbitmq"][2].startswith("1/1") and rows["rabbitmq"][8] == "0 / 0", p.stdout
    assert "*ours / rabbitmq*" in rows, p.stdout
    assert "RabbitMQ 3." in p.stdout.splitlines()[0]
    assert not rabbitmq.processes_under(str(tmp_path))  # the node is stopped, by pid


@pytest.mark.slow
def test_backlog_bench_pages_under_limits_and_not_without() -> None:
    """bench/backlog.py measures the store cursor only if the limited broker really pages."""
    p = subprocess.run(
        [sys.executable, str(BENCH / "backlog.py"), "--messages", "3000", "--reps", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    counts = dict(
        re.findall(
            r"^(plain|limits): store-only after producing \(per rep\) \[(\d+)\], "
            r"paged in while draining \[(?:\d+)\]$",
            p.stdout,
            re.M,
        )
    )
    paged = dict(re.findall(r"^(plain|limits): .*paged in while draining \[(\d+)\]$", p.stdout, re.M))
    assert counts == {"plain": "0", "limits": counts.get("limits")} and int(counts["limits"]) > 0, p.stdout
    assert paged["limits"] == counts["limits"] and paged["plain"] == "0", p.stdout
    for phase in ("produce", "consume", "through"):
        assert re.search(rf"^\| {phase} \| [\d,]+ ", p.stdout, re.M), p.stdout


@pytest.mark.slow
def test_rss_bench_prints_each_phase_and_the_bound() -> None:
    """bench/rss.py: a limited broker's RSS phase by phase, with the backlog store-only
    and the index mostly on disk past the cache (20,000 rows fit in it: none spilled); with
    ``--expires-in``, every backlog message has a time to live (kept in the index's columns)."""
    p = subprocess.run(
        [sys.executable, str(BENCH / "rss.py"), "--messages", "20000", "--expires-in", "3600"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert "20,000 persistent messages x 256 B, each expiring 3600 s ahead" in p.stdout
    for phase in ("idle", "warm", r"20,000 produced \([\d,]+ store-only\)", "drained"):
        assert re.search(rf"^\| {phase} \| \d+\.\d \|$", p.stdout, re.M), p.stdout
    phases = json.loads(p.stdout.strip().splitlines()[-1])
    assert phases["store_only"] > 15000 and phases["index_bytes"] > 0, phases
    assert re.search(r"^bound over the idle base: ", p.stdout, re.M), p.stdout
    bad = subprocess.run(
        [sys.executable, str(BENCH / "rss.py"), "--messages", "0"], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert bad.returncode == 2 and "--messages must be at least 1, not 0" in bad.stderr
    spilled = subprocess.run(
        [
            sys.executable,
            str(BENCH / "rss.py"),
            "--messages",
            "6000",
            "--non-persistent",
            "--config",
            str(BENCH / "configs" / "spill.toml"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert spilled.returncode == 0, f"stdout:\n{spilled.stdout}\nstderr:\n{spilled.stderr}"
    assert "6,000 non-persistent messages x 256 B" in spilled.stdout
    assert json.loads(spilled.stdout.strip().splitlines()[-1])["store_only"] > 2000, spilled.stdout  # in the temp store
    bad = subprocess.run(
        [sys.executable, str(BENCH / "rss.py"), "--expires-in", "-5"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and "--expires-in must not be negative, not -5" in bad.stderr
    bad = subprocess.run(
        [sys.executable, str(BENCH / "rss.py"), "--expires-in", "30"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert (
        bad.returncode == 2
        and "--expires-in must be at least 600 s (the messages must outlive the run), not 30" in bad.stderr
    )


def test_cost_measures_every_scenario_and_refuses_an_unknown_one() -> None:
    """bench/cost.py runs each in-process scenario (page-in drains exactly what it filled, and
    the through scenarios receive every message sent; each checks its count itself)."""
    p = subprocess.run(
        [sys.executable, str(BENCH / "cost.py"), "--messages", "400", "--reps", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    rows = dict(re.findall(r"^\| ([a-z-]+) \| ([\d.]+) \|$", p.stdout, re.M))
    assert set(rows) == {"queue", "topic", "ack", "page-in", "through", "through-plain"} and all(
        float(v) > 0 for v in rows.values()
    ), p.stdout
    bad = subprocess.run(
        [sys.executable, str(BENCH / "cost.py"), "--scenarios", "fanout"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and "unknown scenario 'fanout'" in bad.stderr, bad.stderr


def test_turn_measures_the_broker_and_the_asyncio_floor() -> None:
    """bench/turn.py drives D's ACK -> MESSAGE turn through the real server (and a bare asyncio one)."""
    p = subprocess.run(
        [sys.executable, str(BENCH / "turn.py"), "--messages", "300", "--floor"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    rows = dict(re.findall(r"^\| (minibroker|asyncio floor) \| ([\d,]+) \| [\d.]+ \| [\d.]+ \|$", p.stdout, re.M))
    assert set(rows) == {"minibroker", "asyncio floor"}, p.stdout
    assert all(int(rate.replace(",", "")) > 0 for rate in rows.values()), p.stdout
    bad = subprocess.run(
        [sys.executable, str(BENCH / "turn.py"), "--messages", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert bad.returncode == 2 and "--messages must be at least 1, not 0" in bad.stderr, bad.stderr


def test_turn_measures_e_s_message_through_the_broker_and_the_floor() -> None:
    """``--scenario E``: a SEND in on one connection, its MESSAGE out on another's auto-ack subscription."""
    p = subprocess.run(
        [sys.executable, str(BENCH / "turn.py"), "--scenario", "E", "--messages", "300", "--floor"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert "scenario E's message (SEND in, its MESSAGE out, ack auto), 300 messages" in p.stdout, p.stdout
    rows = dict(re.findall(r"^\| (minibroker|asyncio floor) \| ([\d,]+) \| [\d.]+ \| [\d.]+ \|$", p.stdout, re.M))
    assert set(rows) == {"minibroker", "asyncio floor"}, p.stdout
    assert all(int(rate.replace(",", "")) > 0 for rate in rows.values()), p.stdout


def test_turn_measures_the_broker_on_each_event_loop_asked_for() -> None:
    """``--loop asyncio --loop uvloop``: one row per server and loop, the broker started with ``serve --loop``."""
    pytest.importorskip("uvloop", reason="the fast extra (uvloop) is installed by make test")
    p = subprocess.run(
        [sys.executable, str(BENCH / "turn.py"), "--messages", "200", "--loop", "asyncio", "--loop", "uvloop"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    rows = re.findall(r"^\| minibroker \((asyncio|uvloop)\) \| ([\d,]+) \|", p.stdout, re.M)
    assert [loop for loop, _ in rows] == ["asyncio", "uvloop"], p.stdout
