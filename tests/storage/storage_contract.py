"""The journal contract: one test class every layout must pass (CoilMQ's ``tests/store``).

A subclass provides the ``layout`` fixture; everything else comes from
``conftest.py`` (``config``, ``open_journal``). Nothing here knows which layout
it runs against.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import pytest
from storage_helpers import payloads

from storage.journal import Journal
from storage.model import JournalConfig, Location

Opener = Callable[[], Journal]


def body(n: int, size: int = 60) -> bytes:
    """A recognisable payload for message ``n``."""
    return (f"message {n} ".encode() * size)[:size]


class JournalContract:
    """Behaviour common to the ring and growing layouts."""

    def test_a_new_journal_is_empty(self, open_journal: Opener) -> None:
        j = open_journal()
        assert j.recovery.outcome == "new"
        assert list(j.recovered()) == []
        assert j.live_count == 0
        assert [f.current for f in j.files()].count(True) == 1

    def test_enqueue_returns_increasing_locations_and_read_returns_the_payload(self, open_journal: Opener) -> None:
        j = open_journal()
        locations = [j.enqueue(b"orders", body(n)) for n in range(5)]
        assert [loc.seq for loc in locations] == sorted({loc.seq for loc in locations})
        assert all(isinstance(loc, Location) for loc in locations)
        # read works on buffered (unflushed) records too
        assert [j.read(loc) for loc in locations] == [body(n) for n in range(5)]
        assert j.location(locations[2].seq) == locations[2]

    def test_read_seqs_equals_read_in_the_order_given_across_files_and_gaps(self, open_journal: Opener) -> None:
        """Batched page-in reads: records of several files, with dequeued records,
        delivered markers and another key's records between them, some still
        buffered; the answer is per location, in the order asked."""
        import random

        j = open_journal()
        locs = [j.enqueue(b"q1" if n % 3 else b"q2", body(n, 40 + n % 7)) for n in range(60)]
        for loc in locs[::4]:
            j.dequeue(loc.seq)
        for n in range(1, 60, 5):
            if n % 4:
                j.mark_delivered(locs[n].seq)
        live = [(n, loc) for n, loc in enumerate(locs) if n % 4]
        assert len({loc.file_id for _, loc in live}) > 1  # the batch spans files
        random.Random(7).shuffle(live)
        assert (
            j.read_seqs([loc.seq for _, loc in live])
            == [body(n, 40 + n % 7) for n, _ in live]
            == [j.read(loc) for _, loc in live]
        )
        assert j.read_seqs([]) == []
        with pytest.raises(KeyError):
            j.read_seqs([live[0][1].seq, locs[0].seq])  # locs[0] was dequeued
        # Neighbouring rows in order (a page-in's usual run: its columns are taken as slices) ...
        assert j.read_seqs([locs[n].seq for n in (1, 2, 3)]) == [body(n, 40 + n % 7) for n in (1, 2, 3)]
        ordered = sorted(loc.seq for _, loc in live)
        assert j.read_seqs(ordered) == [j.read(j.location(seq)) for seq in ordered]
        with pytest.raises(KeyError):  # ... but not past a dead one among them
            j.read_seqs([locs[n].seq for n in (3, 4, 5)])

    def test_read_seqs_names_a_damaged_record_and_fails_the_journal(
        self, open_journal: Opener, config: JournalConfig
    ) -> None:
        """A record read back damaged is a store failure (fail-stop, as a read error):
        it names the record, and the journal refuses every operation after it."""
        from storage_helpers import flip

        from storage.errors import CorruptRecord, StoreFailed

        j = open_journal()
        locs = [j.enqueue(b"q", body(n)) for n in range(4)]
        j.flush()
        assert j.read_seqs([locs[3].seq, locs[0].seq]) == [body(3), body(0)]
        name = next(f.name for f in j.files() if f.file_id == locs[2].file_id)
        flip(config.directory / name, locs[2].offset + locs[2].length - 3)
        with pytest.raises(StoreFailed, match=f"at offset {locs[2].offset}.*crc") as failed:
            j.read_seqs([loc.seq for loc in locs])
        assert isinstance(failed.value.error, CorruptRecord)
        assert j.failed is failed.value

    def test_reopen_recovers_live_messages_in_order_with_keys(self, open_journal: Opener) -> None:
        j = open_journal()
        locs = [j.enqueue(b"q1" if n % 2 else "q2", body(n)) for n in range(10)]
        for loc in locs[::3]:
            j.dequeue(loc.seq)
        j.close()
        again = open_journal()
        assert again.recovery.outcome == "clean"
        recovered = list(again.recovered())
        assert [r.seq for r in recovered] == [loc.seq for i, loc in enumerate(locs) if i % 3]
        assert [r.payload for r in recovered] == [body(i) for i in range(10) if i % 3]
        assert [r.key for r in recovered] == [b"q1" if i % 2 else b"q2" for i in range(10) if i % 3]
        assert all(r.location == again.location(r.seq) for r in recovered)

    def test_recovered_without_payloads_leaves_messages_on_disk(self, open_journal: Opener) -> None:
        j = open_journal()
        loc = j.enqueue(b"q", body(1))
        j.close()
        rec = next(open_journal().recovered(payloads=False))
        assert rec.payload is None
        assert rec.location == loc

    def test_seqs_keep_increasing_across_reopen(self, open_journal: Opener) -> None:
        j = open_journal()
        first = j.enqueue(b"q", body(1))
        j.dequeue(first.seq)
        last = j.last_seq
        j.close()
        again = open_journal()
        assert again.enqueue(b"q", body(2)).seq > last

    def test_bad_dequeues_and_markers_are_refused_without_writing(self, open_journal: Opener) -> None:
        j = open_journal()
        loc = j.enqueue(b"q", body(1))
        j.dequeue(loc.seq)
        before = j.last_seq
        with pytest.raises(KeyError):
            j.dequeue(loc.seq)
        with pytest.raises(KeyError):
            j.dequeue(12345)
        with pytest.raises(KeyError):
            j.mark_delivered(loc.seq)
        with pytest.raises(KeyError):
            j.read(loc)
        assert j.last_seq == before

    def test_dequeue_many_is_dequeue_of_each_and_survives_reopen(self, open_journal: Opener) -> None:
        j = open_journal()
        locs = [j.enqueue(b"q1" if n % 2 else b"q2", body(n)) for n in range(30)]
        gone = [locs[n].seq for n in range(30) if n % 3]
        before = j.last_seq
        written = j.dequeue_many(gone)
        assert written == [before + 1]  # one record for them all: it fits the current file
        assert j.live_count == 10
        with pytest.raises(KeyError):
            j.read(locs[1])
        assert j.read(locs[3]) == body(3)
        j.close()
        again = open_journal()
        assert [r.seq for r in again.recovered()] == [locs[n].seq for n in range(0, 30, 3)]
        assert again.live_count == 10

    def test_dequeue_many_refuses_a_bad_batch_without_writing(self, open_journal: Opener) -> None:
        j = open_journal()
        locs = [j.enqueue(b"q", body(n)) for n in range(4)]
        j.dequeue(locs[0].seq)
        before = j.last_seq
        for bad in (
            [locs[1].seq, locs[0].seq],  # one already dequeued
            [locs[1].seq, 12345],  # one never enqueued
            [locs[1].seq, locs[2].seq, locs[1].seq],
        ):  # one given twice
            with pytest.raises(KeyError):
                j.dequeue_many(bad)
        assert j.last_seq == before and j.live_count == 3
        assert j.dequeue_many([]) == []

    def test_dequeue_many_records_never_span_files(self, open_journal: Opener, config: JournalConfig) -> None:
        """A batch bigger than the room left in the current file is cut there: every
        record still lies in one file, and a reopen replays them all."""
        from storage.record import HEADER_SIZE

        j = open_journal()
        per_file = config.file_size if config.layout == "ring" else config.max_file_length
        count = per_file // 8 + 50  # its seqs alone are more than a file holds
        locs = [j.enqueue(b"q", b"") for _ in range(count)]
        seqs = [loc.seq for loc in locs]
        j.dequeue(seqs[0])  # the ring must be able to reuse the files of the oldest
        records = j.dequeue_many(seqs[1:-1])
        assert len(records) >= 2
        assert all(f.used <= f.size for f in j.files())
        assert j.live_count == 1
        j.close()
        again = open_journal()
        assert [r.seq for r in again.recovered()] == [seqs[-1]]
        assert HEADER_SIZE + 8 * count > per_file

    def test_delivered_marker_survives_reopen(self, open_journal: Opener) -> None:
        j = open_journal()
        a, b, c = (j.enqueue(b"q", body(n)) for n in range(3))
        j.mark_delivered(b.seq)
        j.mark_delivered(c.seq)
        j.dequeue(c.seq)
        j.close()
        assert [(r.seq, r.delivered) for r in open_journal().recovered()] == [
            (a.seq, False),
            (b.seq, True),
        ]

    def test_transactional_enqueues_count_only_after_commit(self, open_journal: Opener) -> None:
        j = open_journal()
        plain = j.enqueue(b"q", body(0))
        committed = j.enqueue(b"q", body(1), txid="t1")
        j.enqueue(b"q", body(2), txid=b"t2")
        assert j.live_count == 1
        j.commit("t1")
        j.abort(b"t2")
        j.enqueue(b"q", body(3), txid="t3")  # never finished
        j.close()
        again = open_journal()
        assert [r.seq for r in again.recovered()] == [plain.seq, committed.seq]
        assert again.recovery.aborted_txids == (b"t3",)

    def test_transactional_dequeues_count_only_after_commit(self, open_journal: Opener) -> None:
        j = open_journal()
        a, b, c = (j.enqueue(b"q", body(n)) for n in range(3))
        j.dequeue(a.seq, txid="t1")
        j.dequeue(b.seq, txid="t2")
        j.dequeue(c.seq, txid="t3")
        assert j.live_count == 3
        j.commit("t1")
        j.abort("t2")
        j.close()
        assert [r.seq for r in open_journal().recovered()] == [b.seq, c.seq]

    def test_a_transaction_may_dequeue_what_it_enqueued(self, open_journal: Opener) -> None:
        """A message sent and consumed inside one transaction (a broker's COMMIT that
        delivers its own send to an auto-ack consumer): nothing of it counts before the
        commit, nothing is left after it, and an abort drops both."""
        j = open_journal()
        kept = j.enqueue(b"q", body(0))
        for txid, end in (("t1", j.commit), ("t2", j.abort)):
            sent = j.enqueue(b"q", body(1), txid=txid)
            j.dequeue(sent.seq, txid=txid)
            assert j.live_count == 1
            end(txid)
            assert j.live_count == 1
        other = j.enqueue(b"q", body(2), txid="t3")
        with pytest.raises(KeyError):
            j.dequeue(other.seq, txid="t4")  # another transaction's pending enqueue
        with pytest.raises(KeyError):
            j.dequeue(other.seq)  # nor outside any transaction
        j.close()
        assert [r.seq for r in open_journal().recovered()] == [kept.seq]

    def test_a_reused_txid_does_not_adopt_an_unfinished_transaction(self, open_journal: Opener) -> None:
        j = open_journal()
        j.enqueue(b"q", body(1), txid="tx")
        j.close()  # "tx" is unfinished: discarded (and aborted) at the next open
        again = open_journal()
        fresh = again.enqueue(b"q", body(2), txid="tx")
        again.commit("tx")
        again.close()
        assert [r.seq for r in open_journal().recovered()] == [fresh.seq]

    def test_an_unfinished_transaction_decided_elsewhere_is_committed_at_open(
        self, open_journal: Opener, config: JournalConfig
    ) -> None:
        j = open_journal()
        decided = j.enqueue(b"q", body(1), txid="decided")
        j.enqueue(b"q", body(2), txid="undecided")
        j.close()  # a crash before either TX_COMMIT
        again = Journal.open(config, committed={"decided"})
        assert again.recovery.committed_txids == (b"decided",)
        assert again.recovery.aborted_txids == (b"undecided",)
        assert [r.seq for r in again.recovered()] == [decided.seq]
        again.close()
        # the commit written at open is a record like any other: the next open needs no decision
        assert [r.seq for r in open_journal().recovered()] == [decided.seq]

    def test_sync_returns_the_highest_durable_seq(self, open_journal: Opener) -> None:
        j = open_journal()
        j.enqueue(b"q", body(1))
        loc = j.enqueue(b"q", body(2))
        assert j.sync() == loc.seq == j.durable_seq
        assert j.sync() == loc.seq  # nothing new: no fsync needed, same answer
        j.flush()

    def test_sync_from_another_thread_while_appending(self, open_journal: Opener) -> None:
        j = open_journal()
        done = threading.Event()
        synced: list[int] = []
        errors: list[BaseException] = []

        def syncer() -> None:
            try:
                while not done.is_set():
                    synced.append(j.sync())
            except BaseException as err:  # noqa: BLE001 - reported below
                errors.append(err)

        thread = threading.Thread(target=syncer)
        thread.start()
        locs = []
        for n in range(300):
            locs.append(j.enqueue(b"q", body(n, 20)))
            if n % 2:
                j.dequeue(locs[n - 1].seq)
        done.set()
        thread.join()
        assert errors == []
        assert synced == sorted(synced)  # durable seqs never go back
        assert j.sync() == j.last_seq
        j.close()
        assert payloads(open_journal()) == [body(n, 20) for n in range(300) if n % 2]

    def test_many_messages_roll_across_files(self, open_journal: Opener) -> None:
        j = open_journal()
        locs = [j.enqueue(b"q", body(n)) for n in range(120)]
        for loc in locs[:100]:
            j.dequeue(loc.seq)
        assert len({loc.file_id for loc in locs}) > 1
        expected = [body(n) for n in range(100, 120)]
        assert payloads(j) == expected
        j.close()
        again = open_journal()
        assert payloads(again) == expected
        more = again.enqueue(b"q", body(999))
        assert again.read(more) == body(999)

    def test_files_report_live_counts_and_pins(self, open_journal: Opener) -> None:
        j = open_journal()
        locs = [j.enqueue(b"q", body(n)) for n in range(40)]
        for loc in locs[1:]:
            j.dequeue(loc.seq)
        files = j.files()
        assert sum(f.live for f in files) == j.live_count == 1
        home = next(f for f in files if f.file_id == locs[0].file_id)
        assert [(p.seq, p.key) for p in home.pins] == [(locs[0].seq, b"q")]
        assert [f.current for f in files].count(True) == 1
        assert all(f.used <= f.size for f in files)

    def test_disk_usage_is_the_size_of_the_files_on_disk(self, open_journal: Opener, config: JournalConfig) -> None:
        j = open_journal()
        for n in range(60):
            j.enqueue(b"q", body(n))
        on_disk = sum(os.path.getsize(config.path / f.name) for f in j.files())
        assert j.disk_usage() == on_disk > 0

    def test_a_record_larger_than_a_file_is_refused(self, open_journal: Opener) -> None:
        j = open_journal()
        before = j.last_seq
        with pytest.raises(ValueError, match="does not fit"):
            j.enqueue(b"q", bytes(1 << 20))
        assert j.last_seq == before

    def test_a_closed_journal_refuses_work(self, open_journal: Opener) -> None:
        j = open_journal()
        loc = j.enqueue(b"q", body(1))
        j.close()
        j.close()  # idempotent
        with pytest.raises(ValueError, match="closed"):
            j.enqueue(b"q", body(2))
        with pytest.raises(ValueError, match="closed"):
            j.dequeue(loc.seq)
        with pytest.raises(ValueError, match="closed"):
            j.sync()
