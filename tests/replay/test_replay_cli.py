"""``minibroker replay``, ``workload generate`` and ``analyze`` on the command line.

``clients.cli.main`` runs its own event loop, and the broker runs in a
background thread, so these tests are plain functions.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from replay_tables import consumer, producer

import clients.cli
from clients.spark.actions import iter_actions
from minibroker.trace import validate_event

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "examples" / "workloads" / "tiny.toml"


def small_table(table):
    return table(
        [
            *producer("p-0", "/queue/C", [0.1 + i * 0.02 for i in range(10)], persistent=True),
            *producer("p-1", "/queue/C", [0.11 + i * 0.02 for i in range(10)]),
            *consumer("c-0", "/queue/C", stop=1.2, prefetch=3),
        ]
    )


def test_replay_end_to_end(broker, table, tmp_path, capsys) -> None:
    trace = tmp_path / "client.jsonl"
    status = clients.cli.main(
        [
            "replay",
            str(small_table(table)),
            "--port",
            str(broker.port),
            "--trace",
            str(trace),
            "--no-progress",
            "--receipts",
            "persistent",
            "--speed",
            "2",
            "--broker-name",
            "mb",
        ]
    )
    out, err = capsys.readouterr()
    assert status == 0, err
    assert err == ""
    assert "sent 20 " in out and "received 20 " in out and "acked 20" in out
    assert "behind schedule" in out and "errors:    none" in out and str(trace) in out
    events = [json.loads(line) for line in trace.read_text().splitlines()]
    assert [p for e in events for p in validate_event(e)] == []
    assert {e["broker"] for e in events} == {"mb"}
    assert sum(e["event"] == "acked" for e in events) == 20


def test_the_example_workload_delivers_what_its_selector_selects(broker, tmp_path, capsys) -> None:
    """examples/workloads/tiny.toml end to end: its consumer's selector matches
    the messages whose ``kind`` is ``order``, and those arrive."""
    out = tmp_path / "tiny"
    assert clients.cli.main(["workload", "generate", str(TINY), "--out", str(out)]) == 0
    assert not (out / "actions.jsonl").exists()  # Parquet alone unless asked: replay plays it
    wanted = sum(1 for a in iter_actions(out) if a.action == "send" and a.headers and a.headers["kind"] == "order")
    capsys.readouterr()
    status = clients.cli.main(["replay", str(out), "--port", str(broker.port), "--json", "--speed", "4"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0
    assert 0 < wanted < 40
    assert (report["sent"], report["received"], report["errors"]) == (40, wanted, 0)


def test_replay_json_summary(broker, table, capsys) -> None:
    status = clients.cli.main(
        ["replay", str(small_table(table)), "--port", str(broker.port), "--json", "--speed", "4", "--shard", "0/1"]
    )
    report = json.loads(capsys.readouterr().out)
    assert status == 0
    assert (report["sent"], report["received"], report["acked"], report["errors"]) == (20, 20, 20, 0)
    assert report["lag"]["count"] == report["played"] == 28
    assert report["lag"]["max"] >= report["lag"]["p50"] >= 0


def test_replay_against_no_broker_exits_1_with_one_line_per_message(table, capsys) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    status = clients.cli.main(["replay", str(small_table(table)), "--port", str(port)])
    out, err = capsys.readouterr()
    assert status == 1
    assert err.count("\n") == 1 and "connection refused" in err and "Traceback" not in err
    assert "errors:    3" in out and "skipped 25" in out


def _bad_cases(tmp_path: Path, actions: str, trace: str) -> list[tuple[list[str], str]]:
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text('[[producers]]\nname = "p"\ndest = "nowhere"\nrate = 1\nstop = 1\n')
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    out = str(tmp_path / "out")
    return [
        (["replay", actions, "--speed", "0"], "bad --speed '0'"),
        (["replay", actions, "--speed", "fast"], "bad --speed 'fast'"),
        (["replay", actions, "--max-clients", "0"], "bad --max-clients '0'"),
        (["replay", actions, "--port", "70000"], "bad --port '70000'"),
        (["replay", actions, "--heartbeat", "often"], "bad --heartbeat"),
        (["replay", actions, "--shard", "2/2"], "bad --shard: expected I/N"),
        (["replay", str(tmp_path / "nothing")], "no such action table"),
        (["replay", str(tmp_path)], "no action table under"),
        (["replay", actions, "--trace", str(tmp_path / "no" / "t.jsonl")], "no such directory"),
        (["workload", "generate", str(tmp_path / "missing.toml"), "--out", out], "no such workload file"),
        (["workload", "generate", str(bad_toml), "--out", out], "producers[0].dest"),
        (["workload", "generate", str(TINY), "--out", out, "--scale", "0"], "bad --scale '0'"),
        (["workload", "generate", str(TINY), "--out", out, "--format", "csv"], "bad --format 'csv'"),
        (["workload", "generate", str(TINY), "--out", out, "--engine", "jvm"], "bad --engine 'jvm'"),
        (["workload", "generate", str(TINY), "--out", "s3a://b/x", "--engine", "inprocess"], "is a URL"),
        (
            ["workload", "generate", str(TINY), "--out", out, "--engine", "inprocess", "--master", "local[2]"],
            "--master",
        ),
        (["workload", "generate", str(TINY), "--out", str(a_file / "sub")], "is a file, not a directory: "),
        (["workload", "generate", str(TINY), "--out", out, "--part-rows", "0"], "bad --part-rows '0'"),
        (["workload", "generate", str(TINY), "--out", str(a_file)], "is a file"),
        (["analyze", str(tmp_path / "missing.jsonl"), "--out", out], "no such trace"),
        (["analyze", trace, "--out", out, "--bucket", "-1"], "bad --bucket '-1'"),
        (["analyze", trace, "--out", out, "--hwm", "120"], "bad --hwm '120'"),
        (["analyze", trace, "--out", str(a_file)], "is a file"),
    ]


def test_bad_arguments_give_one_line_and_no_traceback(table, tmp_path, capsys) -> None:
    actions = str(small_table(table))
    trace = tmp_path / "t.jsonl"
    trace.write_text("")
    for argv, message in _bad_cases(tmp_path, actions, str(trace)):
        status = clients.cli.main(argv)
        out, err = capsys.readouterr()
        assert status == 2, (argv, err)
        assert err.startswith(f"minibroker {argv[0]}: ") and err.count("\n") == 1, (argv, err)
        assert message in err, (argv, err)


@pytest.mark.parametrize(
    "argv", [["replay", "--help"], ["workload", "generate", "--help"], ["analyze", "--help"], ["workload", "--help"]]
)
def test_help(argv, capsys) -> None:
    with pytest.raises(SystemExit) as exit:
        clients.cli.main(argv)
    assert exit.value.code == 0
    assert capsys.readouterr().out.startswith("usage: minibroker ")


@pytest.mark.parametrize(
    "args, refusal",
    [
        (["nope.toml"], "no such workload file: nope.toml"),
        ([str(TINY), "--engine", "inprocess", "--out", "hdfs://nn/x"], "--out 'hdfs://nn/x' is a URL"),
    ],
)
def test_the_cli_and_its_refusals_never_import_pyspark(tmp_path, args, refusal) -> None:
    code = (
        "import sys, clients.cli as c; s = c.main(sys.argv[1:]); "
        "print(s, [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j', 'matplotlib')])"
    )
    run = subprocess.run(
        [sys.executable, "-c", code, "workload", "generate", "--out", str(tmp_path), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert run.stdout == "2 []\n"
    assert run.stderr.startswith(f"minibroker workload: {refusal}") and run.stderr.count("\n") == 1
    assert list(tmp_path.iterdir()) == []  # nothing made, not even a local directory named like the URL


@pytest.mark.parametrize("command, job", [("workload", "clients.spark.workload"), ("analyze", "clients.spark.analyze")])
def test_options_match_the_spark_jobs(command, job, capsys) -> None:
    """Every option of the job is offered by the command, and no other."""
    import importlib

    module = importlib.import_module(f"clients.commands.{command}")
    with pytest.raises(SystemExit):
        importlib.import_module(job).main(["--help"])
    theirs = set(re.findall(r"--[a-z][a-z-]+", capsys.readouterr().out)) - {"--help"}
    ours = {flag for flag, *_ in module.OPTIONS} | {"--out"}
    assert ours == theirs
