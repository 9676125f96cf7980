"""The store cursor's compact index of store-only messages against a sorted list.

``StoreIndex`` keeps two numbers a message (and sparse dicts for what is rarely
set); whatever it is asked, it must answer as a sorted list of ``PagedRef``
would: dispatch order (priority then seq, or seq), each message's journal
record, redelivered flag, expiry and temp store entry; and its runs of
numbers (a page-in's fast path) must be the same messages.
"""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.destinations import PagedRef, StoreIndex, seqfifo
from minibroker.durability import StoreRef
from storage.spill import SpillFile

HOME, OTHER = object(), object()  # two journals
KIND = st.sampled_from(["home", "home", "home", "spilled", "other journal"])
OPS = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"), st.integers(0, 3), st.integers(0, 9), st.booleans(), st.sampled_from([0, 0, 100, 200]), KIND
        ),
        st.tuples(st.just("take"), st.integers(0, 7)),
        st.tuples(st.just("expire"), st.sampled_from([50, 150, 250])),
        st.tuples(st.just("remove"), st.integers(0, 5)),
    ),
    max_size=80,
)


def described(r: PagedRef) -> tuple:
    """A ``PagedRef`` as comparable values (``StoreRef``s are made afresh each time)."""
    ref = (r.ref.journal, r.ref.seq, r.ref.key) if isinstance(r.ref, StoreRef) else r.ref
    return (ref, r.seq, r.priority, r.redelivered, r.expires)


@settings(max_examples=200, deadline=None)
@given(OPS, st.booleans(), st.booleans())
def test_the_index_answers_as_a_sorted_list(ops: list[tuple], prioritized: bool, spilling: bool) -> None:
    """In chunks of three pairs, kept in memory or (``spilling``) all but the
    first and the last of each FIFO in a spill file."""
    spill = SpillFile()
    index = StoreIndex(prioritized, (lambda: spill) if spilling else None)
    model: list[tuple] = []
    seq = 10
    home_set = False

    def order(r: tuple) -> tuple:
        return (-r[2], r[1]) if prioritized else (r[1],)

    with mock.patch.object(seqfifo, "CHUNK", 3):
        for op in ops:
            if op[0] == "add":
                _, back, priority, redelivered, expires, kind = op
                seq += 1
                s = seq - back * 5 if back and all(r[1] != seq - back * 5 for r in model) else seq
                if kind == "spilled":
                    ref = described_ref = 7000 + s  # a temp store entry's seq
                else:
                    # The index's home journal is its first StoreRef's: another journal's
                    # record can only come after one of HOME's.
                    journal = OTHER if kind == "other journal" and home_set else HOME
                    home_set = True
                    ref = StoreRef(journal, 1000 + s, "/queue/q")
                    described_ref = (journal, 1000 + s, "/queue/q")
                index.add(ref, s, priority, redelivered, expires)
                model.append((described_ref, s, priority if prioritized else 4, redelivered, expires))
                model.sort(key=order)
            elif op[0] == "take":
                assert [described(r) for r in index.first(op[1])] == model[: op[1]]
                runs = index.first_runs(op[1])
                if all(isinstance(r[0], tuple) and r[0][0] is HOME for r in model):  # the fast path's case
                    assert runs is not None
                    assert [
                        ((run.journal, journal_seq, run.key), seq, run.priority)
                        for run in runs
                        for seq, journal_seq in zip(run.seqs, run.journal_seqs, strict=True)
                    ] == [r[:3] for r in model[: op[1]]]
                else:  # a temp store entry, or another journal's record, is somewhere in the index
                    assert runs is None
                index.drop(op[1])
                del model[: op[1]]
            elif op[0] == "expire":
                gone = [r for r in model if 0 < r[4] <= op[1]]
                assert [described(r) for r in index.expired(op[1])] == gone
                model = [r for r in model if r not in gone]
            else:
                gone = [r for r in model if r[1] % 6 == op[1]]
                assert [described(r) for r in index.remove_where(lambda r, residue=op[1]: r.seq % 6 == residue)] == gone
                model = [r for r in model if r not in gone]
            assert [described(r) for r in index] == model
            assert len(index) == len(model) and bool(index) == bool(model)
            assert index.expiring == sum(1 for r in model if r[4])
            assert index.temps == sum(1 for r in model if isinstance(r[0], int))
            for fifo in index._fifos:  # the bound: two chunks in memory, at most 3 pairs (+ inserts) each
                in_memory = len(fifo._chunks) - fifo.spilled()
                assert in_memory <= (2 if spilling else len(fifo._chunks))
    spill.close()


