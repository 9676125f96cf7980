"""One SparkSession for the whole Spark suite: local[1] with the fast test settings."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from clients.spark.session import TEST_CONF, get_session

    session = get_session("minibroker-tests", master="local[1]", conf=TEST_CONF)
    yield session
    session.stop()


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
