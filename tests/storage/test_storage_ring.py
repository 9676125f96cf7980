"""The ring layout: Qpid legacystore's file reuse and enqueue threshold."""

from __future__ import annotations

from pathlib import Path

import pytest
from storage_helpers import (
    ORDINARY,
    fill_file_with_traffic,
    payloads,
    pin_six_files_then_fill_the_seventh,
    reopened,
    small_config,
)

from storage.errors import EnqueueThresholdExceeded, JournalFull, StorageError
from storage.journal import Journal
from storage.model import JournalConfig
from storage.ring import RingLayout


def test_seed_004_few_pinned_messages_refuse_enqueues(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "Durable", "ring", name="Durable", file_size=64 * 1024)
    j = Journal.open(cfg)
    with pytest.raises(EnqueueThresholdExceeded) as refused:
        pin_six_files_then_fill_the_seventh(j)
    assert str(refused.value) == 'Enqueue capacity threshold exceeded on queue "Durable".'
    # Only 7 messages (1400 bytes of payload) are live in a 512 KiB journal ...
    assert j.live_count == 7
    files = j.files()
    assert [f.live for f in files] == [1, 1, 1, 1, 1, 1, 1, 0]
    assert [len(f.pins) for f in files] == [1, 1, 1, 1, 1, 1, 1, 0]
    # ... and the refusal comes at ~80% of the ring written (6 files + 0.4 of the 7th).
    written = 6 * cfg.file_size + files[6].used
    assert 0.79 < written / (cfg.file_count * cfg.file_size) < 0.81
    assert files[6].current and files[7].first_seq is None  # the 8th file was never used
    assert refused.value.file_id == 6


def test_the_journal_tells_its_refusal_until_an_enqueue_is_written(tmp_path: Path) -> None:
    j = Journal.open(small_config(tmp_path / "q", "ring", file_size=64 * 1024))
    assert j.refusal is None
    with pytest.raises(EnqueueThresholdExceeded) as refused:
        pin_six_files_then_fill_the_seventh(j)
    assert j.refusal is refused.value
    assert j.file_counts() == (8, sum(1 for f in j.files() if f.live)) == (8, 7)
    for rec in list(j.recovered(payloads=False)):
        j.dequeue(rec.seq)
    assert j.refusal is refused.value  # nothing tried since: still the last word
    j.enqueue(b"Durable", ORDINARY)
    assert j.refusal is None


def test_seed_004_at_the_default_sizes(tmp_path: Path) -> None:
    """The same story with Qpid's defaults (8 x 1.5 MiB): ~20k messages go through."""
    j = Journal.open(JournalConfig(directory=tmp_path / "Durable", layout="ring"))
    with pytest.raises(EnqueueThresholdExceeded):
        pin_six_files_then_fill_the_seventh(j)
    assert j.live_count == 7
    assert j.last_seq > 2 * 20_000  # tens of thousands of records went by first


def test_the_refusal_survives_a_restart_and_consuming_the_pins_cures_it(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "q", "ring", file_size=64 * 1024)
    j = Journal.open(cfg)
    with pytest.raises(EnqueueThresholdExceeded):
        pin_six_files_then_fill_the_seventh(j)
    j.close()
    j = Journal.open(cfg)
    with pytest.raises(EnqueueThresholdExceeded):
        j.enqueue(b"Durable", ORDINARY)
    for rec in list(j.recovered(payloads=False)):
        j.dequeue(rec.seq)
    j.enqueue(b"Durable", ORDINARY)


def test_dequeues_and_markers_use_the_reserve_until_the_journal_is_full(tmp_path: Path) -> None:
    j = Journal.open(small_config(tmp_path / "q", "ring", file_size=16 * 1024))
    with pytest.raises(EnqueueThresholdExceeded):
        pin_six_files_then_fill_the_seventh(j)
    pin = next(j.recovered(payloads=False)).seq
    markers = 0
    with pytest.raises(JournalFull) as full:
        while True:
            j.mark_delivered(pin)
            markers += 1
    assert markers > 100  # the reserve held all of these
    assert full.value.file_id == 0 and full.value.live == 1
    assert "Journal full" in str(full.value)
    # With the reserve gone, even the dequeue that would free file 0 has nowhere
    # to go: the ring is stuck, and nothing changed in memory.
    before = j.last_seq
    with pytest.raises(JournalFull):
        j.dequeue(pin)
    assert j.last_seq == before and j.live_count == 7


