"""The ``ring`` layout: the Qpid legacystore's fixed ring of journal files.

Theory of operation. ``file_count`` files of ``file_size`` bytes are created
at once and written round and round. Each file keeps a count of its live
enqueues; the writer moves on to the next file only when that file's count is
0 (it is then zeroed and reused), otherwise nothing more can be written:
``JournalFull``. Files are never deleted, so the store's size is fixed.

To keep room for the dequeues that free files, every *enqueue* is first
checked by the legacystore's look-ahead (``wrfc::enq_threshold``,
``JRNL_ENQ_THRESHOLD`` = 80):

* the reserve is 20% of the ring's total size, and at least one file;
* look ahead from the start of the current file by (current offset + this
  record + reserve); the files that distance reaches past the current one are
  the files the look-ahead reaches;
* if any of them still holds live enqueues, or the look-ahead goes all the
  way round to the current file, the enqueue is refused with
  ``Enqueue capacity threshold exceeded on queue "<name>".``

Dequeues, commits, aborts and markers are not checked; they may use the
reserve. That is why one old message per file is enough to refuse enqueues
while the journal is nearly empty (Red Hat KB 269193): the look-ahead
reaches a file whose only record that matters is one unconsumed message.

(Qpid measures the offset without its file header and in 128-byte blocks;
here it is in bytes from the start of the file, header included.)
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection
from pathlib import Path

from storage.bodies import Layout
from storage.errors import EnqueueThresholdExceeded, JournalFull, StorageError
from storage.index import JournalIndex
from storage.model import JournalConfig
from storage.segment import Segment, fsync_directory, numbered_files

__all__ = ["ENQUEUE_THRESHOLD_PERCENT", "RingLayout"]

ENQUEUE_THRESHOLD_PERCENT = 80  # JRNL_ENQ_THRESHOLD
_NAME = re.compile(r"^JournalData\.(\d{4})\.jdat$")

LiveCount = Callable[[int], int]


class RingLayout:
    """Naming, reuse and the enqueue threshold of a ring of ``file_count`` files."""

    code = Layout.RING
    fixed_files = True
    #: Ring files stay sparse until written (their size is the ring's, reserved or not).
    reserves = False

    def __init__(self, config: JournalConfig) -> None:
        self.name = config.queue_name
        self.count = config.file_count
        self.size = config.file_size
        total = self.size * self.count
        reserve = math.ceil(total * (100 - ENQUEUE_THRESHOLD_PERCENT) / 100)
        self.reserve = max(reserve, self.size)

    def file_name(self, file_id: int) -> str:
        return f"JournalData.{file_id:04d}.jdat"

    def capacity(self, file_id: int) -> int:
        return self.size

    def discover(self, directory: Path) -> dict[int, Path]:
        """The ring's files; all ``file_count`` of them, or none (a new journal)."""
        found = numbered_files(directory, _NAME)
        if found and sorted(found) != list(range(self.count)):
            raise StorageError(
                f"{directory} holds ring files {sorted(found)}; the config says "
                f"{self.count} files (0..{self.count - 1})"
            )
        return found

    def create_files(self, directory: Path, segments: dict[int, Segment]) -> None:
        """Create the ring's files if there are none; regrow any a repair cut short."""
        if not segments:
            for fid in range(self.count):
                path = directory / self.file_name(fid)
                segments[fid] = Segment.create(path, fid, self.size)
            fsync_directory(directory)
        for seg in segments.values():
            seg.extend()

    def prepare(self, directory: Path, segments: dict[int, Segment], file_id: int) -> Segment:
        """The file to write next, zeroed (the writer has checked it holds nothing live)."""
        segments[file_id].zero_from(0)
        return segments[file_id]

    def check_enqueue(self, file_id: int, offset: int, length: int, live: LiveCount) -> None:
        """Refuse an enqueue of ``length`` bytes at ``offset`` of ``file_id`` (see above)."""
        ahead = offset + length + self.reserve
        reached = (ahead - 1) // self.size  # files reached beyond the current one
        if reached >= self.count or any(live((file_id + step) % self.count) for step in range(1, reached + 1)):
            raise EnqueueThresholdExceeded(self.name, file_id, offset, length)

    def next_file(self, file_id: int, live: LiveCount) -> int:
        """The file to write after ``file_id``: the next one, if it holds nothing live."""
        following = (file_id + 1) % self.count
        count = live(following)
        if count:
            raise JournalFull(self.name, following, count)
        return following

    def writable(self, file_id: int, offset: int, header_size: int, live: LiveCount) -> int:
        """Bytes that can be written before reaching a file that holds live enqueues."""
        room = self.size - offset
        for step in range(1, self.count):
            if live((file_id + step) % self.count):
                break
            room += self.size - header_size
        return room

    def reclaimable(self, index: JournalIndex, current: int, pinned: Collection[int] = ()) -> list[int]:
        """Ring files are reused when the writer comes round to them, never deleted."""
        return []
