"""A store cursor's FIFO of numbers (``minibroker/destinations/seqfifo.py``) against a sorted list.

Entries are (broker seq, journal seq, expiry). Chunks of three entries, so that a few dozen messages make many chunks; with a
spill file only the first and the last chunk may stay in memory, and every
answer must still be the sorted list's.
"""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from minibroker.destinations import SeqFifo, seqfifo
from storage.spill import SpillFile

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.just(0)),
        st.tuples(st.just("add"), st.integers(0, 30)),  # how far back: out of order when > 0
        st.tuples(st.just("add_wide"), st.integers(0, 30)),  # a journal seq past 2**32
        st.tuples(st.just("add_expiring"), st.integers(0, 30)),  # an expiry: ms since the epoch
        st.tuples(st.just("drop"), st.integers(0, 8)),
        st.tuples(st.just("slice"), st.integers(0, 12)),
        st.tuples(st.just("without"), st.integers(0, 4)),
    ),
    min_size=20,
    max_size=150,
)


@settings(max_examples=300, deadline=None)
@given(OPS, st.booleans())
def test_the_fifo_answers_as_a_sorted_list(ops: list[tuple], spilling: bool) -> None:
    spill = SpillFile()
    with mock.patch.object(seqfifo, "CHUNK", 3):
        fifo = SeqFifo((lambda: spill) if spilling else None)
        model: list[tuple[int, int, int]] = []
        used: set[int] = set()  # seqs are never reused
        seq = 100
        for op in ops:
            if op[0] in ("add", "add_wide", "add_expiring"):
                seq += 1
                s = seq - op[1]
                if s in used:
                    continue
                used.add(s)
                ref = s * 7 + (2**32 if op[0] == "add_wide" else 0)
                expires = 1_700_000_000_000 + s if op[0] == "add_expiring" else 0
                fifo.add(s, ref, expires)
                model.append((s, ref, expires))
                model.sort()
            elif op[0] == "drop":
                gone = fifo.slice(op[1])[0]
                assert fifo.drop(op[1]) == len(gone) == len(model[: op[1]])
                assert list(gone) == [p[0] for p in model[: op[1]]]
                del model[: op[1]]
            elif op[0] == "slice":
                seqs, refs, expires = fifo.slice(op[1])
                assert list(zip(seqs, refs, expires, strict=True)) == model[: op[1]]
            else:
                fifo = fifo.without({p[0] for p in model if p[0] % 5 == op[1]})
                model = [p for p in model if p[0] % 5 != op[1]]
            assert len(fifo) == len(model)
            assert list(fifo.entries()) == model
            chunks = len(fifo._chunks)
            in_memory = chunks - fifo.spilled()
            assert in_memory <= (2 if spilling else chunks)
            if spilling and chunks > 2:
                assert fifo.spilled() >= 1
            # the spill file holds the spilled chunks and nothing else: freed slots are given back
            assert spill.size - spill.waste == sum(c.slot[1] for c in fifo._chunks if c.slot is not None)
    spill.close()
