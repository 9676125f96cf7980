"""The journal contract run against each layout."""

from __future__ import annotations

import pytest
from storage_contract import JournalContract


class TestRingJournal(JournalContract):
    @pytest.fixture
    def layout(self) -> str:
        return "ring"


class TestGrowingJournal(JournalContract):
    @pytest.fixture
    def layout(self) -> str:
        return "growing"
