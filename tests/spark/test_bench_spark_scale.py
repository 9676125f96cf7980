"""bench/spark_scale.py at a small size: it runs its jobs and reports their ratios.

No speed is asserted: the figures are the benchmark's business (docs/benchmarks.md).
Its two JVMs (the analysis, the Spark workload) start with the test JVM's options
(``QUICK_JVM``, ``QUICK_PLANS``: a few hundred events, where compiling Spark's code
and each query's is most of the cost), through a Spark configuration directory of
the test's own.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from clients.spark.workload_spec import load_workload
from clients.spark.workload_table import summarize

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "examples" / "workloads" / "tiny.toml"
EVENTS = 500


def _quick_spark_conf(conf_dir: Path) -> Path:
    """A Spark configuration directory: the project's logging, and the test JVM's options as
    defaults (a job's own settings still win)."""
    from clients.spark.session import CONF_DIR, QUICK_JVM, QUICK_PLANS

    conf_dir.mkdir()
    shutil.copy(CONF_DIR / "log4j2.properties", conf_dir)
    defaults = {**QUICK_JVM, **QUICK_PLANS}
    (conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in defaults.items()))
    return conf_dir


def test_spark_scale_times_parse_analyze_and_workload_and_prints_the_ratios(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    # In a process group of its own: a run past the deadline is stopped whole, its jobs'
    # JVMs included (a plain timeout would kill the script and orphan them).
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "bench" / "spark_scale.py"),
            "--events",
            str(EVENTS),
            "--workload",
            str(TINY),
            "--scale",
            "1",
            "--dir",
            str(tmp_path / "work"),
            "--json",
            str(report),
            # the bench's mechanics are checked here, the plots and tables elsewhere
            "--analyze-arg=--no-plots",
            "--analyze-arg=--no-tables",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        start_new_session=True,
        env={**os.environ, "SPARK_CONF_DIR": str(_quick_spark_conf(tmp_path / "spark-conf"))},
    )
    try:
        stdout, stderr = proc.communicate(timeout=540)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    p = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    r = json.loads(report.read_text())
    # the synthetic trace's four events per message, plus its few control lines
    assert EVENTS <= r["events"] < EVENTS + 100
    assert r["actions"] == summarize(load_workload(TINY))["rows"]
    assert set(r["jobs"]) == {"parse", "analyze", "workload", "workload-spark"}
    for job in r["jobs"].values():
        assert job["seconds"] > 0 and job["cpu"] > 0 and len(job["reps"]) == 1
    parse = r["jobs"]["parse"]["seconds"]
    assert r["ratios"]["analyze"] == pytest.approx(r["jobs"]["analyze"]["seconds"] / parse)
    assert r["ratios"]["workload"] == pytest.approx(r["jobs"]["workload"]["seconds"] / parse)
    assert r["ratios"]["workload-spark"] == pytest.approx(r["jobs"]["workload-spark"]["seconds"] / parse)
    assert r["goals"] == {"analyze": 1.0, "workload": 0.5}
    # the printed table carries the same ratios, and what each job read: the parse the JSON
    # lines, the analysis their Parquet twin
    cells = ([x.strip() for x in line.strip().strip("|").split("|")] for line in p.stdout.splitlines())
    rows = {c[0]: c for c in cells if len(c) == 6}
    assert rows["analyze"][2].startswith(f"{r['jobs']['analyze']['seconds']:.1f} [")
    assert rows["workload"][4].strip() == f"**{r['ratios']['workload']:.2f}**"
    assert rows["parse"][1].startswith("JSON lines, ") and r["jobs"]["parse"]["input"] == rows["parse"][1]
    assert rows["analyze"][1].startswith("Parquet, 1 segment(s), ")
    # the workload as a user runs it (in process), and the Spark job beside it
    assert rows["workload"][1] == "workload file (engine auto: inprocess)"
    assert rows["workload-spark"][1] == "workload file (engine spark)" and rows["workload-spark"][5] == ""
    assert r["bench"] == "spark_scale" and f"--events {EVENTS}" in r["command"]
    assert "load average" in p.stdout and "goals met:" in p.stdout
    # the working directory keeps the trace in both forms, not the jobs' outputs
    assert sorted(x.name for x in (tmp_path / "work").iterdir()) == ["trace.jsonl", "trace.jsonl.parquet"]
