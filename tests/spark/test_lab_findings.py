"""Every lab run's trace analysis agrees with its verdict, and the Spark job with the analysis in process.

Each lab is run once with ``--plot`` (the analysis in process; ``lab_support``: the
plots of each run drawn only for the lab whose plots a test reads); a run of each
detector the labs show, and a healthy cure, are run again on the Spark worker and
their traces analysed on Spark (one session for all), where both engines must give
the same findings (same detectors, windows, summaries, evidence). For every run:

- the detectors found are exactly those ``lab.toml`` names for the run: the
  pathology's for a pathology run, none for a healthy one (or the cost of its
  cure, where the lab names one);
- the numbers in the findings are the lab's own (messages received, backlog,
  refused reconnects, live messages, the abort's time...).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from clients.labs import run_lab
from clients.spark import inprocess
from clients.spark.findings import Params
from lab_support import DRAWN, LABS

# Running every lab with its analysis takes a minute of CPU; on a machine shared
# with others it can take several of wall time, more than the suite's default limit.
pytestmark = pytest.mark.timeout(1800)

RUNS = [(lab, spec) for lab in LABS for spec in lab.runs]


def _parsed(findings: list[dict]) -> list[dict]:
    return [{**f, "evidence": json.loads(f["evidence"])} for f in findings]


def _one(findings: list[dict], detector: str, **where: str) -> dict:
    mine = [f for f in _parsed(findings) if f["detector"] == detector and all(f[k] == v for k, v in where.items())]
    assert len(mine) == 1, (detector, where, findings)
    return mine[0]["evidence"]


def _trace(result: Any) -> list[dict]:
    return [json.loads(line) for line in result.trace_file.read_text().splitlines()]


def check_numbers(number: str, name: str, result: Any) -> None:
    """The findings' numbers against the lab's own (its metrics, its trace)."""
    m, found = result.outcome.metrics, result.findings
    if number == "00" and name.startswith("restart") and result.spec.findings:
        ev = _one(found, "starved_consumer", dest="/queue/A")
        # 50 messages recovered after the restart: a backlog of 50, not 100
        assert (ev["backlog_min"], ev["backlog_max"]) == (m["a_store_only"], m["a_store_only"]) == (50, 50)
        assert ev["received"] == m["received"]
        # ... and A's own memory is what it holds after the restart, as the verdict says (0% of
        # its limit: every message store-only), not the 1% it held before the restart
        assert ev["dest_mem_pct"] == 0
        assert "A: memory 0% of its limit" in "\n".join(result.outcome.evidence)
    if number == "00" and name == "slow-legacy":
        ev = _one(found, "starved_consumer", dest="/queue/F")
        assert ev["received"] == m["received_f"]
        assert ev["backlog_max"] == m["sent_f"] - m["received_f"]
    if number == "01" and name == "deadlock":
        ev = _one(found, "blocked_producer_idle_consumers")
        assert round(ev["blocked_end"] - ev["blocked_start"], 1) == m["blocked_for"]
        assert ev["never_unblocked"] is True
    if number == "02" and name == "block":
        ev = _one(found, "slow_consumer", sub="slow")
        assert ev["backlog"] == m["backlog"]  # the slow subscription's backlog at the end
        assert ev["spooled"] == 0 and ev["blocked_seconds"] > 0
    if number == "02" and name.startswith("abort"):
        # the abort ends the slow episode: not "slow for 29 s (to the end)"
        tb = inprocess.build_tables(*_tables_input(result), Params().bucket)
        aborted = [e["ts"] for e in _trace(result) if e["event"] == "unsubscribe" and e.get("reason") == "abort"]
        (episode,) = inprocess.slow_episodes(tb)
        assert aborted and episode["end"] == pytest.approx(aborted[0] - tb.t0)
    if number == "03" and name == "default-prefetch":
        ev = _one(found, "stalled_socket")
        assert ev["refused_reconnects"] == m["connects_refused"]
        assert ev["dispatched"] == m["in_flight"]
    if number == "04" and result.spec.expect == "pathology":
        ev = _one(found, "journal_full_few_live")
        assert ev["live_at_end"] == m["live"] and ev["refused"] == m["journal_full_events"]
    if number == "04" and name in ("growing", "compacted"):
        # the journal's picture is its state at the end: after the drain, nothing is live
        tb = inprocess.build_tables(*_tables_input(result), Params().bucket)
        assert sum(f["live"] for f in tb.journal_files) == 0
        if name == "growing":
            assert len(tb.journal_files) == m["files_after"]


def _tables_input(result: Any) -> tuple[list[dict], float, float]:
    events, info = inprocess.read_events([str(result.trace_file)])
    return events, info["t0"], info["t1"]


IDS = [f"{lab.number}-{spec.name}" for lab, spec in RUNS]


@pytest.mark.parametrize("lab, spec", RUNS, ids=IDS)
def test_the_findings_are_what_the_lab_expects_with_its_numbers(lab_results, lab, spec):
    result = lab_results[(lab.number, spec.name)]
    assert {f["detector"] for f in result.findings} == set(spec.findings), [f["summary"] for f in result.findings]
    check_numbers(lab.number, spec.name, result)
    # the series kept for the lab's figure; the run's plots drawn only where asked for
    assert result.series and result.series["names"]
    assert bool(list(result.trace_file.parent.glob("*.png"))) == (lab.number in DRAWN)
    names = {e["session"]: e.get("client_id") or e["addr"] for e in _trace(result) if e["event"] == "connect"}
    for f in result.findings:  # a finding names its client as the lab does, not by its broker session
        if f["session"]:
            assert f["session"] not in f["summary"] and names[f["session"]] in f["summary"], f["summary"]


@pytest.mark.parametrize("lab, spec", RUNS, ids=IDS)
def test_the_parquet_form_of_each_runs_trace_reads_and_finds_the_same(lab_results, tmp_path, lab, spec):
    """Every lab run's trace as Parquet segments: the same events, the same findings."""
    from clients.spark.analyze import analyze_inprocess
    from minibroker.trace import FIELDS
    from minibroker.trace.parquet import convert_file

    result = lab_results[(lab.number, spec.name)]
    segments = tmp_path / "trace.jsonl.parquet"
    convert_file(result.trace_file, segments, segment_events=1000)
    events, info = inprocess.read_events([str(segments)])
    want, want_info = inprocess.read_events([str(result.trace_file)])
    assert events == [{k: v for k, v in e.items() if k in FIELDS and v is not None} for e in want]
    assert info == want_info
    found = analyze_inprocess([str(segments)], tmp_path / "out", Params(), plots=False, tables=False)
    assert _parsed(found["findings"]) == _parsed(result.findings)


