"""A transaction across queues of the ring layout commits atomically (storage.txlog).

Each queue of the ring layout has its own journal, so such a commit writes a
TX_COMMIT in each. These tests kill the commit part way (an exception stands
for the process dying: what was written stays in the page cache, nothing else
runs) and check what the next start recovers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from minibroker.config import StoreConfig, parse_config
from minibroker.durability import MessageStore, encode_payload
from minibroker.edge import VirtualNetwork
from storage import Journal, TransactionLog


class Killed(BaseException):
    """The broker process dies here."""


def ring_store(data: Path) -> MessageStore:
    return MessageStore(StoreConfig(layout="ring", file_count=4, file_size=64 * 1024), data)


def payload(seq: int, text: str) -> bytes:
    return encode_payload(
        seq,
        f"ID:t-{seq}",
        {"destination": "/queue/x"},
        text.encode(),
        persistent=True,
        priority=4,
        expires=0,
        timestamp=0,
    )


def die(store: MessageStore) -> None:
    """The process is gone: written bytes reach the OS, nothing is closed or retired."""
    for journal in store.journals():
        journal.flush()
    store._unlock()


def recovered_keys(data: Path) -> list[str]:
    store = ring_store(data)
    try:
        return sorted(key for key, *_ in store.recover())
    finally:
        store.close()


def start_transaction(store: MessageStore) -> None:
    store.enqueue("/queue/a", payload(1, "to a"), "T")
    store.enqueue("/queue/b", payload(2, "to b"), "T")


def crash_between_the_commits(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Commit "T" across /queue/a and /queue/b; die after the first journal's TX_COMMIT."""
    store = ring_store(data)
    start_transaction(store)
    real_commit = Journal.commit
    committed: list[Journal] = []

    def commit_then_die(journal: Journal, txid: str) -> int:
        if committed:
            raise Killed  # the first journal has its TX_COMMIT, the second never gets one
        committed.append(journal)
        return real_commit(journal, txid)

    monkeypatch.setattr(Journal, "commit", commit_then_die)
    with pytest.raises(Killed):
        store.commit("T")
    monkeypatch.undo()
    die(store)
    assert len(committed) == 1


def test_a_crash_between_the_journals_commits_completes_the_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash_between_the_commits(tmp_path, monkeypatch)
    assert recovered_keys(tmp_path) == ["/queue/a", "/queue/b"]
    with TransactionLog(tmp_path / "txlog") as log:
        assert log.decided() == frozenset()  # completed at start, then retired
    with TransactionLog(tmp_path / "txlog") as log:
        assert log.decided() == frozenset()  # completed at start, then retired


def test_a_crash_before_the_decision_aborts_the_transaction_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = ring_store(tmp_path)
    start_transaction(store)

    def killed(log: TransactionLog, txid: str) -> None:
        raise Killed

    monkeypatch.setattr(TransactionLog, "decide", killed)
    with pytest.raises(Killed):
        store.commit("T")
    monkeypatch.undo()
    die(store)
    assert recovered_keys(tmp_path) == []


def test_a_clean_commit_and_close_leaves_no_decision_behind(tmp_path: Path) -> None:
    store = ring_store(tmp_path)
    start_transaction(store)
    store.commit("T")
    store.close()
    with TransactionLog(tmp_path / "txlog") as log:
        assert log.decided() == frozenset()
    assert recovered_keys(tmp_path) == ["/queue/a", "/queue/b"]


def test_decisions_are_retired_once_a_sync_covers_the_commits(tmp_path: Path) -> None:
    store = ring_store(tmp_path)
    start_transaction(store)
    store.commit("T")
    assert store._txlog is not None and store._txlog.decided() == {b"T"}
    store.sync()
    store.enqueue("/queue/a", payload(3, "one"), "U")  # a transaction within one journal: no decision
    store.commit("U")
    assert store._txlog.decided() == frozenset()
    store.close()


def test_journal_compact_completes_a_decided_transaction_it_finds_unfinished(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from clients.cli import main

    crash_between_the_commits(tmp_path, monkeypatch)
    assert main(["journal", "compact", str(tmp_path)]) == 0
    capsys.readouterr()
    assert recovered_keys(tmp_path) == ["/queue/a", "/queue/b"]


def test_stomp_transaction_across_two_ring_queues_survives_a_restart(tmp_path: Path) -> None:
    net = VirtualNetwork(
        parse_config({"store": {"layout": "ring", "file_count": 4, "file_size": "64 kb"}}), data_dir=tmp_path / "data"
    )
    p = net.connected_client()
    p.send_frame("BEGIN", {"transaction": "t1"})
    p.send("/queue/left", "L", transaction="t1", persistent="true")
    p.send("/queue/right", "R", transaction="t1", persistent="true")
    p.send_frame("COMMIT", {"transaction": "t1", "receipt": "c"})
    assert p.last().command == "RECEIPT"
    net.restart()
    c = net.connected_client()
    c.subscribe("/queue/left", "l")
    c.subscribe("/queue/right", "r")
    assert sorted(c.bodies()) == [b"L", b"R"]
