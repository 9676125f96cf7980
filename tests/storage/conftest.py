"""Fixtures for the storage tests: small journals of either layout."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from storage.journal import Journal
from storage.model import JournalConfig
from storage_helpers import small_config


@pytest.fixture(params=["ring", "growing"])
def layout(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def config(tmp_path: Path, layout: str) -> JournalConfig:
    return small_config(tmp_path / "journal", layout)


@pytest.fixture
def open_journal(config: JournalConfig) -> Callable[[], Journal]:
    """Open the fixture's journal; every journal opened is closed at teardown."""
    opened: list[Journal] = []

    def _open() -> Journal:
        journal = Journal.open(config)
        opened.append(journal)
        return journal

    yield _open  # type: ignore[misc]
    for journal in opened:
        journal.close()
