"""The journal index's table of live enqueues (``storage/entries.py``) against a dict.

Rows come in seq order with gaps (other records take seqs too), sometimes out of
order; they are killed in any order, so compaction runs (its threshold is made
small here); every lookup, near the last one or far from it, must agree with
the dict.
"""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from storage import entries
from storage.entries import DEAD, LIVE, PENDING, EntryTable

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 5), st.sampled_from([LIVE, PENDING])),
        st.tuples(st.just("add_before"), st.integers(1, 50)),  # out of seq order
        st.tuples(st.just("kill"), st.integers(0, 1000)),
        st.tuples(st.just("find"), st.integers(-3, 400)),
    ),
    max_size=200,
)


@settings(max_examples=200, deadline=None)
@given(OPS, st.sampled_from([1, 4, 4096]))
def test_the_table_agrees_with_a_dict(ops: list[tuple], compact_min: int) -> None:
    table = EntryTable()
    model: dict[int, tuple[bytes, int, int, int, int]] = {}  # seq -> key, file, offset, length, state
    used: set[int] = set()
    last = 0
    with mock.patch.object(entries, "_COMPACT_MIN", compact_min):
        for op in ops:
            if op[0] == "add":
                last += op[1]
                row = (b"ab"[last % 2 :][:1], last % 3, last * 10, last + 7, op[2])
                table.add(last, *row)
                model[last] = row
                used.add(last)
            elif op[0] == "add_before":
                seq = last - op[1]
                if seq >= 1 and seq not in used:
                    table.add(seq, b"z", 9, seq, 1, LIVE)
                    model[seq] = (b"z", 9, seq, 1, LIVE)
                    used.add(seq)
            elif op[0] == "kill" and model:
                seq = sorted(model)[op[1] % len(model)]
                pos = table.find(seq)
                table.kill(pos)
                del model[seq]
            elif op[0] == "find":
                seq = op[1]
                pos = table.find(seq)
                if seq in model:
                    key, file_id, offset, length, state = model[seq]
                    assert pos >= 0 and table.seqs[pos] == seq
                    assert table.keys[table.key_ids[pos]] == key
                    assert (table.files[pos], table.offsets[pos], table.lengths[pos], table.states[pos]) == (
                        file_id, offset, length, state)
                else:
                    assert pos == -1
            assert len(table) == len(model)
        assert list(table.live_seqs()) == sorted(s for s, row in model.items() if row[4] == LIVE)
        assert [table.seqs[pos] for pos in table.rows()] == sorted(model)
        assert all(table.states[pos] != DEAD for pos in table.rows())


def test_a_duplicate_seq_is_refused() -> None:
    table = EntryTable()
    table.add(5, b"k", 0, 0, 1, LIVE)
    table.add(9, b"k", 0, 1, 1, LIVE)
    try:
        table.add(5, b"k", 0, 2, 1, LIVE)
    except ValueError:
        pass
    else:
        raise AssertionError("a second row for seq 5 was taken")


def test_a_value_too_wide_for_a_narrow_column_widens_it_and_loses_nothing() -> None:
    """Files and keys start as two-byte ids, offsets and lengths as four-byte
    numbers: the first value that does not fit widens that column, on append,
    on an out-of-order insert and through compaction."""
    table = EntryTable()
    table.add(1, b"k", 3, 100, 50, LIVE)
    narrow = table.nbytes()
    table.add(2, b"k", 70_000, 5 * 2**32 + 7, 2**32 + 1, LIVE)  # a file id, an offset and a length too wide
    table.add(4, b"k", 1, 2, 3, LIVE)
    table.add(3, b"k", 2**20, 2**40, 2**33, PENDING)  # out of order: an insert
    big = 2**32 + 9  # a seq too wide
    table.add(big, b"k", 5, 6, 7, LIVE)
    assert table.nbytes() > narrow
    assert {a.typecode for a in (table.seqs, table.files, table.offsets, table.lengths)} == {"q"}
    rows = {seq: (table.files[pos], table.offsets[pos], table.lengths[pos], table.states[pos])
            for seq in (1, 2, 3, 4, big) for pos in [table.find(seq)]}
    assert rows == {1: (3, 100, 50, LIVE), 2: (70_000, 5 * 2**32 + 7, 2**32 + 1, LIVE),
                    3: (2**20, 2**40, 2**33, PENDING), 4: (1, 2, 3, LIVE), big: (5, 6, 7, LIVE)}
    with mock.patch.object(entries, "_COMPACT_MIN", 0):
        table.kill(table.find(1))
        table.kill(table.find(4))  # dead rows do not outnumber the others yet ...
        table.kill(table.find(big))  # ... now they do: compaction keeps the wide columns
    assert table.dead == 0 and list(table.seqs) == [2, 3]
    assert [(table.files[pos], table.offsets[pos], table.lengths[pos]) for pos in (0, 1)] == [
        (70_000, 5 * 2**32 + 7, 2**32 + 1), (2**20, 2**40, 2**33)]


def test_the_65536th_key_widens_the_key_column() -> None:
    table = EntryTable()
    for seq in range(1, 65_538):
        table.add(seq, b"q%d" % seq, 0, seq, 1, LIVE)
    assert table.key_ids.typecode == "q"
    assert [table.keys[table.key_ids[table.find(seq)]] for seq in (1, 65_536, 65_537)] == [b"q1", b"q65536", b"q65537"]
