"""Fixtures for the replay tests: hand-written action tables.

The real broker comes from ``tests/conftest.py`` (``broker``: the asyncio
server in a background thread, on an ephemeral port) and so does ``spark`` (the
run's one SparkSession).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from replay_tables import Row, write_table


@pytest.fixture
def table(tmp_path: Path) -> Callable[..., Path]:
    """``table(rows, name="actions.jsonl")`` writes a table under tmp_path."""

    def make(rows: list[Row], name: str = "actions.jsonl") -> Path:
        return write_table(tmp_path / name, rows)

    return make
