"""What reclaiming files must not lose: the end of an old transaction, delivered markers.

Both layouts reclaim files: ``growing`` deletes garbage files, ``ring`` zeroes
the next file when the writer comes round to it. Each case is a row (etcd's
table tests): what is written, how far the writer moves on before and after a
reopen, and then both what the journal recovers and what happened to the files
that held the records in question ("kept", or "gone": deleted or reused), so a
case cannot silently stop exercising what it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from storage_helpers import reopened, small_config

from storage.journal import Journal
from storage.model import JournalConfig
from storage.record import HEADER_SIZE

MSG = b"m" * 100
PAIR = HEADER_SIZE + 4 + len(b"filler") + HEADER_SIZE + 10  # a filler pair, less its payload

Where = tuple[int, int]  # (file id, the seq of the file's header): one incarnation of a file
RING_FILES = 16  # a live message in the first file leaves room to move on a dozen files


@pytest.fixture
def config(tmp_path: Path, layout: str) -> JournalConfig:
    return small_config(tmp_path / "journal", layout, file_count=RING_FILES)


def advance(j: Journal, files: int) -> None:
    """Enqueue and dequeue traffic until the writer has rolled ``files`` times.

    The last pair of each file fills it exactly, so the writer always rolls on
    an enqueue: a dequeue rolled into the next file would ack a message of a
    file kept by a live message, and so keep that next file too.
    """
    for _ in range(files):
        start = j.current_file_id
        while j.current_file_id == start:
            current = next(f for f in j.files() if f.current)
            room = current.size - current.used
            fill = len(MSG) if room >= 2 * (PAIR + len(MSG)) or room < PAIR else room - PAIR
            j.dequeue(j.enqueue(b"filler", bytes(fill)).seq)


def file_of(j: Journal, seq: int) -> Where:
    """The file (this incarnation of it) holding the record ``seq``."""
    for f in j.files():
        if f.first_seq is not None and f.last_seq is not None and f.first_seq <= seq <= f.last_seq:
            return f.file_id, f.first_seq
    raise AssertionError(f"no file holds record {seq}")


def fate(j: Journal, where: Where) -> str:
    """What became of a file: "kept", or "gone" (deleted in growing, reused in ring)."""
    kept = any((f.file_id, f.first_seq) == where for f in j.files())
    return "kept" if kept else "gone"


# -- a txid reused after a reopen ----------------------------------------------------


@dataclass(frozen=True)
class Reuse:
    """The old transaction "t" is left open at a reopen, then "t" is used again.

    ``old``: what "t" did before the reopen (enqueue a message, dequeue the
    pin, or both); ``before``/``after``: files the writer moves on before the
    reopen and after it (before "t" is reused); ``consume``: the pin is
    dequeued after the reopen, so the old files may go; ``reopens``: opens
    between the abort and the reuse; ``fates``: what became of the file of the
    old records and of the file holding the abort written at the first open.
    """

    old: tuple[str, ...]
    before: int
    after: int
    consume: bool
    fates: tuple[str, str]
    reopens: int = 1


REUSE_CASES: dict[str, Reuse] = {
    "all in one file": Reuse(("enqueue",), 0, 0, False, ("kept", "kept")),
    # The property test's example: a live message keeps the old records' file;
    # the abort's file must be kept with it, or the new "t" adopts them.
    "abort in a later file, old records kept by a pin": Reuse(("enqueue",), 1, 2, False, ("kept", "kept")),
    "old dequeue, abort in a later file": Reuse(("dequeue",), 1, 2, False, ("kept", "kept")),
    "old enqueue and dequeue, abort in a later file": Reuse(("enqueue", "dequeue"), 1, 2, False, ("kept", "kept")),
    "reopened again before the reuse": Reuse(("enqueue", "dequeue"), 1, 2, False, ("kept", "kept"), reopens=3),
    # Round the whole ring, so that its files are reused too.
    "abort and old records both reclaimed": Reuse(("enqueue",), 1, RING_FILES + 1, True, ("gone", "gone")),
    "old records and abort in one file, reclaimed": Reuse(
        ("enqueue", "dequeue"), 0, RING_FILES + 1, True, ("gone", "gone")
    ),
    "reclaimed, then reopened before the reuse": Reuse(
        ("enqueue",), 1, RING_FILES + 1, True, ("gone", "gone"), reopens=2
    ),
}


@pytest.mark.parametrize("case", REUSE_CASES.values(), ids=REUSE_CASES.keys())
def test_a_txid_reused_after_reopen_adopts_nothing_of_the_old_transaction(config: JournalConfig, case: Reuse) -> None:
    j = Journal.open(config)
    pin = j.enqueue(b"q", b"pin")
    old_seqs = []
    if "enqueue" in case.old:
        old_seqs.append(j.enqueue(b"q", b"old", txid="t").seq)
    if "dequeue" in case.old:
        old_seqs.append(j.dequeue(pin.seq, txid="t"))
    old_file = file_of(j, old_seqs[0])
    assert {file_of(j, seq) for seq in old_seqs} == {old_file}
    advance(j, case.before)
    j.close()
    j = Journal.open(config)
    assert j.recovery.aborted_txids == (b"t",)
    abort_file = file_of(j, j.last_seq)  # the abort written at open
    for _ in range(case.reopens - 1):
        j.close()
        j = Journal.open(config)
        assert j.recovery.aborted_txids == ()
    if case.consume:
        j.dequeue(pin.seq)
    advance(j, case.after)
    assert (fate(j, old_file), fate(j, abort_file)) == case.fates
    new = j.enqueue(b"q", b"new", txid="t")
    j.commit("t")
    expected = ([] if case.consume else [(pin.seq, b"pin")]) + [(new.seq, b"new")]
    assert [(r.seq, r.payload) for r in j.recovered()] == expected
    j.close()
    assert [(r.seq, r.payload) for r in reopened(config)] == expected


# -- delivered markers -----------------------------------------------------------------


@dataclass(frozen=True)
class Marked:
    """A message marked delivered while the writer moves on and the journal reopens.

    ``steps`` run in order: ``"mark"`` marks the message, ``"advance N"`` moves
    the writer on N files, ``"reopen"`` closes and opens the journal, ``"tx
    roll"`` ends the current file with an enqueue of an open transaction (so
    nothing collects garbage before the next open), ``"commit"`` commits it.
    ``txid``: the message is an enqueue of that transaction (committed by a
    ``"commit"`` step). ``growing_fate``: what becomes of the file holding
    the first marker in a growing journal (a ring never reuses a file written
    after a live message).
    """

    steps: tuple[str, ...]
    growing_fate: str
    txid: str | None = None


MARKED_CASES: dict[str, Marked] = {
    "marker next to its message": Marked(("mark", "advance 3", "reopen"), "kept"),
    "marker's file goes": Marked(("advance 1", "mark", "advance 3"), "gone"),
    "marker's file goes, then a reopen": Marked(("advance 1", "mark", "advance 3", "reopen"), "gone"),
    "rewritten marker's file goes too": Marked(
        ("advance 1", "mark", "advance 2", "advance 3", "reopen", "advance 3"), "gone"
    ),
    "reopen, then the marker's file goes": Marked(("advance 1", "mark", "reopen", "advance 3", "reopen"), "gone"),
    "marked again in a later file": Marked(("advance 1", "mark", "advance 2", "mark", "advance 3"), "gone"),
    "marker's file goes at open": Marked(("advance 1", "mark", "tx roll", "reopen"), "gone"),
    "pending message's marker's file goes before the commit": Marked(
        ("advance 1", "mark", "advance 3", "commit", "advance 2"), "gone", txid="t"
    ),
    "pending message's marker survives a reopen after the commit": Marked(
        ("mark", "advance 2", "commit", "reopen", "advance 3"), "kept", txid="t"
    ),
}


@pytest.mark.parametrize("case", MARKED_CASES.values(), ids=MARKED_CASES.keys())
def test_delivered_markers_survive_file_reclaim_and_reopen(config: JournalConfig, case: Marked) -> None:
    j = Journal.open(config)
    msg = j.enqueue(b"q", b"marked", txid=case.txid)
    other = j.enqueue(b"q", b"not marked")
    first_marker: Where | None = None
    for step in case.steps:
        if step == "mark":
            seq = j.mark_delivered(msg.seq)
            first_marker = first_marker or file_of(j, seq)
        elif step.startswith("advance"):
            advance(j, int(step.split()[1]))
        elif step == "tx roll":
            start = j.current_file_id
            while j.current_file_id == start:
                j.enqueue(b"q", MSG, txid="roll")
        elif step == "commit":
            j.commit(str(case.txid))
        else:
            j.close()
            j = Journal.open(config)
    assert first_marker is not None
    expected_fate = case.growing_fate if config.layout == "growing" else "kept"
    assert fate(j, first_marker) == expected_fate
    expected = [(msg.seq, True), (other.seq, False)]
    assert [(r.seq, r.delivered) for r in j.recovered()] == expected
    j.close()
    assert [(r.seq, r.delivered) for r in reopened(config)] == expected
