"""Compaction: rewrite stranded messages next to each other (the workaround for
Qpid's enqueue threshold).

Theory of operation. A few old messages, each alone in its file, can pin the
whole journal: in a ring they make the enqueue threshold refuse every new
message; in a growing journal they keep their files and every later file
holding acks for them. Red Hat's workaround is to consume the messages and
enqueue them again, in a transaction, so they land in adjacent places.

``compact`` does that inside the journal, in one transaction:

    for each message to move, in seq order:
        ENQUEUE   a new copy (txid T)         -- pending until the commit
        DELIVERED the copy, if the old one was delivered
        DEQUEUE   the old copy (txid T)       -- effective only at the commit
    TX_COMMIT T

A crash before the TX_COMMIT is durable leaves only old copies live (recovery
discards T); after it, only new copies. Neither loses nor duplicates a message.
The new copies go into the ring's reserve (the threshold is not applied: the
point is to get out of the state it refuses in); if even the reserve cannot
hold them, nothing is written.

The broker must replace its references: ``compact`` returns old seq -> new seq.
"""

from __future__ import annotations

import contextlib
import itertools

from storage.errors import StorageError
from storage.journal import Journal
from storage.record import HEADER_SIZE

__all__ = ["COMPACT_TXID_PREFIX", "compact"]

COMPACT_TXID_PREFIX = b"storage.compact:"


def _txid(journal: Journal) -> bytes:
    """A transaction id no open transaction of ``journal`` has, made from the journal alone
    (not from a process-wide counter), so the same history writes the same bytes."""
    for n in itertools.count(1):
        txid = COMPACT_TXID_PREFIX + f"{journal.last_seq}.{n}".encode()
        if txid not in journal.open_txids:
            return txid
    raise AssertionError("unreachable")


def compact(journal: Journal, *, preserve_order: bool = True) -> dict[int, int]:
    """Move the live messages stranded outside the current file; returns old -> new seq.

    Nothing happens unless some live message sits outside the current write
    file. With ``preserve_order`` (the default) every live message is moved,
    so log order (the order ``recovered()`` yields) stays the order of the
    messages; otherwise only the stranded ones move, after the others.
    Raises ``StorageError`` (before writing anything) if the journal cannot hold
    the copies; on any ``StorageError`` midway the transaction is aborted.
    """
    current = journal.current_file_id
    live = list(journal.recovered(payloads=False))
    if all(rec.location.file_id == current for rec in live):
        return {}
    moving = live if preserve_order else [r for r in live if r.location.file_id != current]
    txid = _txid(journal)
    dequeue_size = HEADER_SIZE + 10 + len(txid)
    needed = HEADER_SIZE + len(txid)  # the commit
    for rec in moving:
        needed += rec.location.length + len(txid) + dequeue_size
        needed += HEADER_SIZE + 8 if rec.delivered else 0
    room = journal.writable()
    if needed > room:
        raise StorageError(
            f"compaction needs {needed} bytes but only {room} can be written "
            f'to the journal of queue "{journal.config.queue_name}"'
        )
    mapping: dict[int, int] = {}
    try:
        for rec in moving:
            payload = journal.read(rec.location)
            copy = journal.enqueue(rec.key, payload, txid=txid, use_reserve=True)
            if rec.delivered:
                journal.mark_delivered(copy.seq)
            journal.dequeue(rec.seq, txid=txid)
            mapping[rec.seq] = copy.seq
        journal.commit(txid)
    except StorageError:
        if txid in journal.open_txids:
            with contextlib.suppress(StorageError):  # left open, recovery discards it
                journal.abort(txid)
        raise
    return mapping
