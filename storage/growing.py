"""The ``growing`` layout: KahaDB's journal of files added as needed.

Theory of operation. Files ``db-00000001.log``, ``db-00000002.log`` ... of
``max_file_length`` bytes are added when a record does not fit in the current
one; ids are never reused, so names sort in log order. Nothing is ever
refused for lack of room (the broker's ``store_limit`` on ``disk_usage()`` is
what stops producers, as ActiveMQ's storeUsage does).

A file is deleted (KahaDB's garbage collection, ``MessageDatabase.
checkpointUpdate``) when all of these hold:

* it is not the current write file;
* it holds no live enqueue (nor one pending in an open transaction), and no
  record of an open transaction;
* it holds no dequeue or commit record that refers to an enqueue in a file
  that is itself kept. Deleting such a file would lose the acknowledgement
  while the message's own record survives, and recovery would bring the
  message back. So one unconsumed message in ``db-1`` keeps ``db-1`` *and*
  every later file holding acks for messages of ``db-1``;
* it holds no abort record of a transaction whose records sit in a file that
  is kept. Deleting it would leave those records unfinished at recovery,
  where a later commit of the same txid (one reused after a restart, say)
  would adopt them.

The last two rules are computed in log order in one pass, since a dequeue,
commit or abort always follows the records it refers to
(``JournalIndex.retained``). Markers
(DELIVERED) do not keep a file: before a file goes, the journal writes the
markers of its still-live messages again, into the room the current file has
left; a file whose markers do not fit there stays for a later collection
(``Journal._collect``), so a collection never makes a file it could reclaim.

Ack compaction (``JournalConfig.compact_acks_after_no_gc``, KahaDB's
``compactAcksAfterNoGC``; ``storage/ackforward.py``) breaks the chain of the
third rule: the acks that keep it are written again into the current file.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from pathlib import Path

from storage.bodies import Layout
from storage.index import JournalIndex
from storage.model import JournalConfig
from storage.segment import Segment, numbered_files

__all__ = ["GrowingLayout"]

_NAME = re.compile(r"^db-(\d{8})\.log$")


class GrowingLayout:
    """Naming, growth and garbage collection of a KahaDB-like journal."""

    code = Layout.GROWING
    fixed_files = False
    #: Files reserve their disk blocks as they fill (``Segment``): acks can be written on a full disk.
    reserves = True

    def __init__(self, config: JournalConfig) -> None:
        self.name = config.queue_name
        self.size = config.max_file_length

    def file_name(self, file_id: int) -> str:
        return f"db-{file_id:08d}.log"

    def capacity(self, file_id: int) -> int:
        return self.size

    def discover(self, directory: Path) -> dict[int, Path]:
        return numbered_files(directory, _NAME)

    def prepare(self, directory: Path, segments: dict[int, Segment], file_id: int) -> Segment:
        """A new file, preallocated."""
        path = directory / self.file_name(file_id)
        segments[file_id] = Segment.create(path, file_id, self.size, reserve=True)
        return segments[file_id]

    def check_enqueue(self, file_id: int, offset: int, length: int, live: Callable[[int], int]) -> None:
        """A growing journal never refuses an enqueue."""

    def next_file(self, file_id: int, live: Callable[[int], int]) -> int:
        return file_id + 1

    def writable(self, file_id: int, offset: int, header_size: int, live: Callable[[int], int]) -> int:
        """Unbounded: a growing journal adds files."""
        return 1 << 62

    def reclaimable(self, index: JournalIndex, current: int, pinned: Collection[int] = ()) -> list[int]:
        """Files that may be deleted now, oldest first, keeping ``pinned`` (and what they keep)."""
        keep = index.retained(current, pinned)
        return sorted(file_id for file_id in index.files if file_id not in keep)
