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
from storage.entries import LIVE, PENDING, EntryTable

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 5), st.sampled_from([LIVE, PENDING])),
        st.tuples(st.just("add_before"), st.integers(1, 50)),  # out of seq order
        st.tuples(st.just("kill"), st.integers(0, 1000)),
        st.tuples(st.just("find"), st.integers(-3, 400)),
    ),
    max_size=200,
)
#: Longer runs, with lookups of rows that exist: enough blocks of a few rows for most to be spilled.
LONG_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 3), st.sampled_from([LIVE, PENDING])),
        st.tuples(st.just("add"), st.integers(1, 3), st.just(LIVE)),
        st.tuples(st.just("add_before"), st.integers(1, 80)),
        st.tuples(st.just("kill"), st.integers(0, 1000)),
        st.tuples(st.just("find_row"), st.integers(0, 1000)),
        st.tuples(st.just("find"), st.integers(-3, 400)),
    ),
    min_size=60,
    max_size=300,
)


def row(table: EntryTable, pos: int) -> tuple[bytes, int, int, int, int]:
    """(key, file, offset, length, state) of the row at ``pos``."""
    seq, file_id, offset, length = table.location(pos)
    return table.key(pos), file_id, offset, length, table.state(pos)


@settings(max_examples=200, deadline=None)
@given(OPS, st.sampled_from([1, 4, 4096]))
def test_the_table_agrees_with_a_dict(ops: list[tuple], compact_min: int) -> None:
    """Blocks of 8,192 rows, all in memory."""
    with mock.patch.object(entries, "_COMPACT_MIN", compact_min):
        table = EntryTable()
        check_against_a_dict(table, ops)
        assert all(block.states is not None for block in table.blocks)


