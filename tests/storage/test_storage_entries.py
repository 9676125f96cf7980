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
