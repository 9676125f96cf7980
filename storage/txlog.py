"""The decisions of transactions that span several journals.

Theory of operation
-------------------
In the ``ring`` layout every queue has its own journal, so a transaction that
sends to (or acknowledges on) two queues has records in two journals, and its
commit is two TX_COMMIT records, written one after the other. A crash between
them would commit the transaction in one queue and not the other. The Qpid
legacystore solves this with its transaction prepared list (TPL), a journal of
its own; this is the same idea, reduced to what one broker needs:

1. ``decide(txid)`` appends the txid to this log and fsyncs it *before* any
   participant's TX_COMMIT is written. That fsync is the commit point.
2. The participants' TX_COMMIT records follow, and become durable with the
   store's next sync.
3. Once they are durable, ``retire(txid)`` dequeues the decision (buffered:
   losing a retirement in a crash is harmless, see below).

At start, ``decided()`` gives the txids still in the log; each participant
journal is opened with them (``Journal.open(committed=...)``), and a
transaction it finds unfinished but decided is committed instead of aborted.
A decision whose participants all committed before the crash finds nothing
unfinished and is simply retired. Without a decision, every participant aborts:
the crash came before the commit point, and no TX_COMMIT was written yet.

The log is a ``growing`` journal (small files, deleted as decisions retire):
records are ENQUEUE (key ``tx``, payload the txid) and DEQUEUE. Transactions
within one journal (every transaction of the ``growing`` layout) never use it.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from storage.journal import Journal, TxId
from storage.model import JournalConfig

__all__ = ["TransactionLog"]

_KEY = b"tx"
_FILE_LENGTH = 1024 * 1024


class TransactionLog:
    """Durable commit decisions of multi-journal transactions, in ``directory``."""

    def __init__(self, directory: str | Path) -> None:
        self._journal = Journal.open(
            JournalConfig(directory=directory, layout="growing", name="txlog", max_file_length=_FILE_LENGTH)
        )
        self._live: dict[bytes, int] = {}
        for record in self._journal.recovered():
            assert record.payload is not None
            self._live[bytes(record.payload)] = record.location.seq

    @property
    def journal(self) -> Journal:
        """The journal the decisions are kept in."""
        return self._journal

    def decided(self) -> frozenset[bytes]:
        """The txids decided and not yet retired (at start: those a crash may have cut short)."""
        return frozenset(self._live)

    def decide(self, txid: TxId) -> None:
        """Make ``txid``'s commit durable: append its decision and fsync, before any TX_COMMIT."""
        t = txid.encode("utf-8") if isinstance(txid, str) else bytes(txid)
        location = self._journal.enqueue(_KEY, t)
        self._journal.sync()
        self._live[t] = location.seq

    def retire(self, txid: TxId) -> None:
        """Forget a decision whose participants' commits are durable (buffered, not fsynced)."""
        t = txid.encode("utf-8") if isinstance(txid, str) else bytes(txid)
        seq = self._live.pop(t, None)
        if seq is not None:
            self._journal.dequeue(seq)

    def sync(self) -> None:
        self._journal.sync()

    def close(self) -> None:
        """fsync and close the log."""
        self._journal.close()

    def __enter__(self) -> TransactionLog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
