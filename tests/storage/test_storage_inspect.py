"""Inspection: per-file pins and totals, from an open journal or a directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_helpers import pin_six_files_then_fill_the_seventh, small_config

from storage.errors import EnqueueThresholdExceeded
from storage.journal import Journal
from storage.report import format_report, inspect


@pytest.fixture
def seed_journal(tmp_path: Path) -> Journal:
    """A ring past Qpid's enqueue threshold: seven pinned messages, enqueues refused."""
    j = Journal.open(small_config(tmp_path / "Durable", "ring", name="Durable", file_size=16 * 1024))
    with pytest.raises(EnqueueThresholdExceeded):
        pin_six_files_then_fill_the_seventh(j)
    return j


def test_report_of_the_seed_state_names_one_pin_per_file(seed_journal: Journal) -> None:
    report = inspect(seed_journal)
    pins = [[(p.seq, p.key) for p in f.pins] for f in report.files]
    live = [r.seq for r in seed_journal.recovered(payloads=False)]
    assert pins == [[(seq, b"Durable")] for seq in live] + [[]]
    assert (report.live, report.pinned_files, report.layout) == (7, 7, "ring")
    assert report.records == sum(f.records for f in seed_journal.files())
    assert report.disk_usage == seed_journal.disk_usage() == 8 * 16 * 1024
    assert [f.current for f in report.files].index(True) == 6


def test_formatted_report_reads_like_store_chk(seed_journal: Journal) -> None:
    text = format_report(inspect(seed_journal))
    lines = text.splitlines()
    first_pin = next(seed_journal.recovered(payloads=False)).seq
    assert lines[0].startswith("Journal 'Durable' in ")
    assert f'live=1 pinned by: {first_pin} "Durable"' in lines[1]
    assert lines[7].startswith("  * JournalData.0006.jdat: first_seq=")
    assert lines[8] == "    JournalData.0007.jdat: <empty>"
    assert lines[9].startswith("Totals: 8 files, ") and lines[9].endswith(
        f"records, 7 live enqueues, {8 * 16 * 1024} bytes"
    )
    assert lines[10].startswith("WARNING: 7 live enqueue(s) pin 7 files")


def test_a_directory_reads_the_same_as_the_open_journal(seed_journal: Journal) -> None:
    online = inspect(seed_journal)
    seed_journal.close()
    offline = inspect(seed_journal.config.path)
    assert offline == online
    assert offline.torn is None


def test_growing_files_name_the_messages_that_pin_them_through_acks(tmp_path: Path) -> None:
    j = Journal.open(small_config(tmp_path / "q", "growing"))
    pin = j.enqueue(b"q", b"p" * 100)
    neighbours = [j.enqueue(b"q", b"n" * 100) for _ in range(10)]
    while j.current_file_id == 1:
        j.dequeue(j.enqueue(b"filler", b"f" * 100).seq)
    for loc in neighbours:
        j.dequeue(loc.seq)
    while j.current_file_id == 2:
        j.dequeue(j.enqueue(b"filler", b"f" * 100).seq)
    report = inspect(j)
    acks = next(f for f in report.files if f.file_id == 2)
    assert (acks.live, [p.seq for p in acks.pins]) == (0, [pin.seq])
    assert f'pinned by: {pin.seq} "q" (file 1)' in format_report(report)


def test_open_transactions_and_long_pin_lists_are_shown(tmp_path: Path) -> None:
    j = Journal.open(small_config(tmp_path / "q", "growing", max_file_length=64 * 1024))
    for _ in range(8):
        j.enqueue(b"q", b"x")
    j.enqueue(b"q", b"y", txid="tx-7")
    text = format_report(inspect(j))
    assert "... and 4 more" in text
    assert "open tx: tx-7" in text and "Open transactions: tx-7" in text
