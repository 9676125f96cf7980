"""Recovery outcomes under fault injection, and repair (etcd's ``repair_test.go``).

Each case writes a journal, damages one file, and states the outcome: a clean
open, a torn tail that open cuts by itself, or corruption that stops open until
``repair`` cuts the damaged file. Then the journal must accept a new message
and recover it (write, corrupt, check, repair, reopen, append again).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from storage_helpers import (
    flip,
    payloads,
    record_offsets,
    reopened,
    small_config,
    truncate,
    zero,
)

from storage.bodies import decode_enqueue, encode_enqueue
from storage.errors import CorruptRecord, StorageError, TornWrite
from storage.journal import Journal
from storage.model import JournalConfig, Location
from storage.record import RecordType, encode
from storage.recovery import repair
from storage.report import inspect


@dataclass
class Written:
    """A journal as written: its messages and its files (id -> path) in log order."""

    config: JournalConfig
    messages: list[tuple[Location, bytes]]
    files: dict[int, Path]

    @property
    def last(self) -> Path:
        return list(self.files.values())[-1]

    @property
    def first(self) -> Path:
        return list(self.files.values())[0]

    def records(self, path: Path) -> list[tuple[int, int, int]]:
        return record_offsets(path)

    def surviving(self, path: Path, cut: int) -> list[bytes]:
        """The messages left when ``path`` loses everything from ``cut`` on."""
        file_id = next(fid for fid, p in self.files.items() if p == path)
        return [p for loc, p in self.messages if not (loc.file_id == file_id and loc.offset >= cut)]


def write_messages(config: JournalConfig, count: int = 60) -> Written:
    j = Journal.open(config)
    messages = []
    for n in range(count):
        payload = (f"payload {n} ".encode() * 6)[:60]
        messages.append((j.enqueue(b"q", payload), payload))
    used = sorted((f for f in j.files() if f.first_seq is not None), key=lambda f: f.first_seq or 0)
    j.close()
    assert len(used) >= 2, "the cases need a journal of at least two files"
    return Written(config, messages, {f.file_id: config.path / f.name for f in used})


def forge_seq(path: Path, off: int, end: int) -> None:
    """Rewrite a record with a valid CRC but a seq out of place (spliced from elsewhere)."""
    data = path.read_bytes()
    key, txid, p = decode_enqueue(data, off, end)
    seq = record_offsets(path)[0][2] + 10_000
    forged = encode(RecordType.ENQUEUE, seq, encode_enqueue(key, txid, data[p:end]))
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(forged)


def stray_bytes(path: Path, off: int, end: int) -> None:
    with open(path, "r+b") as f:
        f.seek(off + 50)
        f.write(b"junk")


Damage = Callable[[Path, int, int], None]  # (file, record offset, record end)
END = None  # "record" index meaning: just after the file's last record

# (case, file, record index, damage, outcome); the damaged file loses everything
# from the record's offset on.
CASES: list[tuple[str, str, int | None, Damage, str]] = [
    ("cut in the final record", "last", -1, lambda p, o, e: truncate(p, (o + e) // 2), "torn"),
    ("cut in the final header", "last", -1, lambda p, o, e: truncate(p, o + 10), "torn"),
    ("final record's tail zeroed", "last", -1, lambda p, o, e: zero(p, o + 25), "torn"),
    ("zeroed from the second-to-last", "last", -2, lambda p, o, e: zero(p, o + 25), "torn"),
    ("final header zeroed", "last", -1, lambda p, o, e: zero(p, o, o + 20), "torn"),
    ("cut at a record boundary", "last", -1, lambda p, o, e: truncate(p, o), "clean"),
    ("final payload byte flipped", "last", -1, lambda p, o, e: flip(p, e - 5), "corrupt"),
    ("byte flipped inside the last file", "last", 2, lambda p, o, e: flip(p, o + 30), "corrupt"),
    ("record zeroed inside the last file", "last", 2, lambda p, o, e: zero(p, o, e), "corrupt"),
    ("record with a wrong seq", "last", 2, forge_seq, "corrupt"),
    ("byte flipped in the first file", "first", 5, lambda p, o, e: flip(p, o + 30), "corrupt"),
    ("first file cut short", "first", 5, lambda p, o, e: truncate(p, o + 7), "corrupt"),
    ("stray bytes after the first file's data", "first", END, stray_bytes, "corrupt"),
]


def damage(w: Written, which: str, record: int | None, how: Damage) -> tuple[Path, int]:
    """Apply ``how`` to a record of the first or last file; returns (file, cut offset)."""
    path = w.last if which == "last" else w.first
    records = w.records(path)
    off, end, _ = records[record] if record is not None else (records[-1][1],) * 3
    how(path, off, end)
    return path, off


@pytest.mark.parametrize(("which", "record", "how", "outcome"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_corrupt_check_repair_reopen_append(
    config: JournalConfig, which: str, record: int | None, how: Damage, outcome: str
) -> None:
    written = write_messages(config)
    damaged, cut = damage(written, which, record, how)
    expected = written.surviving(damaged, cut)
    if outcome == "corrupt":
        with pytest.raises(CorruptRecord) as err:
            Journal.open(config)
        assert (err.value.file, err.value.offset) == (damaged.name, cut)
        assert f"{damaged.name} at offset {cut}" in str(err.value)
        before = damaged.read_bytes()
        actions = repair(config.path)
        assert [(a.file, a.offset) for a in actions] == [(damaged.name, cut)]
        assert (config.path / actions[0].broken_copy).read_bytes() == before
        assert os.path.getsize(damaged) == cut
    j = Journal.open(config)
    assert j.recovery.outcome == ("torn" if outcome == "torn" else "clean")
    if outcome == "torn":
        assert j.recovery.torn is not None
        assert (j.recovery.torn.file, j.recovery.torn.offset) == (damaged.name, cut)
    assert payloads(j) == expected
    j.enqueue(b"q", b"after the repair")
    j.close()
    again = Journal.open(config)
    assert again.recovery.outcome == "clean"
    assert payloads(again) == [*expected, b"after the repair"]
    again.close()


def test_open_zeroes_a_torn_tail(config: JournalConfig) -> None:
    written = write_messages(config)
    off, _, seq = written.records(written.last)[-1]
    zero(written.last, off + 25)
    j = Journal.open(config)
    assert j.last_seq == seq - 1
    j.close()
    data = written.last.read_bytes()
    assert data[off:] == bytes(len(data) - off)


def test_inspecting_a_torn_journal_changes_nothing(config: JournalConfig) -> None:
    written = write_messages(config)
    truncate(written.last, written.records(written.last)[-1][0] + 5)
    before = {p.name: p.read_bytes() for p in config.path.iterdir()}
    report = inspect(config.path)
    assert report.torn is not None and written.last.name in report.torn
    assert {p.name: p.read_bytes() for p in config.path.iterdir()} == before


def test_repair_of_a_clean_journal_does_nothing(config: JournalConfig) -> None:
    write_messages(config)
    assert repair(config.path) == []


def test_repair_keeps_numbered_copies_when_a_file_breaks_twice(config: JournalConfig) -> None:
    written = write_messages(config)
    damage(written, "last", 2, lambda p, o, e: flip(p, o + 30))
    assert [a.broken_copy for a in repair(config.path)] == [written.last.name + ".broken"]
    off, _, _ = written.records(written.last)[1]
    flip(written.last, off + 30)
    assert [a.broken_copy for a in repair(config.path)] == [written.last.name + ".broken.1"]
    assert [r.payload for r in reopened(config)] == written.surviving(written.last, off)


def test_stray_bytes_past_a_hole_in_a_preallocated_file_are_found(tmp_path: Path) -> None:
    """The check that a file is zeros after its data skips holes unread
    (SEEK_DATA); bytes written far past the data, beyond a hole, are still seen."""
    config = small_config(tmp_path / "q", "growing", max_file_length=1 << 20)
    j = Journal.open(config)
    for n in range(20):
        j.enqueue(b"q", b"payload %d" % n)
    (info,) = j.files()
    path, end = config.path / info.name, info.used
    j.close()
    with open(path, "r+b") as f:
        f.seek((1 << 20) - 100)
        f.write(b"junk")
    j = Journal.open(config)
    torn = j.recovery.torn
    assert isinstance(torn, TornWrite) and torn.file == path.name
    assert "stray bytes" in str(torn) and torn.offset == end
    assert len(payloads(j)) == 20
    j.close()


def test_a_zeroed_file_header_with_records_after_it_is_damage_not_a_blank_file(tmp_path: Path) -> None:
    """A file that starts with zeros is blank only if it is zeros to its end:
    the check reads it a window at a time, and must not stop at the first."""
    config = small_config(tmp_path / "q", "growing")
    written = write_messages(config)
    assert len(written.records(written.last)) > 1
    zero(written.last, 0, 64)  # the file header and the start of the first record
    with pytest.raises(CorruptRecord) as err:
        Journal.open(config)
    assert err.value.file == written.last.name and "valid records follow" in str(err.value)


def test_a_growing_file_cut_before_its_header_is_dropped(tmp_path: Path) -> None:
    config = small_config(tmp_path / "q", "growing")
    written = write_messages(config)
    last_id = int(written.last.name[3:11])
    blank = config.path / f"db-{last_id + 1:08d}.log"
    blank.touch(exist_ok=False)  # created and preallocated, header never written
    os.truncate(blank, config.max_file_length)
    j = Journal.open(config)
    assert isinstance(j.recovery.torn, TornWrite) and j.recovery.torn.file == blank.name
    assert not blank.exists()
    assert payloads(j) == [p for _, p in written.messages]
    j.close()


def test_a_torn_file_header_of_the_file_being_rolled_into_is_cut(config: JournalConfig) -> None:
    written = write_messages(config)
    if config.layout == "ring":
        following = config.path / f"JournalData.{int(written.last.name[12:16]) + 1:04d}.jdat"
    else:
        following = config.path / f"db-{int(written.last.name[3:11]) + 1:08d}.log"
        following.touch(exist_ok=False)
        os.truncate(following, config.max_file_length)
    with open(following, "r+b") as f:
        f.write(b"\x12\x34\x56\x78MB\x01")  # the start of a header, the rest never written
    j = Journal.open(config)
    assert j.recovery.outcome == "torn" and j.recovery.torn is not None
    assert j.recovery.torn.file == following.name
    assert payloads(j) == [p for _, p in written.messages]
    j.close()


def test_a_damaged_header_inside_the_log_is_corruption(config: JournalConfig) -> None:
    written = write_messages(config)
    flip(written.first, 10)
    with pytest.raises(CorruptRecord) as err:
        Journal.open(config)
    assert (err.value.file, err.value.offset) == (written.first.name, 0)


def test_files_of_another_layout_are_refused(config: JournalConfig, tmp_path: Path) -> None:
    write_messages(config)
    victim = sorted(config.path.iterdir())[0]
    other = "growing" if config.layout == "ring" else "ring"
    foreign = tmp_path / "foreign"
    Journal.open(
        JournalConfig(
            directory=foreign,
            layout=other,
            file_size=4096,  # type: ignore[arg-type]
            max_file_length=4096,
        )
    ).close()
    donor = sorted(foreign.iterdir())[0]
    victim.write_bytes(donor.read_bytes())
    with pytest.raises(StorageError):
        Journal.open(config)


def test_a_directory_of_the_other_layout_is_refused(config: JournalConfig) -> None:
    write_messages(config)
    other = "growing" if config.layout == "ring" else "ring"
    with pytest.raises(StorageError, match=f"holds {config.layout} journal files"):
        Journal.open(small_config(config.path, other))


def test_a_journal_of_version_1_files_still_opens(config: JournalConfig) -> None:
    """Files written before DEQUEUE_MANY existed say version 1 in their header:
    they are read as before, and new records go on in them."""
    import zlib

    from storage.record import HEADER_SIZE

    j = Journal.open(config)
    locs = [j.enqueue(b"q", b"m%d" % n) for n in range(6)]
    for loc in locs[:2]:
        j.dequeue(loc.seq)
    j.close()
    for path in sorted(config.path.iterdir()):
        data = bytearray(path.read_bytes())
        if len(data) < HEADER_SIZE + 1 or data[HEADER_SIZE] != 2:
            continue
        data[HEADER_SIZE] = 1  # the version, first byte of the file header's body
        end = HEADER_SIZE + int.from_bytes(data[8:12], "little")  # the body length
        data[0:4] = zlib.crc32(data[4:end]).to_bytes(4, "little")
        path.write_bytes(bytes(data))
    again = Journal.open(config)
    assert again.recovery.outcome == "clean"
    assert [r.payload for r in again.recovered()] == [b"m%d" % n for n in range(2, 6)]
    again.dequeue_many([loc.seq for loc in locs[2:4]])
    again.close()
    assert [r.payload for r in Journal.open(config).recovered()] == [b"m4", b"m5"]
