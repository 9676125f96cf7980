"""Fixtures for the replay tests: hand-written action tables, a SparkSession.

The real broker comes from ``tests/conftest.py`` (``broker``: the asyncio
server in a background thread, on an ephemeral port).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest
from replay_tables import Row, write_table


@pytest.fixture
def table(tmp_path: Path) -> Callable[..., Path]:
    """``table(rows, name="actions.jsonl")`` writes a table under tmp_path."""

    def make(rows: list[Row], name: str = "actions.jsonl") -> Path:
        return write_table(tmp_path / name, rows)

    return make


@pytest.fixture(scope="session")
def spark():
    """One local[1] SparkSession with the fast test settings (as tests/spark does);
    the jobs' ``get_session`` finds it active and uses it."""
    from pyspark.sql import SparkSession

    from clients.spark.session import TEST_CONF, get_session

    existing = SparkSession.getActiveSession()
    session = get_session("minibroker-tests", master="local[1]", conf=TEST_CONF)
    yield session
    if existing is None:
        session.stop()