def _spark_runs(runs: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """The runs the Spark job reads too: for each detector the labs show, the first run that
    promises it (a run that adds none is left out), and the first cure a lab's figure draws
    where nothing may be found. The analysis in process reads every run (above), and a
    Spark analysis costs a JVM's half minute of CPU, so the Spark job reads each kind of
    finding once, and a run with none, rather than every run again."""
    chosen, shown = [], set()
    for lab, spec in runs:
        if set(spec.findings) - shown:
            chosen.append((lab, spec))
            shown |= set(spec.findings)
    cure = next((lab, spec) for lab, spec in runs if lab.figure and spec.name == lab.figure[-1] and not spec.findings)
    return [run for run in runs if run in chosen or run == cure]


SPARK_RUNS = _spark_runs(RUNS)


def test_the_spark_runs_show_every_detector_the_labs_show_and_a_healthy_cure():
    """The selection above leaves no detector of the labs out of the Spark job's parity."""
    assert {d for _, spec in SPARK_RUNS for d in spec.findings} == {d for _, spec in RUNS for d in spec.findings}
    assert any(spec.expect == "healthy" and not spec.findings for _, spec in SPARK_RUNS)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("lab, spec", SPARK_RUNS, ids=[f"{lab.number}-{spec.name}" for lab, spec in SPARK_RUNS])
def test_spark_finds_the_same(spark, tmp_path, lab, spec):
    """The Spark job and the analysis in process: the same findings, on a run of each
    detector the labs show and on a lab's cure. Only that run of the lab is run here (the
    lab's other runs are the in-process tests' business, on their own worker)."""
    from clients.spark.analyze import analyze

    lines: list[str] = []
    (result,) = run_lab(lab, plot_dir=tmp_path / "lab", out=lines.append, specs=[spec], draw=False)
    assert result.as_promised, "\n".join(lines)
    on_spark = analyze(spark, [str(result.trace_file)], tmp_path / "spark", Params(), plots=False, tables=False)
    assert _parsed(on_spark["findings"]) == _parsed(result.findings)


@pytest.mark.parametrize("lab", LABS, ids=[lab.number for lab in LABS])
def test_each_labs_figure_shows_the_pathology_beside_the_cure(lab_results, tmp_path, lab):
    from matplotlib.image import imread

    from clients.labs.figure import lab_figure

    drawn = lab_figure(lab, lab_results[lab.number], tmp_path)
    assert drawn is not None
    pathology, cure = (lab_results[(lab.number, name)] for name in drawn.runs)
    assert (pathology.spec.expect, cure.spec.expect) == ("pathology", "healthy")  # both runs
    height, width, _ = imread(drawn.path).shape
    assert width >= 1600 and height >= 900  # projector-sized
    for name in drawn.runs:  # whoever a finding names is drawn, by the name the lab gives it
        assert set(drawn.starved[name]) <= set(drawn.lines[name]), (name, drawn.starved, drawn.lines)
        assert not any(label.startswith("localhost-") for label in drawn.lines[name])
    assert (
        drawn.starved[pathology.spec.name]
        or not pathology.spec.findings
        or not any(f["sub"] for f in pathology.findings)
    )
    for (x0, _), (y0, _) in drawn.limits:  # every axis from 0
        assert x0 == 0 and y0 == 0
    (top_a, top_b, bottom_a, bottom_b) = drawn.limits  # shared scales, row by row
    assert top_a == top_b and bottom_a == bottom_b


def test_slow_legacy_draws_its_starved_fast_consumer(lab_results):
    """The consumers plot of a run keeps the consumer that received nothing."""
    result = lab_results[("00", "slow-legacy")]
    from clients.spark.plots import consumer_lines

    series = result.series
    lines = {label: ys[-1] for label, _, ys in consumer_lines(series, 1.0, 41.0)}
    assert lines["fast"] == 0 and lines["slow-S.1"] > 0
    assert (result.trace_file.parent / "consumers.png").exists()
