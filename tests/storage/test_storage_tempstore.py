"""The temp store: spill files wiped at open, freed when unreferenced, but never the
current one (the temp-storage deadlock: with a temp limit below the file size, usage stays >= 100%)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import entries
from storage.errors import StoreFailed
from storage.record import Record, RecordType, decode
from storage.tempstore import TempStore

FILE = 4096


@pytest.fixture
def store(tmp_path: Path) -> Iterator[TempStore]:
    temp = TempStore(tmp_path / "tmp_storage", max_file_length=FILE)
    yield temp
    temp.close()


def test_append_read_release(store: TempStore) -> None:
    handles = [store.append("sub-1", f"message {n}".encode()) for n in range(5)]
    assert [store.read(h) for h in handles] == [f"message {n}".encode() for n in range(5)]
    store.release(handles[0])
    with pytest.raises(KeyError):
        store.read(handles[0])
    with pytest.raises(KeyError):
        store.release(handles[0])
    assert store.entries == 4


def test_usage_counts_every_file_at_its_full_size(store: TempStore) -> None:
    assert store.disk_usage() == 0  # no file until the first spill
    store.append(b"sub", b"x")
    assert store.disk_usage() == FILE
    assert os.path.getsize(store.directory / store.files()[0].name) == FILE
    while len(store.files()) < 3:
        store.append(b"sub", b"y" * 500)
    assert store.disk_usage() == 3 * FILE == sum(os.path.getsize(store.directory / f.name) for f in store.files())


def fill_first_file(store: TempStore) -> tuple[list[int], int]:
    """Append until the store rolls: (the entries in file 1, the first one in file 2)."""
    handles = [store.append(b"slow", b"a" * 500)]
    while store.locate(handles[-1]).file_id == 1:
        handles.append(store.append(b"slow", b"a" * 500))
    return handles[:-1], handles[-1]


def test_a_file_goes_when_nothing_in_it_is_referenced(store: TempStore) -> None:
    first, second = fill_first_file(store)
    assert [f.file_id for f in store.files()] == [1, 2]
    for handle in first[:-1]:
        store.release(handle)
    assert [f.file_id for f in store.files()] == [1, 2]  # one entry still pins file 1
    store.release(first[-1])
    assert [f.file_id for f in store.files()] == [2]
    assert store.read(second) == b"a" * 500


def test_the_current_file_is_never_deleted_so_usage_never_falls(store: TempStore) -> None:
    """The temp-storage deadlock: a temp limit below the file size stays >= 100% once anything spilled."""
    temp_limit = FILE // 2
    handles = [store.append(b"sub", b"z" * 300) for _ in range(5)]
    for handle in handles:
        store.release(handle)
    assert store.entries == 0
    assert [f.current for f in store.files()] == [True]
    assert store.disk_usage() * 100 // temp_limit == 200  # still "full"


def test_a_file_left_unreferenced_is_deleted_when_the_writer_leaves_it(store: TempStore) -> None:
    handle = store.append(b"sub", b"c" * 500)
    while store.locate(handle).file_id == 1:
        store.release(handle)  # consumed at once: file 1 stays only while it is current
        assert [f.file_id for f in store.files()] == [1]
        handle = store.append(b"sub", b"c" * 500)
    assert [f.file_id for f in store.files()] == [2]


def test_the_store_is_wiped_at_open(tmp_path: Path) -> None:
    first = TempStore(tmp_path / "t", max_file_length=FILE)
    first.append(b"sub", b"gone after a restart")
    first.close()
    (tmp_path / "t" / "unrelated.txt").write_text("kept")
    second = TempStore(tmp_path / "t", max_file_length=FILE)
    assert second.files() == [] and second.disk_usage() == 0
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == ["unrelated.txt"]
    second.close()


def test_entries_use_the_journal_record_framing(store: TempStore) -> None:
    handle = store.locate(store.append("sub-9", b"payload"))
    store.flush()
    data = (store.directory / store.files()[0].name).read_bytes()
    record = decode(data, handle.offset)
    assert isinstance(record, Record) and record.rtype is RecordType.ENQUEUE
    assert record.seq == handle.seq and record.body.endswith(b"sub-9payload")
    header = decode(data, 0)
    assert isinstance(header, Record) and header.rtype is RecordType.FILE_HEADER


def test_an_entry_larger_than_a_file_is_refused(store: TempStore) -> None:
    with pytest.raises(ValueError, match="does not fit"):
        store.append(b"sub", bytes(FILE))
    assert store.files() == []


def test_a_damaged_entry_is_a_failed_store_not_returned(store: TempStore) -> None:
    handle = store.locate(store.append(b"sub", b"payload"))
    store.flush()
    path = store.directory / store.files()[0].name
    with open(path, "r+b") as f:
        f.seek(handle.offset + handle.length - 1)
        f.write(b"!")
    with pytest.raises(StoreFailed, match=r"Store \"temp store\" failed: reading .*crc mismatch"):  # the broker stops
        store.read(handle.seq)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(st.tuples(st.just("append"), st.integers(1, 600)), st.tuples(st.just("release"), st.integers(0, 9))),
        max_size=80,
    )
)
def test_live_entries_are_found_as_a_dict_would_find_them(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int]]
) -> None:
    """Where each live entry is comes from the journal's table of live rows, here
    in blocks of four rows with one block's worth kept in memory (the rest spilled):
    every lookup answers as a dict of the live entries would, file headers' seqs
    between, and the rows in memory stay bounded whatever is spilled."""
    with (
        mock.patch.object(entries, "BLOCK_ROWS", 4),
        mock.patch.object(entries, "_SPLIT_ROWS", 8),
        mock.patch.object(entries, "_MIN_CACHE_BLOCKS", 1),
        mock.patch.object(entries, "_COMPACT_MIN", 1),
    ):
        store = TempStore(tmp_path_factory.mktemp("live"), max_file_length=FILE, cache_rows=1)
        model: dict[int, bytes] = {}
        try:
            for n, (kind, arg) in enumerate(ops):
                if kind == "append":
                    payload = bytes([n % 251]) * arg
                    model[store.append(b"l", payload)] = payload
                elif model:
                    seq = sorted(model)[arg % len(model)]  # mostly the oldest, as a FIFO releases
                    store.release(seq)
                    del model[seq]
                    with pytest.raises(KeyError):
                        store.read(seq)
                assert store.entries == len(model)
                assert {seq: store.read(seq) for seq in model} == model
                assert sum(f.referenced for f in store.files()) == len(model)
                # in memory: the tail block and the two used last, whatever the backlog
                assert sum(1 for block in store._live.blocks if block.states is not None) <= 3
        finally:
            store.close()
