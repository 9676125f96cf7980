"""The growing journal's collection ends, however many delivered messages wait for acks.

Before a file goes, the collection writes the delivered-markers of its live
messages again. Markers of more messages than one file holds used to fill a
file of markers only, reclaimable in turn, and so on without end: the broker
made and deleted files in a loop and answered nobody.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from disk_faults import FaultyFileOps
from minibroker.config import parse_config
from minibroker.edge import VirtualNetwork
from storage.fileio import using

FILE_SIZE = 16 * 1024
MESSAGES = 1500
PREFETCH = 1000
#: Far more journal files than the run needs, far fewer than a collection that loops makes.
MAX_FILES_MADE = 400


class CountedCreates(FaultyFileOps):
    """Real file operations that count the journal files made, and refuse (EIO:
    the broker stops) to make more than ``limit``: a loop ends as a failure."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.made = 0

    def open(self, path, flags, mode=0o644):  # type: ignore[no-untyped-def]
        if flags & os.O_CREAT and os.fspath(path).endswith(".log"):
            self.made += 1
            if self.made > self.limit:
                raise OSError(errno.EIO, "too many journal files made", os.fspath(path))
        return super().open(path, flags, mode)


def test_deliveries_go_on_and_the_files_stay_few_with_many_delivered_unacknowledged(tmp_path: Path) -> None:
    config = parse_config({"store": {"layout": "growing", "journal_max_file_length": FILE_SIZE}})
    ops = CountedCreates(MAX_FILES_MADE)
    with using(ops):
        net = VirtualNetwork(config, data_dir=tmp_path / "data")
        producer = net.connected_client()
        for i in range(MESSAGES):
            producer.send("/queue/work", f"m{i}", persistent="true")
        consumer = net.connected_client()
        consumer.subscribe("/queue/work", "s", "client-individual", **{"activemq.prefetchSize": str(PREFETCH)})
        assert len(consumer.messages()) == PREFETCH
        journal = net.broker.store.journals()[0]
        most = 0
        acked = 0
        while acked < MESSAGES:
            message = consumer.messages()[acked]
            consumer.ack(message)
            acked += 1
            most = max(most, len(journal.files()))
        assert net.shutdown is None
        assert consumer.bodies() == [f"m{i}".encode() for i in range(MESSAGES)]
        # The messages' own records take about 20 files; markers and acks a few more.
        assert most <= 40, most
        late = net.connected_client()  # the broker still answers
        late.send("/queue/work", "after", receipt="r")
        assert late.last().command == "RECEIPT"


def _journal_files_after_a_pinned_chain(tmp_path: Path, store: dict[str, object]) -> list[int]:
    """Lab 06's hold on the broker: one persistent message on /queue/audit nobody reads, then
    600 orders consumed five behind (each file holds acks of the one before). The orders
    journal's files at the end."""
    config = parse_config({"store": {"layout": "growing", "journal_max_file_length": "16 kb", **store}})
    net = VirtualNetwork(config, data_dir=tmp_path / "data")
    shop = net.connected_client()
    shop.send("/queue/audit", "audit record", persistent="true")
    service = net.connected_client()
    service.subscribe("/queue/orders", "s", "client-individual")
    acked = 0
    for _ in range(600):
        shop.send("/queue/orders", "x" * 300, persistent="true")
        net.advance(0.01)
        got = service.messages()
        while acked < len(got) - 5:
            service.ack(got[acked])
            acked += 1
    net.advance(0.5)
    files = [f.file_id for f in net.broker.store.journal_for("/queue/orders").files()]
    net.stop()
    return files


def test_ack_compaction_frees_the_chain_one_message_keeps(tmp_path: Path) -> None:
    """Without ack compaction every file since the audit message stays; with
    compact_acks_after_no_gc the chain goes and the audit message's file and the newest remain."""
    kept = _journal_files_after_a_pinned_chain(tmp_path / "off", {})
    assert len(kept) > 15 and kept == list(range(1, len(kept) + 1))
    compacted = _journal_files_after_a_pinned_chain(
        tmp_path / "on", {"compact_acks_after_no_gc": 1, "compact_acks_ignores_store_growth": True}
    )
    assert compacted[0] == 1 and len(compacted) <= 3, compacted
