"""The ring layout's journal directories: one per destination name, never shared."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from minibroker.config import StoreConfig, parse_config
from minibroker.durability import MessageStore, directory_name, encode_payload
from minibroker.edge import VirtualNetwork
from storage import Journal, JournalConfig, StorageError

RING = {"layout": "ring", "file_count": 4, "file_size": "64 kb"}


def _payload(n: int) -> bytes:
    return encode_payload(n, f"ID:old-{n}", {}, b"old %d" % n, persistent=True, priority=4, expires=0, timestamp=0)


def _legacy_journal(base: Path, name: str, owner: str, records: list[tuple[str, int]]) -> Path:
    """A journal directory as an older minibroker left it: named ``name``, NAME
    file ``owner``, holding ``records`` (key, broker seq)."""
    directory = base / name
    directory.mkdir(parents=True)
    (directory / "NAME").write_text(owner, encoding="utf-8")
    with Journal.open(
        JournalConfig(directory=directory, layout="ring", name=owner, file_count=4, file_size=64 * 1024)
    ) as journal:
        for key, seq in records:
            journal.enqueue(key, _payload(seq))
        journal.sync()
    return directory


def test_names_the_old_mapping_merged_keep_their_messages_across_a_restart(tmp_path: Path) -> None:
    net = VirtualNetwork(parse_config({"store": RING}), data_dir=tmp_path / "data")
    p = net.connected_client()
    for i in range(20):
        for dest in ("/queue/a.b", "/queue/a/b"):
            p.send(dest, f"{dest} {i}", persistent="true", receipt=f"{dest}{i}")
    assert len(p.frames("RECEIPT")) == 40 and not p.frames("ERROR")
    net.restart()
    for dest in ("/queue/a.b", "/queue/a/b"):
        c = net.connected_client()
        c.subscribe(dest)
        assert c.bodies() == [f"{dest} {i}".encode() for i in range(20)]
    assert len(net.broker.store.journals()) == 2


@given(st.text(min_size=1, max_size=90), st.text(min_size=1, max_size=90))
@example("0", "/")  # "//" once named the directory "."
def test_two_different_keys_never_share_a_directory(a: str, b: str) -> None:
    for key in (a, b, "/" + a, "/" + b, "durable:/topic/" + a):
        name = directory_name(key)
        assert 0 < len(name) <= 200 and name not in (".", "..") and "/" not in name
    if a != b:
        assert directory_name(a) != directory_name(b)
        assert directory_name("/" + a) != directory_name("/" + b)
        assert directory_name("/queue/" + a * 9) != directory_name("/queue/" + b * 9)  # cut and hashed


def test_plain_names_keep_the_directory_they_always_had() -> None:
    assert directory_name("/queue/orders") == "queue.orders"
    assert directory_name("/queue/a/b") == "queue.a.b"
    assert directory_name("/queue/a.b") == "queue.a_2eb"
    assert directory_name("durable:/topic/t|c|n") == "~durable_3a.topic.t_7cc_7cn"
    assert directory_name("/") == "~." and directory_name("//") == "~.." and directory_name("//x") == ".x"


def test_a_directory_of_the_old_mapping_is_renamed_and_read(tmp_path: Path) -> None:
    base = tmp_path / "data" / "journal"
    # The old mapping gave /queue/x_2ey "queue.x_2ey", now the name of /queue/x.y: both move.
    _legacy_journal(base, "queue.x.y", "/queue/x.y", [("/queue/x.y", 1)])
    _legacy_journal(base, "queue.x_2ey", "/queue/x_2ey", [("/queue/x_2ey", 2)])
    store = MessageStore(StoreConfig(**{**RING, "file_size": 64 * 1024}), tmp_path / "data")
    try:
        found = {key: Path(journal.config.directory).name for key, _, _, journal in store.recover()}
        assert found == {"/queue/x.y": "queue.x_2ey", "/queue/x_2ey": "queue.x_5f2ey"}
        assert sorted(p.name for p in base.iterdir()) == ["queue.x_2ey", "queue.x_5f2ey"]
        assert Path(store.journal_for("/queue/x/y").config.directory).name == "queue.x.y"  # free again
    finally:
        store.close()


def test_a_data_directory_whose_old_journal_holds_two_names_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "data" / "journal"
    _legacy_journal(base, "queue.a.b", "/queue/a/b", [("/queue/a.b", 1), ("/queue/a/b", 2)])
    with pytest.raises(StorageError) as refused:
        MessageStore(StoreConfig(layout="ring", file_count=4, file_size=64 * 1024), tmp_path / "data")
    message = str(refused.value)
    assert "'/queue/a/b', '/queue/a.b'" in message and "mapped to one directory" in message
    assert "Move the directory out of the data directory" in message
    # The refusal let the data directory go: after moving the journal aside, the broker starts.
    (base / "queue.a.b").rename(tmp_path / "aside")
    MessageStore(StoreConfig(layout="ring", file_count=4, file_size=64 * 1024), tmp_path / "data").close()


def test_a_data_directory_where_two_directories_claim_one_name_is_refused(tmp_path: Path) -> None:
    base = tmp_path / "data" / "journal"
    _legacy_journal(base, "queue.q", "/queue/q", [("/queue/q", 1)])
    _legacy_journal(base, "queue.q-0000", "/queue/q", [("/queue/q", 2)])
    with pytest.raises(
        StorageError,
        match=r"2 journal directories \(queue.q, queue.q-0000\) all hold the journal "
        r"of '/queue/q'",
    ):
        MessageStore(StoreConfig(layout="ring", file_count=4, file_size=64 * 1024), tmp_path / "data")


def test_a_store_full_of_ring_reservations_says_so_in_the_error_stat_and_diagnosis(tmp_path: Path) -> None:
    doc = {
        "store": RING,
        "system_usage": {"store_limit": "1 mb"},
        "destination_policy": [{"queue": ">", "send_fail_if_no_space": True}],
    }
    net = VirtualNetwork(parse_config(doc), data_dir=tmp_path / "data")
    p = net.connected_client()
    for n in range(4):  # four rings of 4 x 64 KiB reserve the whole megabyte
        p.send(f"/queue/q{n}", "small", persistent="true", receipt=f"r{n}")
    p.send("/queue/q0", "one more", persistent="true", receipt="full")
    [error] = p.frames("ERROR")
    assert error.headers["receipt-id"] == "full"
    assert error.headers["message"].startswith("Persistent store is Full, 100% of 1048576.")
    assert error.headers["message"].endswith(
        "The ring layout reserves each destination's whole ring when it is created (Qpid preallocates it): "
        "4 rings of 256 KiB reserve 1 MiB of the store limit, however little they hold."
    )

    from clients.commands.stat import format_tables
    from minibroker.ops import broker_statistics

    stats = broker_statistics(net.broker)
    assert (stats["storeUsage"], stats["storeRings"], stats["storeRingBytes"]) == (1024 * 1024, 4, 256 * 1024)
    assert 0 < stats["storeWrittenBytes"] < 4 * 1024  # a file header and a message per ring
    [finding] = [f for f in stats["diagnosis"] if f["pathology"] == "rings-reserve-the-store"]
    assert "4 rings of 256 KiB reserve 1 MiB" in finding["summary"]
    assert finding["cure"].startswith(
        "each persistent destination costs one ring of 256 KiB: the store limit 1 MiB holds 4; raise store_limit"
    )
    report = format_tables({"broker": stats, "destinations": []})
    assert "store 100% (1 MiB of 1 MiB reserved by 4 rings of 256 KiB, " in report.splitlines()[0]
    assert "DIAGNOSIS rings-reserve-the-store: persistent store 100% full" in report


def test_a_ring_refusing_enqueues_is_its_queues_state_in_the_statistics_not_the_stores(tmp_path: Path) -> None:
    """The enqueue threshold refuses one queue's messages: that queue's statistics say
    ``journalState`` full (the doctor reads it), the broker's ``storeState`` stays ok and
    other queues take persistent messages; an enqueue written again clears it."""
    from minibroker.ops.stats import broker_statistics, destination_statistics

    net = VirtualNetwork(parse_config({"store": RING}), data_dir=tmp_path / "data")
    producer, consumer = net.connected_client(), net.connected_client()
    consumer.subscribe("/queue/q", "s", "auto", selector="kind = 'order'")
    journal = net.broker.store.journal_for  # the ring is made by the first message

    def queue_stats(address: str) -> dict[str, object]:
        return destination_statistics(net.broker, net.broker.destinations[address])

    pins = 0
    while not producer.frames("ERROR") and pins < 8:  # one message per file the consumer never takes
        producer.send("/queue/q", "pin", persistent="true", kind="audit")
        pins += 1
        start = journal("/queue/q").current_file_id
        while not producer.frames("ERROR") and journal("/queue/q").current_file_id == start:
            producer.send("/queue/q", "x" * 200, persistent="true", kind="order")
    [error] = producer.frames("ERROR")
    assert error.headers["message"] == 'Enqueue capacity threshold exceeded on queue "q".'
    stats = queue_stats("/queue/q")
    assert (stats["journalState"], stats["journalProblem"]) == ("full", error.headers["message"])
    assert (stats["journalFiles"], stats["journalLive"]) == (4, stats["size"]) and stats["size"] <= 4
    assert stats["journalFilesWithLive"] == stats["journalLive"]
    broker = broker_statistics(net.broker)
    assert (broker["storeState"], broker["storeProblem"]) == ("ok", "")
    from clients.commands.stat import format_tables

    report = format_tables({"broker": broker, "destinations": [stats]})
    assert f"journal of /queue/q FULL ({stats['size']} live messages in 4 files): {error.headers['message']}" in report
    producer.send("/queue/other", "fine", persistent="true", receipt="other")
    assert producer.frames("RECEIPT")[-1].headers["receipt-id"] == "other"
    assert queue_stats("/queue/other")["journalState"] == "ok"

    net.connected_client().subscribe("/queue/q", "all", "auto")  # the pins are consumed
    producer.send("/queue/q", "again", persistent="true", receipt="again")
    assert producer.frames("RECEIPT")[-1].headers["receipt-id"] == "again"
    assert (queue_stats("/queue/q")["journalState"], queue_stats("/queue/q")["journalProblem"]) == ("ok", "")
