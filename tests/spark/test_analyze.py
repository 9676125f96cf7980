"""Trace analysis: each detector fires on its seed's pathology with the right window,
and none fires on a healthy trace."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from .conftest import ANALYSIS_ARGS
from .scenarios import EXPECTED, healthy

pytestmark = pytest.mark.spark


def _key(f: dict) -> tuple:
    return (f["detector"], round(f["start"], 3), round(f["end"], 3), f["dest"], f["session"], f["sub"])


def _findings(out: Path) -> list[dict]:
    return json.loads((out / "findings.json").read_text())


def test_each_detector_fires_with_its_window(pathology_analysis):
    found = _findings(pathology_analysis)
    assert sorted(_key(f) for f in found) == sorted(EXPECTED)


def test_the_analysis_in_process_finds_the_same(pathology_analysis, pathology_inprocess):
    """Every detector fires in this scenario: both engines give the same findings, evidence
    and tables (the in-process engine writes CSV only)."""

    def parsed(out: Path) -> list[dict]:
        return [{**f, "evidence": json.loads(f["evidence"])} for f in _findings(out)]

    assert parsed(pathology_inprocess) == parsed(pathology_analysis)
    for name in ("dest_rates", "usage", "blocked", "journal_files"):
        with (
            open(pathology_analysis / "csv" / f"{name}.csv") as a,
            open(pathology_inprocess / "csv" / f"{name}.csv") as b,
        ):
            spark_rows, ours = list(csv.DictReader(a)), list(csv.DictReader(b))
        key = sorted(spark_rows[0])
        assert sorted(tuple(r[k] for k in key) for r in ours) == sorted(tuple(r[k] for k in key) for r in spark_rows), (
            name
        )


def test_findings_carry_evidence(pathology_analysis):
    by = {f["detector"]: json.loads(f["evidence"]) for f in _findings(pathology_analysis)}
    starved = by["starved_consumer"]
    assert (starved["backlog_min"], starved["mem_pct_min"], starved["hwm"]) == (5, 70, 70)
    assert starved["dest_mem_pct"] == 0  # the seed's tell: the starved queue's own memory is 0%
    assert starved["page_in_blocked"] == 18
    assert starved["memory_holders"] == [{"dest": "/queue/B", "dest_mem_pct": 70}]
    blocked = by["blocked_producer_idle_consumers"]
    assert blocked["usage"] == "temp" and blocked["never_unblocked"] is True
    assert blocked["consumers"] == 2 and blocked["temp_pct_min"] >= 100
    assert by["swap_storm"]["swaps"] == 3 and by["swap_storm"]["messages"] == 303
    assert by["slow_consumer"]["pending_max"] == 70000 and by["slow_consumer"]["recovered"]
    assert by["stalled_socket"]["refused_reconnects"] == 1
    assert by["stalled_socket"]["dispatched"] == 3 and by["stalled_socket"]["acked"] == 1
    journal = by["journal_full_few_live"]
    assert (journal["refused"], journal["live"], journal["pinned"], journal["files"]) == (2, 7, 7, 8)
    held = by["blocked_holding_unacked"]
    assert (held["held_min"], held["held_max"], held["samples"], held["never_unblocked"]) == (50, 50, 3, True)
    kept = by["store_held_by_few_live"]
    assert (kept["files"], kept["live"], kept["pinned"], kept["never_unblocked"]) == (16, 1, 1, True)
    loop = by["redelivery_loop"]
    assert (loop["redeliveries"], loop["total"], loop["first"], loop["last"]) == (30, 30, 82.0, 83.45)


def test_tables_plots_and_report(pathology_analysis):
    out = pathology_analysis
    for plot in ("rates", "backlog", "consumers", "usage", "swaps", "journal"):
        assert (out / f"{plot}.png").stat().st_size > 1000, plot
    report = (out / "report.md").read_text()
    for name, *_ in EXPECTED:
        assert f"### {name}" in report
    assert "![Broker usage" not in report  # titles come from the report's own table
    assert "![Memory, store and temp usage" in report
    with open(out / "csv" / "dest_rates.csv") as f:
        rows = [r for r in csv.DictReader(f) if r["dest"] == "/queue/A"]
    backlog = {int(r["b"]): int(r["backlog"]) for r in rows}
    assert backlog[0] == 5 and backlog[20] == 5 and backlog[36] == 0
    with open(out / "csv" / "blocked.csv") as f:
        (blocked,) = [r for r in csv.DictReader(f) if r["session"] == "pT"]  # the temp store's block
    assert (blocked["session"], float(blocked["start"]), float(blocked["end"]), blocked["open"]) == (
        "pT",
        50.0,
        90.0,
        "true",
    )
    with open(out / "csv" / "journal_files.csv") as f:
        files = {r["file"]: int(r["live"]) for r in csv.DictReader(f) if r["store"] == "/queue/J"}  # the ring
    assert sum(1 for v in files.values() if v) == 7 and len(files) == 8
    assert (out / "parquet" / "consumer_rates").is_dir()


@pytest.mark.parametrize("engine", ["spark", "inprocess"])
def test_healthy_trace_has_no_findings(spark, tmp_path, engine):
    from clients.spark.analyze import main

    trace = healthy().write(tmp_path / "healthy.jsonl")
    args = [*ANALYSIS_ARGS, "--no-plots", "--no-tables", "--engine", engine]  # the findings and report only
    assert main([str(trace), "--out", str(tmp_path / "out"), *args]) == 0
    assert _findings(tmp_path / "out") == []
    assert not (tmp_path / "out" / "csv").exists() and not (tmp_path / "out" / "parquet").exists()
    report = (tmp_path / "out" / "report.md").read_text()
    assert "No detector fired." in report and "None written (--no-tables)." in report


def test_missing_empty_garbage_or_future_traces_are_refused_before_spark_starts(tmp_path, capsys, monkeypatch):
    from clients.spark import session
    from clients.spark.analyze import main

    def no_jvm(*args, **kwargs):
        raise AssertionError("a Spark session was asked for")

    monkeypatch.setattr(session, "get_session", no_jvm)
    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(bytes(range(256)) * 40 + b"\nnot json\n[1, 2]\n")
    assert main([str(garbage), "--out", str(tmp_path / "o"), "--engine", "spark"]) == 2
    assert "no trace events" in capsys.readouterr().err

    assert main([str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o")]) == 2
    assert "no such trace" in capsys.readouterr().err
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main([str(empty), "--out", str(tmp_path / "o")]) == 2
    assert "no trace events" in capsys.readouterr().err
    future = tmp_path / "v2.jsonl"
    future.write_text('{"v":2,"seq":1,"ts":0.0,"event":"expire","broker":"b"}\n')
    assert main([str(future), "--out", str(tmp_path / "o"), "--engine", "spark"]) == 2
    assert "schema version other than 1" in capsys.readouterr().err


def _tables(out: Path) -> dict[str, list[tuple]]:
    """Every CSV table of an analysis, rows sorted."""
    tables = {}
    for path in sorted((out / "csv").glob("*.csv")):
        with open(path) as f:
            rows = list(csv.reader(f))
        tables[path.stem] = [tuple(rows[0]), *sorted(tuple(r) for r in rows[1:])]
    return tables


@pytest.mark.parametrize("engine", ["spark", "inprocess"])
def test_the_parquet_form_of_a_trace_gives_the_same_tables_and_findings(
    engine, pathology_analysis, pathology_inprocess, pathology_analysis_parquet, pathology_inprocess_parquet
):
    """The same traces read from their Parquet twins: each engine's tables and findings are
    those it makes from the JSON lines, and it says which form it read."""
    from_jsonl = pathology_analysis if engine == "spark" else pathology_inprocess
    from_parquet, printed = pathology_analysis_parquet if engine == "spark" else pathology_inprocess_parquet
    assert _findings(from_parquet) == _findings(from_jsonl)
    assert len(_findings(from_parquet)) == len(EXPECTED)
    assert _tables(from_parquet) == _tables(from_jsonl)
    lines = [line for line in printed.splitlines() if line.startswith("reading ")]
    assert len(lines) == 2 and all(
        "trace-" in line and ".jsonl.parquet: Parquet, " in line and "(the Parquet twin of " in line for line in lines
    ), lines
    info = json.loads((from_parquet / "info.json").read_text())
    assert all(i.endswith(".jsonl.parquet") for i in info["inputs"])


def test_input_format_chooses_the_form_and_a_segments_directory_can_be_named(pathology_twins, tmp_path, capsys):
    from clients.spark.analyze import main
    from minibroker.trace.segments import twin_dir

    args = [*ANALYSIS_ARGS, "--engine", "inprocess", "--no-plots"]
    assert main([*pathology_twins, "--out", str(tmp_path / "j"), "--input-format", "jsonl", *args]) == 0
    out = capsys.readouterr().out
    assert out.count(": JSON lines") == 2 and "Parquet" not in out
    twins = [twin_dir(t) for t in pathology_twins]
    assert main([*twins, "--out", str(tmp_path / "p"), *args]) == 0
    out = capsys.readouterr().out
    assert out.count(": Parquet, ") == 2 and "twin of" not in out
    assert _findings(tmp_path / "p") == _findings(tmp_path / "j")
    lone = tmp_path / "lone.jsonl"
    lone.write_text(Path(pathology_twins[0]).read_text())
    assert main([str(lone), "--out", str(tmp_path / "x"), "--input-format", "parquet", *args]) == 2
    assert "no Parquet segments there, nor in" in capsys.readouterr().err


def test_the_footers_of_local_segments_tell_what_a_scan_would(spark, pathology_twins):
    """Lines, corrupt lines and the time span, from the segments' footers: what ``check_trace``
    finds by scanning them (a minimum of 0.0 is stored as -0.0, and read back as 0.0)."""
    from clients.spark.schema import check_trace, footer_check, read_inputs
    from minibroker.trace.segments import twin_dir

    twins = [twin_dir(t) for t in pathology_twins]
    told = footer_check(twins)
    assert told == check_trace(read_inputs(spark, twins).cache())
    assert told["t0"] == 0.0 and str(told["t0"]) == "0.0" and told["lines"] > 0
    assert footer_check(pathology_twins) is None  # JSON lines: only a scan can tell
