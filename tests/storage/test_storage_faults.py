"""A failing or full disk, injected through the storage seam (``storage.fileio``).

A failed fsync is final; a failed write is final unless it is a full disk, which
refuses the one operation and leaves nothing behind; after any of them a reopen
recovers exactly what was durable (or written whole) before.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from storage_helpers import small_config

from disk_faults import FaultyFileOps
from storage import Journal, StoreFailed, StoreFull, TempStore
from storage.fileio import using
from storage.spill import SpillFile

LAYOUTS = ["growing", "ring"]


def _keys(journal: Journal) -> list[bytes]:
    return [bytes(r.payload or b"") for r in journal.recovered()]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_failed_fsync_is_final_and_a_reopen_recovers_what_was_durable(tmp_path: Path, layout: str) -> None:
    config = small_config(tmp_path / "j", layout)
    ops = FaultyFileOps()
    with using(ops):
        journal = Journal.open(config)
        journal.enqueue("q", b"durable")
        durable = journal.sync()
        journal.enqueue("q", b"covered by the failed fsync")
        ops.fail("fsync", errno.EIO)
        with pytest.raises(StoreFailed, match=r'Store "orders" failed: fsync of .*Input/output error'):
            journal.sync()
        assert journal.durable_seq == durable  # nothing more is claimed durable
        # The next fsync would succeed, but it proves nothing: the journal stays failed.
        with pytest.raises(StoreFailed):
            journal.sync()
        with pytest.raises(StoreFailed):
            journal.enqueue("q", b"after")
        journal.close()  # closes without claiming anything
    with Journal.open(config) as again:
        payloads = _keys(again)
    assert payloads[0] == b"durable"
    assert b"after" not in payloads


@pytest.mark.parametrize("layout", LAYOUTS)
def test_eio_on_a_write_fails_the_journal_and_leaves_no_torn_record_behind(tmp_path: Path, layout: str) -> None:
    config = small_config(tmp_path / "j", layout)
    ops = FaultyFileOps()
    with using(ops):
        journal = Journal.open(config)
        one = journal.enqueue("q", b"one")
        journal.sync()
        ops.fail("pwrite", errno.EIO, short=7)
        with pytest.raises(StoreFailed, match="Input/output error"):
            journal.enqueue("q", b"two" * 20)
        with pytest.raises(StoreFailed):
            journal.dequeue(one.seq)
        journal.close()
    with Journal.open(config) as again:
        assert again.recovery.outcome in ("clean", "torn")
        assert _keys(again) == [b"one"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_enospc_mid_record_refuses_that_record_only_and_nothing_half_written_comes_back(
    tmp_path: Path, layout: str
) -> None:
    config = small_config(tmp_path / "j", layout)
    ops = FaultyFileOps()
    with using(ops):
        journal = Journal.open(config)
        first = journal.enqueue("q", b"first")
        ops.fail("pwrite", errno.ENOSPC, short=90)  # the header and most of the body reach the file
        with pytest.raises(StoreFull, match='Store "orders" has no space left: .*No space left on device'):
            journal.enqueue("q", b"half-written" * 10)
        assert journal.last_seq == first.seq  # the refused record took no seq
        # Space is back: the journal goes on where it was, with a shorter record than the bytes
        # the failed write left (zeroed again: no stray bytes after it).
        second = journal.enqueue("q", b"2nd")
        journal.dequeue(first.seq)
        journal.sync()
        journal.close()
    with Journal.open(config) as again:
        assert again.recovery.outcome == "clean"  # no torn record was left in the middle
        assert [r.seq for r in again.recovered()] == [second.seq]
        assert _keys(again) == [b"2nd"]


def test_a_full_disk_refuses_a_new_file_and_the_journal_goes_on_in_the_old_one(tmp_path: Path) -> None:
    config = small_config(tmp_path / "j", "growing")
    ops = FaultyFileOps()
    with using(ops):
        journal = Journal.open(config)
        seqs = []
        while journal.current_file_id == 1:
            seqs.append(journal.enqueue("q", b"m" * 200).seq)
        journal.dequeue_many(seqs)  # the first file is garbage now
        files = sorted(p.name for p in config.path.glob("db-*.log"))
        ops.fail("fallocate", errno.ENOSPC, times=1000)
        while True:
            try:
                journal.enqueue("q", b"n" * 200)
            except StoreFull as exc:
                assert "No space left" in str(exc)
                break
        assert sorted(p.name for p in config.path.glob("db-*.log")) == files  # no empty file left behind
        ops.faults.clear()
        journal.enqueue("q", b"space is back")
        journal.sync()
        journal.close()
    with Journal.open(config) as again:
        assert _keys(again)[-1] == b"space is back"


def test_acks_are_written_on_a_full_disk_and_free_files(tmp_path: Path) -> None:
    """An enqueue keeps room reserved after it: the dequeues that free files fit there."""
    config = small_config(tmp_path / "j", "growing", max_file_length=64 * 1024)
    ops = FaultyFileOps(free=4 * 64 * 1024)
    with using(ops):
        journal = Journal.open(config)
        sent = []
        with pytest.raises(StoreFull):
            while True:
                sent.append(journal.enqueue("q", b"m" * 1000).seq)
        files_when_full = len(list(config.path.glob("db-*.log")))
        for seq in sent:
            journal.dequeue(seq)  # consumers acknowledge: written although the disk is full
        assert len(list(config.path.glob("db-*.log"))) < files_when_full  # ... and emptied files went
        journal.enqueue("q", b"accepted again")
        journal.sync()
        journal.close()
    with Journal.open(config) as again:
        assert _keys(again) == [b"accepted again"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_failed_fsync_while_rolling_or_collecting_is_final(tmp_path: Path, layout: str) -> None:
    config = small_config(tmp_path / "j", layout)
    ops = FaultyFileOps()
    with using(ops):
        journal = Journal.open(config)
        ops.fail("fsync", errno.EIO)
        with pytest.raises(StoreFailed):
            while True:
                journal.enqueue("q", b"m" * 200)  # the roll to the next file fsyncs the old one
        assert journal.failed is not None
        journal.close()


def test_creating_and_deleting_journal_files_fsyncs_their_directory(tmp_path: Path) -> None:
    config = small_config(tmp_path / "j", "growing")
    ops = FaultyFileOps()
    with using(ops):
        journal = Journal.open(config)
        seqs = [journal.enqueue("q", b"m" * 200).seq for _ in range(40)]  # several files
        journal.dequeue_many(seqs)  # the emptied files are deleted
        journal.close()
    directory = str(config.path)
    kinds = [(op, path) for op, path in ops.calls if op in ("open", "unlink", "fsync_directory")]
    created = [i for i, (op, path) in enumerate(kinds) if op == "open" and path.endswith(".log")]
    assert created
    for i, (op, _path) in enumerate(kinds):
        if op == "unlink":
            assert ("fsync_directory", directory) in kinds[i:], "a deleted file's directory was not fsynced"
    assert sum(1 for c in kinds if c == ("fsync_directory", directory)) >= 2


def test_the_temp_store_refuses_a_spill_on_a_full_disk_and_goes_on(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    with using(ops):
        store = TempStore(tmp_path / "tmp", max_file_length=4096)
        kept = store.append("list", b"kept")
        ops.fail("pwrite", errno.ENOSPC, short=5)
        with pytest.raises(StoreFull, match='"temp store" has no space'):
            store.append("list", b"refused" * 10)
        later = store.append("list", b"later")
        assert store.read(kept) == b"kept"
        assert store.read(later) == b"later"
        store.close()


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_read_that_fails_while_a_journal_is_recovered_names_the_file(tmp_path: Path, layout: str) -> None:
    config = small_config(tmp_path / "j", layout)
    journal = Journal.open(config)
    journal.enqueue("q", b"kept")
    journal.sync()
    journal.close()
    ops = FaultyFileOps()
    ops.fail("pread", errno.EIO, times=10**6)
    with (
        using(ops),
        pytest.raises(StoreFailed, match=r'Store "orders" failed: reading .*/j/\S+: \[Errno 5\] Input/output error'),
    ):
        Journal.open(config)
    assert any(op == "pread" for op, _ in ops.calls)  # recovery reads through the seam
    assert _keys(Journal.open(config)) == [b"kept"]  # nothing was changed by the failed start


def test_a_temp_store_read_that_fails_is_a_store_failure_naming_the_file(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    with using(ops):
        store = TempStore(tmp_path / "tmp", max_file_length=64 * 1024)
        entry = store.append("q", b"spilled")
        ops.fail("pread", errno.EIO)
        with pytest.raises(
            StoreFailed,
            match=r'Store "temp store" failed: reading .*tmp-00000001\.data: \[Errno 5\] Input/output error',
        ):
            store.read(entry)
        assert store.read(entry) == b"spilled"  # the fault was once; the entry is still there
        store.close()


def test_an_index_spill_file_read_that_fails_is_a_store_failure(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    with using(ops):
        spill = SpillFile(tmp_path)
        slot = spill.write(b"block")
        ops.fail("pread", errno.EIO)
        with pytest.raises(StoreFailed, match=r'Store "index spill file" failed: reading a block: \[Errno 5\]'):
            spill.read(slot)
        assert spill.read(slot) == b"block"
        spill.close()
