"""Ack compaction: the acks that keep a chain of files alive, written again (KahaDB's
``compactAcksAfterNoGC``).

Theory of operation:

- one live message in file 1 keeps file 1; file 2 holds acks of file 1's other
  messages, so it is kept too (deleting it would bring those messages back at
  recovery); file 3 holds acks of file 2's messages, and so on: one message keeps
  the whole chain (``storage/growing.py``);
- ``plan`` finds the files kept only by that chain (no live enqueue, no open
  transaction record, not pinned, not current) whose dependencies on the files
  kept for their own sake (a live message, an open transaction, the current
  file) come from plain acks alone: a file with any transaction record is left
  alone, for its commits and aborts cannot be written again;
- the journal writes those acks again, as DEQUEUE_MANY records, into the room
  its current file has left (never a roll), and moves the dependencies with
  them: the chain is broken, and the collection that follows deletes the files
  once the current file is on disk (it fsyncs before it deletes);
- recovery of a journal whose old acks are still there replays them first: the
  copies find their messages dead and change nothing, so those files stay kept
  (more than needed, never less) until the next compaction. A file whose acks
  do not match its dependencies exactly (copies written by an earlier
  compaction, say) is left alone too.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from storage.bodies import decode_dequeue, decode_dequeue_many, decode_enqueue
from storage.index import FileStats, JournalIndex
from storage.record import RecordType, scan
from storage.segment import Segment

__all__ = ["AckForwarding", "plan"]


@dataclass
class AckForwarding:
    """What one ack compaction writes and what it frees."""

    #: The enqueue seqs whose acks are written again, ascending.
    refs: list[int] = field(default_factory=list)
    #: For each file freed of its chain: the files its forwarded acks referred to, and how many.
    moved: dict[int, dict[int, int]] = field(default_factory=dict)


def _plain_acks(segment: Segment) -> list[int] | None:
    """The enqueue seqs the file's dequeue records refer to; None if it holds a record of a
    transaction (a transactional enqueue or dequeue, a commit, an abort)."""
    data = segment.read_all()
    acks: list[int] = []
    for rtype, _seq, offset, end in scan(data, 0):
        if rtype == RecordType.DEQUEUE:
            ref, txid = decode_dequeue(data, offset, end)
            if txid:
                return None
            acks.append(ref)
        elif rtype == RecordType.DEQUEUE_MANY:
            acks.extend(decode_dequeue_many(data, offset, end))
        elif rtype == RecordType.ENQUEUE:
            if decode_enqueue(data, offset, end)[1]:
                return None
        elif rtype in (RecordType.TX_COMMIT, RecordType.TX_ABORT):
            return None
    return acks


def plan(
    index: JournalIndex,
    segments: Mapping[int, Segment],
    current: int,
    pinned: Collection[int],
    room: int,
) -> AckForwarding:
    """The acks to write again (at most ``room`` of them) to free the files a chain keeps."""
    order: list[FileStats] = index.log_order()
    own = {s.file_id for s in order if s.file_id == current or s.live or s.tx_records or s.file_id in pinned}
    keep = index.retained(current, pinned)
    firsts = [s.first_seq for s in order]

    def home(seq: int) -> int | None:
        """The file holding enqueue ``seq`` (seqs rise through the files in log order)."""
        i = bisect.bisect_right(firsts, seq) - 1
        return order[i].file_id if i >= 0 and seq <= order[i].last_seq else None

    forwarding = AckForwarding()
    for stats in order:
        fid = stats.file_id
        if fid not in keep or fid in own or not any(dep in own for dep in stats.deps):
            continue
        acks = _plain_acks(segments[fid])
        if acks is None:
            continue
        refs = [ref for ref in acks if home(ref) in own]
        counts = Counter(home(ref) for ref in refs)
        expected = {dep: n for dep, n in stats.deps.items() if dep in own}
        if dict(counts) != expected or len(forwarding.refs) + len(refs) > room:
            continue
        forwarding.refs.extend(refs)
        forwarding.moved[fid] = {dep: n for dep, n in counts.items() if dep is not None}
    forwarding.refs.sort()
    return forwarding
