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
