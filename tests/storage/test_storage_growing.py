"""The growing layout: KahaDB's files added as needed and garbage-collected."""

from __future__ import annotations

from pathlib import Path

from storage_helpers import reopened, small_config

from storage.journal import Journal
from storage.model import JournalConfig

MSG = b"m" * 100


def advance(j: Journal, files: int = 1) -> None:
    """Enqueue and dequeue traffic until the writer has moved ``files`` files on."""
    target = j.current_file_id + files
    while j.current_file_id < target:
        j.dequeue(j.enqueue(b"filler", MSG).seq)


def file_ids(j: Journal) -> list[int]:
    return [f.file_id for f in j.files()]


def test_an_unconsumed_message_keeps_its_file_and_the_files_acking_its_neighbours(
    tmp_path: Path,
) -> None:
    cfg = small_config(tmp_path / "q", "growing")
    j = Journal.open(cfg)
    pin = j.enqueue(b"q", MSG)
    neighbours = [j.enqueue(b"q", MSG) for _ in range(20)]  # db-1, spilling into db-2
    assert pin.file_id == 1
    advance(j)  # now in db-3
    for loc in neighbours:
        j.dequeue(loc.seq)  # acks for db-1 messages land in db-3
    acks_file = j.current_file_id
    advance(j, 2)
    # db-1 (the pin), the file holding acks for db-1 messages, and the current file.
    assert file_ids(j) == [1, acks_file, j.current_file_id]
    info = {f.file_id: f for f in j.files()}
    assert info[1].live == 1 and [p.seq for p in info[1].pins] == [pin.seq]
    assert info[acks_file].live == 0 and [p.seq for p in info[acks_file].pins] == [pin.seq]
    j.close()
    j = Journal.open(cfg)  # the kept files recover the same single message
    assert [r.seq for r in j.recovered()] == [pin.seq]
    assert file_ids(j) == [1, acks_file, j.current_file_id]
    # Ack the pin: everything but the current file goes.
    j.dequeue(pin.seq)
    assert file_ids(j) == [j.current_file_id]
    assert j.disk_usage() == cfg.max_file_length
    j.close()
    assert [r.payload for r in reopened(cfg)] == []  # and nothing comes back


def test_files_with_only_dead_records_go_as_soon_as_the_writer_leaves_them(tmp_path: Path) -> None:
    j = Journal.open(small_config(tmp_path / "q", "growing"))
    advance(j, 5)
    assert file_ids(j) == [j.current_file_id] == [6]


def test_the_current_file_is_never_deleted(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "q", "growing")
    j = Journal.open(cfg)
    j.dequeue(j.enqueue(b"q", MSG).seq)
    assert file_ids(j) == [1] and j.files()[0].live == 0
    assert (cfg.path / "db-00000001.log").exists()


def test_an_open_transaction_keeps_its_files(tmp_path: Path) -> None:
    j = Journal.open(small_config(tmp_path / "q", "growing"))
    loc = j.enqueue(b"q", MSG)
    j.dequeue(loc.seq, txid="t")  # the tx's only record sits in db-1 next to its target
    advance(j, 3)
    assert file_ids(j)[0] == 1
    assert j.files()[0].open_txids == (b"t",)
    j.commit("t")
    assert file_ids(j) == [j.current_file_id]


def test_a_commit_record_is_kept_while_the_messages_it_commits_live(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "q", "growing")
    j = Journal.open(cfg)
    tx_msg = j.enqueue(b"q", MSG, txid="t")  # in db-1
    advance(j, 2)
    j.commit("t")  # in db-3: without it, recovery would drop tx_msg
    commit_file = j.current_file_id
    advance(j, 2)
    assert file_ids(j) == [1, commit_file, j.current_file_id]
    j.close()
    assert [r.seq for r in reopened(cfg)] == [tx_msg.seq]


def test_a_delivered_marker_is_rewritten_before_its_file_goes(tmp_path: Path) -> None:
    cfg = small_config(tmp_path / "q", "growing")
    j = Journal.open(cfg)
    pin = j.enqueue(b"q", MSG)
    advance(j)
    j.mark_delivered(pin.seq)  # in db-2, which holds nothing else that matters
    advance(j, 2)
    assert 2 not in file_ids(j)
    j.close()
    assert [(r.seq, r.delivered) for r in reopened(cfg)] == [(pin.seq, True)]


def test_disk_usage_counts_whole_files(tmp_path: Path) -> None:
    cfg = JournalConfig(directory=tmp_path / "q", layout="growing", max_file_length=8192)
    j = Journal.open(cfg)
    j.enqueue(b"q", b"x")
    assert j.disk_usage() == 8192  # KahaDB counts the preallocated file
    while j.current_file_id == 1:
        j.enqueue(b"q", MSG)
    assert j.disk_usage() == 2 * 8192


def _chain(j: Journal, files: int) -> int:
    """One unconsumed message in db-1, then traffic whose every ack lands in the file after its
    message (a consumer a few messages behind): each file holds acks of the one before, a chain
    KahaDB keeps whole. Returns the pin's seq."""
    pin = j.enqueue(b"q", MSG).seq
    behind: list[int] = []
    target = j.current_file_id + files
    while j.current_file_id < target:
        behind.append(j.enqueue(b"q", MSG).seq)
        if len(behind) > 5:
            j.dequeue(behind.pop(0))
    for seq in behind:
        j.dequeue(seq)
    return pin


def test_one_message_keeps_the_chain_of_files_acking_each_other(tmp_path: Path) -> None:
    """Without ack compaction (the default), the chain from db-1 to the current file stays."""
    j = Journal.open(small_config(tmp_path / "q", "growing"))
    _chain(j, 8)
    assert file_ids(j) == list(range(1, j.current_file_id + 1))
    j.close()


def test_ack_compaction_writes_the_chains_acks_again_and_the_files_go(tmp_path: Path) -> None:
    """compact_acks_after_no_gc (KahaDB's compactAcksAfterNoGC): the acks that keep the chain
    are written again into the current file, and only the pinned file and the newest remain;
    reopened, the journal holds the one message, nothing the deleted files acknowledged."""
    cfg = small_config(tmp_path / "q", "growing", compact_acks_after_no_gc=1, compact_acks_ignores_store_growth=True)
    j = Journal.open(cfg)
    pin = _chain(j, 8)
    advance(j)  # one more collection once the last acks are in
    kept = file_ids(j)
    assert kept[0] == 1 and len(kept) <= 3, kept
    j.close()
    assert [r.seq for r in reopened(cfg)] == [pin]
    j = Journal.open(cfg)
    assert [r.seq for r in j.recovered()] == [pin]
    j.dequeue(pin)
    assert file_ids(j) == [j.current_file_id]
    j.close()


def test_ack_compaction_waits_for_collections_that_delete_nothing(tmp_path: Path) -> None:
    """As KahaDB: acks are written again only after compact_acks_after_no_gc collections in a
    row that deleted nothing (and, unless told to ignore it, none while the journal grew)."""
    patient = small_config(tmp_path / "a", "growing", compact_acks_after_no_gc=1000)
    j = Journal.open(patient)
    _chain(j, 8)
    assert file_ids(j) == list(range(1, j.current_file_id + 1))
    j.close()
    eager = small_config(tmp_path / "b", "growing", compact_acks_after_no_gc=1)
    j = Journal.open(eager)
    _chain(j, 8)
    advance(j)
    assert len(file_ids(j)) <= 3  # a collection came while the current file stayed the same
    j.close()