@settings(max_examples=300, deadline=None)
@given(LONG_OPS, st.sampled_from([1, 4, 4096]), st.sampled_from([(4, None), (4, 8), (3, 1)]))
def test_a_table_of_small_blocks_agrees_with_a_dict(
    ops: list[tuple], compact_min: int, blocks: tuple[int, int | None]
) -> None:
    """Blocks of 3 or 4 rows, all in memory or spilled to a file but for the few
    used last (``cache_rows``: at least four blocks stay)."""
    block_rows, cache_rows = blocks
    with (
        mock.patch.object(entries, "_COMPACT_MIN", compact_min),
        mock.patch.object(entries, "BLOCK_ROWS", block_rows),
        mock.patch.object(entries, "_SPLIT_ROWS", 2 * block_rows),
    ):
        table = EntryTable(cache_rows)
        check_against_a_dict(table, ops)
        in_memory = [block for block in table.blocks if block.states is not None]
        if cache_rows is None:
            assert len(in_memory) == len(table.blocks)
        else:  # the bound holds: no more blocks in memory than the cache takes
            assert len(in_memory) <= max(4, -(-cache_rows // block_rows))
            assert (table.spilled_bytes() > 0) == (len(in_memory) < len(table.blocks))
        table.close()


def check_against_a_dict(table: EntryTable, ops: list[tuple]) -> None:
    model: dict[int, tuple[bytes, int, int, int, int]] = {}  # seq -> key, file, offset, length, state
    used: set[int] = set()
    last = 0
    for op in ops:
        if op[0] == "add":
            last += op[1]
            values = (b"ab"[last % 2 :][:1], last % 3, last * 10, last + 7, op[2])
            table.add(last, *values)
            model[last] = values
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
        elif op[0] in ("find", "find_row"):
            seq = op[1] if op[0] == "find" or not model else sorted(model)[op[1] % len(model)]
            pos = table.find(seq)
            if seq in model:
                assert pos >= 0 and table.seq(pos) == seq
                assert row(table, pos) == model[seq]
            else:
                assert pos == -1
        assert len(table) == len(model)
    assert [seq for run in table.live_runs() for seq in run] == sorted(
        s for s, values in model.items() if values[4] == LIVE
    )
    assert [(seq, key, file_id) for seq, key, file_id in table.entries()] == [
        (seq, model[seq][0], model[seq][1]) for seq in sorted(model)
    ]
    for seq in sorted(model):  # every row again, in order: blocks read back one after another
        assert row(table, table.find(seq)) == model[seq]


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
    block = table.blocks[0]
    assert {a.typecode for a in (block.seqs, block.files, block.offsets, block.lengths)} == {"q"}
    rows = {seq: row(table, table.find(seq))[1:] for seq in (1, 2, 3, 4, big)}
    assert rows == {
        1: (3, 100, 50, LIVE),
        2: (70_000, 5 * 2**32 + 7, 2**32 + 1, LIVE),
        3: (2**20, 2**40, 2**33, PENDING),
        4: (1, 2, 3, LIVE),
        big: (5, 6, 7, LIVE),
    }
    with mock.patch.object(entries, "_COMPACT_MIN", 0):
        table.kill(table.find(1))
        table.kill(table.find(4))  # dead rows do not outnumber the others yet ...
        table.kill(table.find(big))  # ... now they do: compaction keeps the wide columns
    assert table.dead == 0 and list(table.blocks[0].seqs) == [2, 3]
    assert [row(table, table.find(seq))[1:4] for seq in (2, 3)] == [
        (70_000, 5 * 2**32 + 7, 2**32 + 1),
        (2**20, 2**40, 2**33),
    ]


def test_the_65536th_key_widens_the_key_column() -> None:
    table = EntryTable()
    for seq in range(1, 65_538):
        table.add(seq, b"q%d" % seq, 0, seq, 1, LIVE)
    assert table.blocks[-1].key_ids.typecode == "q"
    assert [table.key(table.find(seq)) for seq in (1, 65_536, 65_537)] == [b"q1", b"q65536", b"q65537"]


def test_the_live_walk_reads_each_spilled_block_once_and_survives_kills() -> None:
    """Recovery walks the live rows a block at a time: every spilled block is read
    back once (a find of the run's seqs lands in it), and rows killed meanwhile,
    ahead of the walk, are not given."""
    with mock.patch.object(entries, "BLOCK_ROWS", 4), mock.patch.object(entries, "_MIN_CACHE_BLOCKS", 1):
        table = EntryTable(cache_rows=1)
        for seq in range(1, 41):
            table.add(seq, b"k", 1, seq, 1, LIVE)
        spilled = sum(1 for block in table.blocks if block.states is None)
        assert spilled >= 7
        assert table._spill is not None
        reads = 0
        real_read = table._spill.read

        def counting_read(slot):  # type: ignore[no-untyped-def]
            nonlocal reads
            reads += 1
            return real_read(slot)

        table._spill.read = counting_read  # type: ignore[method-assign]
        given = []
        for run in table.live_runs():
            for seq in run:
                pos = table.find(seq, LIVE)
                if pos < 0:
                    continue
                given.append(seq)
                if seq % 10 == 1 and seq + 4 <= 40:  # kill a row of the next block, ahead of the walk
                    table.kill(table.find(seq + 4))
        assert given == [s for s in range(1, 41) if not (s % 10 == 5 and s - 4 <= 36)]
        assert reads <= spilled + 1


def test_a_spill_file_whose_slots_are_all_free_is_emptied() -> None:
    """A drained backlog leaves no scratch bytes behind: once every slot is free,
    the file is truncated and starts again; until then freed slots are reused."""
    import os

    from storage.spill import SpillFile

    spill = SpillFile()
    try:
        a, b = spill.write(b"a" * 100), spill.write(b"b" * 100)
        spill.free(a)
        assert (spill.size, spill.waste) == (200, 100)
        c = spill.write(b"c" * 100)
        assert c[0] == a[0] and spill.read(b) == b"b" * 100  # a's slot reused
        spill.free(b)
        spill.free(c)
        assert (spill.size, spill.waste) == (0, 0) and os.fstat(spill._fd).st_size == 0
        assert spill.read(spill.write(b"d" * 10)) == b"d" * 10
    finally:
        spill.close()
