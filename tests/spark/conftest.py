"""The Spark suite's traces and analyses, made once (on the session's ``spark``,
tests/conftest.py: one SparkSession, on one worker, for the whole run)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def pathology_traces(tmp_path_factory):
    """The pathologies scenario as two trace files (split at t = 39, as after a restart)."""
    from minibroker.trace import dumps_events

    from .scenarios import pathologies

    events = pathologies().trace.events()
    d = tmp_path_factory.mktemp("traces")
    first, second = d / "trace-1.jsonl", d / "trace-2.jsonl"
    first.write_text(dumps_events([e for e in events if e["ts"] < 39], broker="b1"))
    second.write_text(dumps_events([e for e in events if e["ts"] >= 39], broker="b1"))
    return [str(first), str(second)]


ANALYSIS_ARGS = ["--min-window", "3"]


@pytest.fixture(scope="session")
def pathology_analysis(spark, pathology_traces, tmp_path_factory):
    """The analysis of the pathologies traces, in local mode (run once per session)."""
    from clients.spark.analyze import main

    out = tmp_path_factory.mktemp("analysis")
    assert main([*pathology_traces, "--out", str(out), *ANALYSIS_ARGS, "--engine", "spark"]) == 0
    return out


@pytest.fixture(scope="session")
def pathology_inprocess(pathology_traces, tmp_path_factory):
    """The same analysis in this process (no JVM)."""
    from clients.spark.analyze import main

    out = tmp_path_factory.mktemp("analysis-inprocess")
    assert main([*pathology_traces, "--out", str(out), *ANALYSIS_ARGS, "--engine", "inprocess"]) == 0
    return out


@pytest.fixture(scope="session")
def pathology_twins(pathology_traces, tmp_path_factory):
    """The pathologies traces again, each with its Parquet twin beside it (FILE.parquet/)."""
    import shutil

    from minibroker.trace.parquet import convert_file
    from minibroker.trace.segments import twin_dir

    d = tmp_path_factory.mktemp("twins")
    copies = []
    for trace in pathology_traces:
        copy = d / trace.rsplit("/", 1)[-1]
        shutil.copy(trace, copy)
        convert_file(copy, twin_dir(copy), segment_events=100, group_lines=40)  # several segments each
        copies.append(str(copy))
    return copies


def _analysed(traces, tmp_path_factory, name, *args):
    """``main`` over ``traces``: (its output directory, what it printed)."""
    import contextlib
    import io

    from clients.spark.analyze import main

    out = tmp_path_factory.mktemp(name)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert main([*traces, "--out", str(out), *ANALYSIS_ARGS, *args]) == 0
    return out, printed.getvalue()


@pytest.fixture(scope="session")
def pathology_analysis_parquet(spark, pathology_twins, tmp_path_factory):
    """The analysis on Spark of the pathologies traces read from their Parquet twins (its
    tables and findings are compared; the plots are ``pathology_analysis``'s business)."""
    return _analysed(pathology_twins, tmp_path_factory, "analysis-parquet", "--engine", "spark", "--no-plots")


@pytest.fixture(scope="session")
def pathology_inprocess_parquet(pathology_twins, tmp_path_factory):
    """The same in this process."""
    return _analysed(
        pathology_twins, tmp_path_factory, "analysis-inprocess-parquet", "--engine", "inprocess", "--no-plots"
    )
