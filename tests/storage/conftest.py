"""Fixtures for the storage tests: small journals of either layout."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from storage_helpers import small_config

from storage import recovery
from storage.journal import Journal
from storage.model import JournalConfig


@pytest.fixture(autouse=True)
def _close_journals(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every journal a test opens is closed at teardown (closing twice is harmless)."""
    opened: list[Journal] = []
    real_open = Journal.open.__func__  # type: ignore[attr-defined]

    def tracking_open(cls: type[Journal], config: JournalConfig, **options: object) -> Journal:
        journal = real_open(cls, config, **options)
        opened.append(journal)
        return journal

    monkeypatch.setattr(Journal, "open", classmethod(tracking_open))
    yield
    for journal in opened:
        journal.close()


@pytest.fixture(autouse=True, params=["whole", "windows"])
def _recovery_window(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every storage test twice: recovery reading a file in 1 MB windows (the files
    here are smaller: one window each), and in windows of 37 bytes, which every
    record but the smallest crosses: replay, torn tails and damage must come out
    the same."""
    if request.param == "windows":
        monkeypatch.setattr(recovery, "_WINDOW", 37)


@pytest.fixture(params=["ring", "growing"])
def layout(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def config(tmp_path: Path, layout: str) -> JournalConfig:
    return small_config(tmp_path / "journal", layout)


@pytest.fixture
def open_journal(config: JournalConfig) -> Callable[[], Journal]:
    """Open the fixture's journal (again)."""
    return lambda: Journal.open(config)