def test_the_writer_reuses_files_round_the_ring(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "q", "ring")
    j = Journal.open(cfg)
    seen = []
    for _ in range(2 * cfg.file_count + 1):
        fill_file_with_traffic(j, pin=False)
        seen.append(j.current_file_id)
    assert seen[: cfg.file_count + 1] == [1, 2, 3, 4, 5, 6, 7, 0, 1]
    kept = [j.enqueue(b"q", ORDINARY).seq for _ in range(3)]
    current, last = j.current_file_id, j.last_seq
    j.close()
    # The last-written file is found by header seq, not by name order.
    again = Journal.open(cfg)
    assert again.current_file_id == current
    assert [r.seq for r in again.recovered()] == kept
    assert again.enqueue(b"q", ORDINARY).seq == last + 1


def test_a_reused_file_is_zeroed_first(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "q", "ring", file_count=4)
    j = Journal.open(cfg)
    for _ in range(4):
        fill_file_with_traffic(j, pin=False)
    assert j.current_file_id == 0
    j.flush()
    data = (cfg.path / "JournalData.0000.jdat").read_bytes()
    used = j.files()[0].used
    assert data[used:] == bytes(len(data) - used)


@pytest.mark.parametrize(
    ("file_id", "offset", "length", "live", "refused"),
    [
        (0, 100, 100, [0, 0, 0, 0, 0, 0, 0, 0], False),
        # reserve = 20% of 8 x 1000 = 1600: reaches files 1 and 2 (not 3)
        (0, 300, 100, [0, 0, 1, 0, 0, 0, 0, 0], False),
        (0, 301, 100, [0, 0, 0, 1, 0, 0, 0, 0], False),
        (0, 500, 100, [0, 0, 1, 0, 0, 0, 0, 0], True),
        (0, 100, 100, [0, 1, 0, 0, 0, 0, 0, 0], True),
        # the current file's own count never matters
        (3, 900, 50, [0, 0, 0, 7, 0, 0, 0, 0], False),
        # wraps: files 7 and 0 are reached from file 6
        (6, 900, 50, [1, 0, 0, 0, 0, 0, 0, 0], True),
        (6, 200, 50, [1, 0, 0, 0, 0, 0, 0, 0], False),
        # a look-ahead of the whole ring comes back to the current file
        (2, 0, 6500, [0, 0, 0, 0, 0, 0, 0, 0], True),
    ],
)
def test_enqueue_threshold_look_ahead(
    tmp_path: Path, file_id: int, offset: int, length: int, live: list[int], refused: bool
) -> None:
    ring = RingLayout(small_config(tmp_path, "ring", file_size=1000))
    assert ring.reserve == 1600
    if refused:
        with pytest.raises(EnqueueThresholdExceeded):
            ring.check_enqueue(file_id, offset, length, live.__getitem__)
    else:
        ring.check_enqueue(file_id, offset, length, live.__getitem__)


def test_the_reserve_is_at_least_one_file(tmp_path: Path) -> None:
    ring = RingLayout(small_config(tmp_path, "ring", file_count=4, file_size=1000))
    assert ring.reserve == 1000  # 20% of 4000 is 800, less than a file


def test_a_ring_with_a_different_file_count_is_refused(tmp_path: Path) -> None:
    Journal.open(small_config(tmp_path / "q", "ring")).close()
    with pytest.raises(StorageError, match="config says 4 files"):
        Journal.open(small_config(tmp_path / "q", "ring", file_count=4))
    with pytest.raises(StorageError, match="config says 8192"):
        Journal.open(small_config(tmp_path / "q", "ring", file_size=8192))


def test_a_refused_enqueue_leaves_no_trace(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "q", "ring", file_size=16 * 1024)
    j = Journal.open(cfg)
    with pytest.raises(EnqueueThresholdExceeded):
        pin_six_files_then_fill_the_seventh(j)
    before, live = j.last_seq, payloads(j)
    with pytest.raises(EnqueueThresholdExceeded):
        j.enqueue(b"Durable", ORDINARY, txid="t")
    assert (j.last_seq, j.open_txids) == (before, ())
    j.close()
    assert [r.payload for r in reopened(cfg)] == live


def test_a_full_ring_still_opens_and_owes_the_abort_of_an_unfinished_transaction(
    tmp_path: Path,
) -> None:
    cfg = small_config(tmp_path / "q", "ring", file_size=16 * 1024)
    j = Journal.open(cfg)
    with pytest.raises(EnqueueThresholdExceeded):
        pin_six_files_then_fill_the_seventh(j)
    pin = next(j.recovered(payloads=False)).seq
    j.dequeue(pin, txid="tx")  # never finished
    with pytest.raises(JournalFull):
        while True:
            j.mark_delivered(pin)
    j.close()
    j = Journal.open(cfg)  # no room for the TX_ABORT: open still succeeds
    assert j.recovery.aborted_txids == (b"tx",) and j.open_txids == ()
    with pytest.raises(JournalFull):  # "tx" cannot be reused until its abort is written
        j.dequeue(pin, txid="tx")
    assert j.open_txids == () and j.live_count == 7
