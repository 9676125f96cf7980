"""minibroker storage: journals and a temp store, in keys, sequence numbers and bytes.

This package is the bottom of minibroker. It imports nothing from ``minibroker``
or ``clients`` and knows nothing of STOMP. The on-disk format is written down
here first (in the manner of etcd's ``wal/doc.go``); the code follows it.

Records
=======

Every file is a sequence of records. A record is a 20-byte header and a body::

    offset  size  field
    0       4     crc32   zlib.crc32 of bytes 4..end of the record (header after
                          this field, then the body): covers magic, type, length
                          and seq, so a torn or flipped length is caught too
    4       2     magic   0x424D (b"MB" on disk); lets recovery resynchronise
    6       1     type    RecordType, never 0
    7       1     flags   0 (reserved)
    8       4     length  body length in bytes
    12      8     seq     sequence number, little-endian u64
    20      ...   body    ``length`` bytes, layout per type (below)

All integers are little-endian. Records are not padded or aligned, and a
record never spans two files. A 20-byte header of zeros means "no more records
in this file" (files are preallocated with zeros).

Sequence numbers come from the journal: every record it writes, file headers
included, takes the next one, so within a file they increase by exactly one.
Across files they only increase: files in between may have been deleted
(``growing``) or overwritten (``ring``).

Record types and bodies (``bodies.py``)::

    FILE_HEADER 1  <BBHIQ: version=2, layout (1 ring, 2 growing, 3 temp),
                   reserved, file_id, capacity (the file's preallocated size)
    ENQUEUE     2  <HH: key length, txid length; key; txid; payload
    DEQUEUE     3  <QH: seq of the enqueue it removes, txid length; txid
    TX_COMMIT   4  txid
    TX_ABORT    5  txid
    DELIVERED   6  <Q: seq of an enqueue that was handed to a consumer
    DEQUEUE_MANY 7 <Q...: seqs of the enqueues it removes, none in a
                   transaction (file header version 2; version 1 files,
                   written before it existed, are still read)

A record with a non-empty txid takes effect only when a TX_COMMIT with that
txid follows; TX_ABORT, or no outcome at all before the end of the log,
discards it (at open, the journal writes a TX_ABORT for every transaction it
finds unfinished, so a reused txid can never adopt old records; if a full ring
has no room for it, it is written before the txid is next used). DELIVERED
makes recovery flag the message as redelivered; it does not pin its file (if
the file is reclaimed while the message lives, the marker is written again).

A transaction with records in several journals (several queues of the
``ring`` layout) is committed atomically through a transaction log of its own
(``txlog.py``, Qpid's TPL): its decision is fsynced there before the first
TX_COMMIT, and ``Journal.open(committed=...)`` completes a decided transaction
that a crash left unfinished instead of aborting it.

Files
=====

Each file begins with a FILE_HEADER record at offset 0 and is preallocated at
its full size with ``ftruncate`` (sparse zeros), so "file size" on disk is the
capacity, as in KahaDB and Qpid, and the data ends at the first zero header.

``ring`` (Qpid legacystore)
    ``JournalData.0000.jdat`` .. ``JournalData.NNNN.jdat``: ``file_count``
    (4..64, default 8) files of ``file_size`` bytes (default 1.5 MiB), created
    at once. Writing goes round the ring; the next file is reused only when
    its count of live enqueues is 0, and reuse zeroes it before the new header
    is written. Names therefore do not sort in log order: the log order is the
    order of the header seqs, and the last-written file is the one whose header
    has the highest seq. Before each enqueue the look-ahead rule of the Qpid
    legacystore (``ring.py``) may refuse it with ``EnqueueThresholdExceeded``.

``growing`` (KahaDB)
    ``db-00000001.log``, ``db-00000002.log`` ..., ids never reused, so names
    sort in log order. A new file of ``max_file_length`` (default 32 MiB) is
    added when a record does not fit. A file is deleted when it is not the
    current write file, holds no live enqueue and no record of an open
    transaction, holds no dequeue/commit record whose enqueue sits in a
    file that is itself kept, and no abort record of a transaction whose
    records sit in a file that is kept (``growing.py``).

``temp`` (ActiveMQ PListStore, ``tempstore.py``)
    ``tmp-00000001.data`` ...: ENQUEUE records (key = list id) in files of
    ``max_file_length``; wiped at open, so it is never recovered.

Rolling to a file: flush and fsync the old file; zero (ring) or create and
preallocate (growing) the new one; write its FILE_HEADER; fsync it (and the
directory for a new file). Because the old file is durable before the new one
is written, only the last-written file can have a torn tail after a crash.

Recovery
========

``Journal.open`` reads every file header, orders the files, then scans every
record in log order, replaying it into the in-memory index (live enqueues and
their locations, transactions, per-file counts). Payloads are not kept: a
message stays on disk until ``read(location)``. A scan ends in one of three
ways (``recovery.py``):

clean end
    a zero header with nothing but zeros after it, or the end of the file.
torn tail (``TornWrite``)
    damage in the last-written file after which no valid record follows, and
    which looks cut: a record running past the end of the file, or ending in
    zero bytes, or a zero header followed by stray bytes. The tail is zeroed
    from the damaged record on and the journal continues from there.
mid-log corruption (``CorruptRecord``)
    damage in any earlier file, or damage in the last file followed by a valid
    record (found by searching for the magic), or a final record whose bytes
    are all present but whose CRC does not match (a flipped byte), or a
    CRC-valid record with the wrong seq or a malformed body. Open raises
    ``CorruptRecord`` naming the file and offset and does not start.
    ``repair(directory)`` copies each damaged file to ``<name>.broken`` and
    truncates it at the last good record; a later open then succeeds.

The torn/corrupt line in the last file is a heuristic, as etcd's is: a flip
in the final record's *length* field makes it run past the data and look cut,
so that one kind of corruption is cut as a torn tail.

Per-record CRC versus a chained CRC
===================================

etcd chains its CRC: each record's CRC continues from the previous record's,
and each segment starts with a CRC record holding the running value. That
detects a record that is valid on its own but out of place (a stale record
left in a reused file, a file spliced from another log), at the cost of
having to read everything from the first file to verify anything, and of
making a random ``read(location)`` unable to verify its record alone.

Here each record has its own CRC, because the journal does random reads for
page-in (a message is read back long after it was written) and because files
are deleted out of order (``growing``) or overwritten (``ring``), so there is no
stable chain to continue. What a chain would catch is caught instead by the
sequence numbers: within a file they must increase by exactly one, and files
are ordered by their header seq. Reused ring files are zeroed, so stale records
cannot be mistaken for new ones.

Durability
==========

``enqueue``/``dequeue``/... write each record to its file at once
(``pwrite``, no buffer of our own) and do not fsync. The
broker calls ``sync()`` (from another thread, if it likes) to fsync the current
file; it returns the highest seq now durable, so one fsync can release the
RECEIPTs of many producers (group commit). There is no fsync policy in this
package: when to call ``sync()`` is the broker's decision.

Two fsyncs happen on their own, in the writing thread, because space must not
be reclaimed on the strength of records that are not yet durable: a file is
fsynced when the writer leaves it (so a ring file is reused only after the
dequeues that freed it are on disk), and garbage collection fsyncs the current
file before it deletes anything (so a crash cannot lose both the old copy of a
message, deleted, and the new one, never synced). Creating, renaming or
deleting a file is followed by an fsync of its directory.

Failures of the file system
===========================

Every file operation goes through one seam (``fileio.py``), which tests
replace to fail any call. A full disk (ENOSPC, EDQUOT) refuses the one
operation with ``StoreFull`` and leaves the files as they were, a record cut
short by it zeroed again; files of the ``growing`` layout and of the temp
store reserve their blocks (``fallocate``) a chunk ahead, and an enqueue leaves
the last 1/32 of a ``growing`` file (at most 1 MiB) to other records, so
dequeues can still be written, and files freed, while the disk is full. Anything else, and above all a failed fsync, is ``StoreFailed``:
final for the journal (PostgreSQL's and etcd's lesson, "fsyncgate": after a
failed fsync the data may be gone while the file reads back intact, so no
retry proves anything). What was durable before is what the next open
recovers.
"""

from storage.compact import compact
from storage.errors import (
    CorruptRecord,
    EnqueueThresholdExceeded,
    JournalFull,
    StorageError,
    StoreFailed,
    StoreFull,
    TornWrite,
)
from storage.fileio import FileOps, file_ops
from storage.journal import Journal
from storage.model import FileInfo, JournalConfig, Location, Pin, RecoveredRecord
from storage.recovery import RecoveryReport, RepairAction, repair
from storage.report import JournalReport, format_report, inspect
from storage.tempstore import TempHandle, TempStore
from storage.txlog import TransactionLog

__all__ = [
    "CorruptRecord",
    "EnqueueThresholdExceeded",
    "FileInfo",
    "FileOps",
    "Journal",
    "JournalConfig",
    "JournalFull",
    "JournalReport",
    "Location",
    "Pin",
    "RecoveredRecord",
    "RecoveryReport",
    "RepairAction",
    "StorageError",
    "StoreFailed",
    "StoreFull",
    "TempHandle",
    "TempStore",
    "TornWrite",
    "TransactionLog",
    "compact",
    "file_ops",
    "format_report",
    "inspect",
    "repair",
]
