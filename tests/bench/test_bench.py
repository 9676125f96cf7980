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
from subprocess import CompletedProcess

import pytest

from clients import rabbitmq

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
HARNESS = BENCH / "harness"


def _run(script: str, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> CompletedProcess[str]:
    """``python bench/<script> <args>`` from the project's root, its output as text."""
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env
    )


def _output(script: str, *args: str, timeout: float = 120, env: dict[str, str] | None = None) -> str:
    """What ``bench/<script> <args>`` printed, once it exited 0 (else the test fails, showing both outputs)."""
    p = _run(script, *args, timeout=timeout, env=env)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p.stdout


@pytest.mark.slow
def test_quick_compare_prints_a_row_per_scenario_and_loses_nothing(tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    stdout = _output("compare.py", "--quick", "--scenarios", "A,C", "--out", str(out), timeout=90)

    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 9 and cells[1] == "ours":
            rows[cells[0]] = cells
    assert set(rows) == {"A", "C"}, stdout
    for scen, cells in rows.items():
        assert cells[2].startswith("1/1"), f"{scen}: reps ok/run is {cells[2]!r}"
        assert cells[8] == "0 / 0", f"{scen}: lost / dup is {cells[8]!r}"
        assert re.fullmatch(r"[\d,]+(\s.*)?", cells[3]), f"{scen}: no msg/s in {cells[3]!r}"
    assert "Reference, not this run" in stdout
    # the build and the loop our broker named at its start, in the output and the JSON
    assert re.search(r"^# ours: core (compiled|interpreted)\b.*, event loop (uvloop|asyncio)\b", stdout, re.M), stdout

    recs = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    run = next(r for r in recs if r.get("type") == "run")
    ours = next(b for b in run["brokers"] if b["broker"] == "ours")
    assert ours["core"] and ours["loop"] and ours["startup_ms"] > 0, ours
    measured = [r for r in recs if r.get("type") == "rep" and r.get("phase") == "measure"]
    assert sorted(r["scenario"] for r in measured) == ["A", "C"]
    for r in measured:
        assert r["ok"] and r["lost"] == 0 and r["duplicates"] == 0, r
        assert r["received"] == r["expected"] > 0, r
        assert r["rss_peak_mb"] > 0, r


#: A benchmark's command line it refuses, and what its refusal says.
REFUSALS = [
    (("compare.py", "--scenarios", "A,Z"), "unknown scenario(s) Z"),
    (("cost.py", "--scenarios", "fanout"), "unknown scenario 'fanout'"),
    (("turn.py", "--messages", "0"), "--messages must be at least 1, not 0"),
    (("rss.py", "--messages", "0"), "--messages must be at least 1, not 0"),
    (("rss.py", "--expires-in", "-5"), "--expires-in must not be negative, not -5"),
    (
        ("rss.py", "--expires-in", "30"),
        "--expires-in must be at least 600 s (the messages must outlive the run), not 30",
    ),
]


@pytest.mark.parametrize("command,says", REFUSALS, ids=[" ".join(command) for command, _ in REFUSALS])
def test_a_benchmark_refuses_a_bad_argument_and_says_why(command: tuple[str, ...], says: str) -> None:
    p = _run(*command, timeout=60)
    assert p.returncode == 2 and says in p.stderr, p.stderr


def test_vendored_harness_is_the_shared_one_but_for_its_origin_line() -> None:
    table = (HARNESS / "README.md").read_text()
    hashes = dict(re.findall(r"^\| `([^`]+)` \| `([0-9a-f]{64})` \|$", table, re.M))
    assert len(hashes) == 8, hashes
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


def _rep(broker: str, scen: str, rep: int, rate: float, p99: float = 1.0, noisy: bool = False) -> dict:
    return {
        "type": "rep",
        "phase": "measure",
        "broker": broker,
        "scenario": scen,
        "rep": rep,
        "ok": True,
        "noisy": noisy,
        "e2e_rate": rate,
        "latency_ms": {"p50": p99 / 2, "p99": p99},
        "rss_peak_mb": 40.0 if broker == "ours" else 300.0,
        "data_dir_bytes": 4096 if broker == "ours" else None,
    }


def test_matrix_table_has_a_column_per_broker_and_both_ratios_with_their_goals(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The table docs/benchmarks.md shows: medians per broker, ours / each other broker,
    the goals judged on the ratio of the medians (E on its p99, lower is better)."""
    monkeypatch.syspath_prepend(str(BENCH))
    import summary

    records = []
    for rep in (1, 2, 3):
        records += [_rep("ours", "A", rep, 100_000 + rep), _rep("activemq", "A", rep, 50_000, noisy=rep == 1)]
        records += [_rep("rabbitmq", "A", rep, 10_000)]
        records += [_rep("ours", "E", rep, 500, p99=0.2), _rep("activemq", "E", rep, 500, p99=0.5)]
        records += [_rep("rabbitmq", "E", rep, 500, p99=0.3)]
    meta = {"brokers": [{"broker": "ours", "startup_ms": 420}]}
    brokers = ["ours", "activemq", "rabbitmq"]
    header, rows = summary.matrix_rows(records, ["A", "E"], "ours", brokers, meta)
    assert header[:6] == ["scenario", "ours", "ActiveMQ", "RabbitMQ", "ours / ActiveMQ", "ours / RabbitMQ"]
    a, e = rows
    assert a[1:4] == ["100,002", "50,000", "10,000"]
    assert a[4].startswith("**2.00**") and a[5].startswith("**10.00**"), a
    assert a[6] == ">= 2.5: **not met**; >= 6: met", a
    assert a[7] == "0 of 3 / 1 of 3 / 0 of 3", a
    assert e[1:4] == ["0.20 ms p99", "0.50 ms p99", "0.30 ms p99"]
    assert e[4] == "**0.40**" and e[6] == "p99 <= 0.5: met", e
    # with the relay in the run, a goal not met says what the floor reached on the same ratio
    relay = [_rep("relay", "A", rep, 120_000, p99=0.15) for rep in (1, 2, 3)]
    header, rows = summary.matrix_rows(records + relay, ["A"], "ours", [*brokers, "relay"], meta)
    assert header[4:8] == ["the relay", "ours / ActiveMQ", "ours / RabbitMQ", "ours / the relay"], header
    assert rows[0][8] == ">= 2.5: **not met** (the relay: 2.40); >= 6: met", rows[0]
    lines = summary.targets(records, "ours", brokers, meta)
    assert "- start to port open < 0.5 s: 0.42 s (one start, under this run's load) -> met" in lines, lines
    assert "- broker RSS < 100 MB through the matrix: 40.0 MB (peak) -> met" in lines, lines

    # without RabbitMQ in the run its goals are not judged, and its column is not there
    header, rows = summary.matrix_rows(records, ["A"], "ours", ["ours", "activemq"], meta)
    assert "RabbitMQ" not in header and rows[0][3].startswith("**2.00**") and rows[0][4] == ">= 2.5: **not met**"


def test_activemq_runs_the_vendored_configuration_on_free_ports(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The harness's activemq.xml names 61613 and 61616, which a broker of ours may hold:
    the bench's copy moves its two connectors to free ports and changes nothing else."""
    monkeypatch.syspath_prepend(str(BENCH))
    import brokers

    copy = tmp_path / "activemq.xml"
    port = brokers.on_free_ports(brokers.AMQ_HARNESS_CONF, copy)
    original = brokers.AMQ_HARNESS_CONF.read_text().splitlines()
    moved = copy.read_text().splitlines()
    changed = [(a, b) for a, b in zip(original, moved, strict=True) if a != b]
    assert [a.strip() for a, _ in changed] == [
        '<transportConnector name="openwire" uri="tcp://127.0.0.1:61616"/>',
        '<transportConnector name="stomp" uri="stomp://127.0.0.1:61613"/>',
    ]
    assert f'uri="stomp://127.0.0.1:{port}"' in changed[1][1] and port != 61613
    assert "61616" not in changed[0][1]

    no_stomp = tmp_path / "no-stomp.xml"
    no_stomp.write_text("\n".join(line for line in original if "stomp://" not in line))
    with pytest.raises(brokers.BrokerStartError, match="expected one stomp:// transport connector"):
        brokers.on_free_ports(no_stomp, tmp_path / "copy.xml")


@pytest.mark.slow
def test_startup_times_each_start_to_the_port_open_names_the_build_and_the_floor() -> None:
    p = subprocess.run(
        [sys.executable, str(BENCH / "startup.py"), "--starts", "2", "--floor", "--json", os.devnull],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    times = r"\| 2 +\| (\d+\.\d\d) s +\| (\d+\.\d\d) s +\| (\d+\.\d\d) s +\|"
    ours = re.search(rf"^\| minibroker serve +{times} [\d.]+ MB +\| (compiled|interpreted)", p.stdout, re.M)
    floor = re.search(rf"^\| floor: python, a listening socket +{times} - ", p.stdout, re.M)
    assert ours and floor, p.stdout
    for found in (ours, floor):
        median, fastest, slowest = (float(found.group(i)) for i in (1, 2, 3))
        assert 0 < fastest <= median <= slowest, p.stdout
    # timed as an installed broker starts: its modules byte-compiled, none compiled at each start
    assert "the broker's bytecode: compiled first" in p.stdout


@pytest.mark.slow
@pytest.mark.skipif(rabbitmq.installed_problem() is not None, reason="RabbitMQ is needed")
def test_quick_compare_with_rabbitmq_adds_its_column_and_ratio(tmp_path: Path) -> None:
    stdout = _output(
        "compare.py",
        "--quick",
        "--with-rabbitmq",
        "--scenarios",
        "A",
        timeout=300,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    table = [[c.strip() for c in line.strip().strip("|").split("|")] for line in stdout.splitlines()]
    rows = {cells[1]: cells for cells in table if len(cells) == 9}
    assert rows["rabbitmq"][2].startswith("1/1") and rows["rabbitmq"][8] == "0 / 0", stdout
    assert "*ours / rabbitmq*" in rows, stdout
    assert "RabbitMQ 3." in stdout.splitlines()[0]
    assert not rabbitmq.processes_under(str(tmp_path))  # the node is stopped, by pid


@pytest.mark.slow
def test_backlog_bench_pages_under_limits_and_not_without() -> None:
    """bench/backlog.py measures the store cursor only if the limited broker really pages."""
    stdout = _output("backlog.py", "--messages", "3000", "--reps", "1")
    counts = dict(
        re.findall(
            r"^(plain|limits): store-only after producing \(per rep\) \[(\d+)\], "
            r"paged in while draining \[(?:\d+)\]$",
            stdout,
            re.M,
        )
    )
    paged = dict(re.findall(r"^(plain|limits): .*paged in while draining \[(\d+)\]$", stdout, re.M))
    assert counts == {"plain": "0", "limits": counts.get("limits")} and int(counts["limits"]) > 0, stdout
    assert paged["limits"] == counts["limits"] and paged["plain"] == "0", stdout
    for phase in ("produce", "consume", "through"):
        assert re.search(rf"^\| {phase} \| [\d,]+ ", stdout, re.M), stdout


@pytest.mark.slow
def test_rss_bench_prints_each_phase_and_the_bound() -> None:
    """bench/rss.py: a limited broker's RSS phase by phase, with the backlog store-only
    and the index mostly on disk past the cache (20,000 rows fit in it: none spilled); with
    ``--expires-in``, every backlog message has a time to live (kept in the index's columns)."""
    stdout = _output("rss.py", "--messages", "20000", "--expires-in", "3600")
    assert "20,000 persistent messages x 256 B, each expiring 3600 s ahead" in stdout
    for phase in ("idle", "warm", r"20,000 produced \([\d,]+ store-only\)", "drained"):
        assert re.search(rf"^\| {phase} \| \d+\.\d \|$", stdout, re.M), stdout
    phases = json.loads(stdout.strip().splitlines()[-1])
    assert phases["store_only"] > 15000 and phases["index_bytes"] > 0, phases
    assert re.search(r"^bound over the idle base: ", stdout, re.M), stdout
    spilled = _output(
        "rss.py", "--messages", "6000", "--non-persistent", "--config", str(BENCH / "configs" / "spill.toml")
    )
    assert "6,000 non-persistent messages x 256 B" in spilled
    assert json.loads(spilled.strip().splitlines()[-1])["store_only"] > 2000, spilled  # in the temp store


def test_cost_measures_every_scenario() -> None:
    """bench/cost.py runs each in-process scenario (page-in drains exactly what it filled, and
    the through scenarios receive every message sent; each checks its count itself)."""
    stdout = _output("cost.py", "--messages", "400", "--reps", "1")
    rows = dict(re.findall(r"^\| ([a-z-]+) \| ([\d.]+) \|$", stdout, re.M))
    assert set(rows) == {"queue", "topic", "ack", "page-in", "through", "through-plain"}, stdout
    assert all(float(v) > 0 for v in rows.values()), stdout


@pytest.mark.parametrize(
    "scenario,heading",
    [
        ("D", "# scenario D's turn (ACK in, next MESSAGE out), 300 turns, one raw-socket consumer"),
        ("E", "# scenario E's message (SEND in, its MESSAGE out, ack auto), 300 messages, one at a time"),
    ],
)
def test_turn_measures_the_broker_and_the_asyncio_floor(scenario: str, heading: str) -> None:
    """bench/turn.py drives D's ACK -> MESSAGE turn, or E's SEND -> MESSAGE, through the real
    server and through a bare asyncio one."""
    stdout = _output("turn.py", "--scenario", scenario, "--messages", "300", "--floor")
    assert heading in stdout.splitlines(), stdout
    rows = dict(re.findall(r"^\| (minibroker|asyncio floor) \| ([\d,]+) \| [\d.]+ \| [\d.]+ \|$", stdout, re.M))
    assert set(rows) == {"minibroker", "asyncio floor"}, stdout
    assert all(int(rate.replace(",", "")) > 0 for rate in rows.values()), stdout


def test_turn_measures_the_broker_on_each_event_loop_asked_for() -> None:
    """``--loop asyncio --loop uvloop``: one row per server and loop, the broker started with ``serve --loop``."""
    pytest.importorskip("uvloop", reason="the fast extra (uvloop) is installed by make test")
    stdout = _output("turn.py", "--messages", "200", "--loop", "asyncio", "--loop", "uvloop")
    rows = re.findall(r"^\| minibroker \((asyncio|uvloop)\) \| ([\d,]+) \|", stdout, re.M)
    assert [loop for loop, _ in rows] == ["asyncio", "uvloop"], stdout
