"""Compaction: stranded messages rewritten together in one transaction (the cure for
Qpid's enqueue threshold)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from storage_helpers import (
    ORDINARY,
    payloads,
    pin_six_files_then_fill_the_seventh,
    record_offsets,
    reopened,
    small_config,
)

from storage.compact import compact
from storage.errors import EnqueueThresholdExceeded, StorageError
from storage.journal import Journal
from storage.model import JournalConfig


def seed_state(config: JournalConfig) -> Journal:
    """Messages stranded one per file: the threshold's ring, or its growing equivalent."""
    j = Journal.open(config)
    if config.layout == "ring":
        with pytest.raises(EnqueueThresholdExceeded):
            pin_six_files_then_fill_the_seventh(j)
        return j
    for n in range(4):
        j.enqueue(b"q", f"stranded {n}".encode())
        start = j.current_file_id
        while j.current_file_id == start:
            j.dequeue(j.enqueue(b"filler", ORDINARY).seq)
    j.enqueue(b"q", b"in the current file")
    return j


def sized(directory: Path, layout: str) -> JournalConfig:
    return small_config(directory, layout, file_size=16 * 1024, max_file_length=16 * 1024)


@pytest.fixture
def stranded(tmp_path: Path, layout: str) -> Journal:
    return seed_state(sized(tmp_path / "q", layout))


def test_compaction_cures_the_seed_state(tmp_path: Path) -> None:
    j = seed_state(small_config(tmp_path / "Durable", "ring", file_size=16 * 1024))
    before = list(j.recovered())
    mapping = compact(j)
    assert sorted(mapping) == [r.seq for r in before]
    after = list(j.recovered())
    assert [r.seq for r in after] == [mapping[r.seq] for r in before]
    assert [r.payload for r in after] == [r.payload for r in before]
    assert [f.live for f in j.files()] == [0, 0, 0, 0, 0, 0, 7, 0]
    j.enqueue(b"Durable", ORDINARY)  # accepted again
    j.close()
    assert [r.payload for r in reopened(j.config)][:7] == [r.payload for r in before]


def test_growing_compaction_frees_the_old_files(tmp_path: Path) -> None:
    j = seed_state(sized(tmp_path / "q", "growing"))
    assert len(j.files()) == 5
    before = payloads(j)
    compact(j)
    assert [f.file_id for f in j.files()] == [j.current_file_id]
    assert j.durable_seq == j.last_seq  # the commit was made durable before the deletion
    assert payloads(j) == before


def test_delivered_flags_move_with_the_messages(stranded: Journal) -> None:
    first, second = list(stranded.recovered(payloads=False))[:2]
    stranded.mark_delivered(second.seq)
    mapping = compact(stranded)
    flags = {r.seq: r.delivered for r in reopened_after_close(stranded)}
    assert (flags[mapping[first.seq]], flags[mapping[second.seq]]) == (False, True)


def reopened_after_close(j: Journal) -> list:  # type: ignore[type-arg]
    j.close()
    return reopened(j.config)


def test_nothing_to_compact_writes_nothing(tmp_path: Path, layout: str) -> None:
    j = Journal.open(small_config(tmp_path / "q", layout))
    j.enqueue(b"q", b"only in the current file")
    before = j.last_seq
    assert compact(j) == {}
    assert j.last_seq == before


def test_without_preserve_order_only_stranded_messages_move(stranded: Journal) -> None:
    current = stranded.current_file_id
    recent = [r for r in stranded.recovered() if r.location.file_id == current]
    mapping = compact(stranded, preserve_order=False)
    assert len(recent) == 1 and recent[0].seq not in mapping
    assert len(mapping) == stranded.live_count - 1
    assert payloads(stranded)[0] == recent[0].payload  # it now comes first


def test_compaction_refuses_up_front_when_the_copies_cannot_fit(tmp_path: Path) -> None:
    j = Journal.open(small_config(tmp_path / "q", "ring", file_count=4))
    with pytest.raises(EnqueueThresholdExceeded):
        while True:
            j.enqueue(b"q", ORDINARY)  # nothing consumed: three files of live messages
    before = j.last_seq
    with pytest.raises(StorageError, match="compaction needs"):
        compact(j)
    assert (j.last_seq, j.open_txids) == (before, ())


def crash_points(path: Path, after_seq: int) -> list[int]:
    """Every record boundary (and the middle of every record) written after ``after_seq``."""
    points = []
    for off, end, seq in record_offsets(path):
        if seq > after_seq:
            points += [off, (off + end) // 2]
    return [*points, end]


def test_a_crash_at_any_point_neither_loses_nor_duplicates(stranded: Journal, tmp_path: Path) -> None:
    """Replay the compaction's writes cut at every point over the files as they were.

    Files are deleted (growing) or reused (ring) only after the commit is
    durable, so a crash before that finds every old file still in place.
    """
    config = stranded.config
    expected = payloads(stranded)
    start, current = stranded.last_seq, stranded.current_file_id
    stranded.flush()
    before = tmp_path / "before"
    shutil.copytree(config.path, before)
    compact(stranded)
    assert stranded.current_file_id == current, "compaction stayed in one file"
    name = next(f.name for f in stranded.files() if f.current)
    stranded.close()
    written = (config.path / name).read_bytes()
    points = crash_points(config.path / name, start)
    assert len(points) > 10
    outcomes = set()
    for n, cut in enumerate(points):
        crashed = tmp_path / f"crash-{n}"
        shutil.copytree(before, crashed)
        (crashed / name).write_bytes(written[:cut] + bytes(len(written) - cut))
        with Journal.open(sized(crashed, config.layout)) as j:
            assert payloads(j) == expected
            outcomes.add(min(r.seq for r in j.recovered()) > start)
    assert outcomes == {False, True}  # both sides of the commit were seen
    assert [r.payload for r in reopened(config)] == expected  # and after the clean-up