def test_numbers_too_wide_for_four_bytes_and_spilled_entries_keep_their_values() -> None:
    """The FIFOs hold four-byte numbers while they fit; a seq past 2**32, a journal
    seq past it, or a spilled message (journal seq -1) widens them, losing nothing."""
    index = StoreIndex(False)
    big = 2**32 + 3
    index.add(StoreRef(HOME, 7, "/queue/q"), 5)
    index.add(StoreRef(HOME, 2**40, "/queue/q"), big)
    index.add(2**33, big + 1)  # a temp store entry, kept as -(2**33 + 1)
    index.add(StoreRef(HOME, 8, "/queue/q"), 6)  # out of order, among the wide numbers
    assert [described(r) for r in index.first(4)] == [
        ((HOME, 7, "/queue/q"), 5, 4, False, 0),
        ((HOME, 8, "/queue/q"), 6, 4, False, 0),
        ((HOME, 2**40, "/queue/q"), big, 4, False, 0),
        (2**33, big + 1, 4, False, 0),
    ]
    assert index.nbytes() == 4 * (2 * 8 + 4)  # the expiries (none) stay four bytes each
    spilled_first = StoreIndex(False)
    spilled_first.add(5, 1)  # a temp store entry, journal seq -6: the journal seqs widen, the broker seqs stay narrow
    spilled_first.add(StoreRef(HOME, 9, "/queue/q"), 2)
    assert spilled_first.nbytes() == 2 * 4 + 2 * 8 + 2 * 4
    assert [described(r) for r in spilled_first.first(2)] == [
        (5, 1, 4, False, 0),
        ((HOME, 9, "/queue/q"), 2, 4, False, 0),
    ]


def test_the_expiry_sweep_reads_the_index_only_when_a_message_may_be_due() -> None:
    """The index counts the messages that can expire and keeps a bound on the
    soonest: a sweep before it reads nothing; one after it takes what is due and
    moves the bound to the soonest left, even when a page-in took the soonest."""
    index = StoreIndex(False)
    for seq, expires in ((1, 300), (2, 0), (3, 100), (4, 200), (5, 400)):
        index.add(StoreRef(HOME, 10 + seq, "/queue/q"), seq, expires=expires)
    assert index.expiring == 4
    with mock.patch.object(StoreIndex, "remove_where", side_effect=AssertionError("read the index")):
        assert index.expired(99) == []
    assert [r.seq for r in index.expired(150)] == [3]
    assert index.expiring == 3
    with mock.patch.object(StoreIndex, "remove_where", side_effect=AssertionError("read the index")):
        assert index.expired(199) == []  # the bound moved to 200
    index.drop(1)  # a page-in takes seq 1 (expiring at 300): the bound stays at 200
    assert index.expiring == 2
    assert [r.seq for r in index.expired(250)] == [4]
    assert index.expired(350) == []  # the soonest left is 400
    assert [r.seq for r in index.expired(400)] == [5]
    assert index.expiring == 0 and [r.seq for r in index] == [2]


def test_a_sweep_drops_due_messages_at_the_head_without_rebuilding() -> None:
    """One time to live for all (expiries rising with the seqs): the due messages
    are each FIFO's head, and a sweep drops them there, reading only the expiry
    column, with no rebuild of the FIFOs (``remove_where``)."""
    index = StoreIndex(True)
    for seq in range(1, 11):
        index.add(StoreRef(HOME, 100 + seq, "/queue/q"), seq, priority=4 if seq % 2 else 7, expires=1000 + seq)
    with mock.patch.object(StoreIndex, "remove_where", side_effect=AssertionError("rebuilt the FIFOs")):
        due = index.expired(1006)
    assert [(r.seq, r.priority) for r in due] == [(2, 7), (4, 7), (6, 7), (1, 4), (3, 4), (5, 4)]
    assert index.expiring == 4 and [r.seq for r in index] == [8, 10, 7, 9]
    assert index.expired(1006) == []  # the bound moved to 1007
    assert [r.seq for r in index.expired(1008)] == [8, 7]
