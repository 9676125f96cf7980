"""A connection's reading, writing, producing and fsync tables (``minibroker/connection/states.py``), in h11's manner:
every (state, event) pair, legal ones moving where the table below says, the others raising
``IllegalTransition`` and leaving the state as it was; then each machine driven through its
methods as the core drives it."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from minibroker.config import parse_config
from minibroker.connection import (
    PRODUCE_TRANSITIONS,
    READ_TRANSITIONS,
    SYNC_TRANSITIONS,
    WRITE_TRANSITIONS,
    IllegalTransition,
    ProduceEvent,
    ProduceState,
    Producing,
    ReadEvent,
    Reading,
    ReadState,
    Session,
    SyncEvent,
    SyncState,
    SyncWait,
    WriteEvent,
    WriteState,
    Writing,
)
from minibroker.edge import VirtualNetwork
from minibroker.errors import ProtocolError
from minibroker.frames import Frame
from minibroker.protocol import FrameParser

R, RE = ReadState, ReadEvent
W, WE = WriteState, WriteEvent
P, PE = ProduceState, ProduceEvent
Y, YE = SyncState, SyncEvent

# The tables written out again, by hand: a row added, dropped or changed in the module fails here.
READING_LEGAL = {
    (R.READING, RE.PAUSE): R.PAUSED,
    (R.READING, RE.RESUME_UNPAUSED): R.READING,
    (R.READING, RE.CLOSE): R.CLOSED,
    (R.PAUSED, RE.PAUSE): R.PAUSED,
    (R.PAUSED, RE.RESUME): R.PAUSED,
    (R.PAUSED, RE.RESUME_LAST): R.REPLAYING,
    (R.PAUSED, RE.RESUME_UNPAUSED): R.PAUSED,
    (R.PAUSED, RE.HOLD): R.PAUSED,
    (R.PAUSED, RE.CLOSE): R.CLOSED,
    (R.REPLAYING, RE.PAUSE): R.PAUSED,
    (R.REPLAYING, RE.RESUME_UNPAUSED): R.REPLAYING,
    (R.REPLAYING, RE.HOLD): R.REPLAYING,
    (R.REPLAYING, RE.DRAINED): R.READING,
    (R.REPLAYING, RE.CLOSE): R.CLOSED,
    (R.CLOSED, RE.RESUME_UNPAUSED): R.CLOSED,
}
WRITING_LEGAL = {
    (W.OPEN, WE.OUTBOX_FILLED): W.OUTBOX_FULL,
    (W.OPEN, WE.OUTBOX_TAKEN): W.OPEN,
    (W.OPEN, WE.SOCKET_BLOCKED): W.SOCKET_FULL,
    (W.OPEN, WE.CLOSE): W.CLOSED,
    (W.OUTBOX_FULL, WE.OUTBOX_TAKEN): W.OPEN,
    (W.OUTBOX_FULL, WE.SOCKET_BLOCKED): W.BOTH_FULL,
    (W.OUTBOX_FULL, WE.CLOSE): W.CLOSED,
    (W.SOCKET_FULL, WE.OUTBOX_FILLED): W.BOTH_FULL,
    (W.SOCKET_FULL, WE.OUTBOX_TAKEN): W.SOCKET_FULL,
    (W.SOCKET_FULL, WE.SOCKET_DRAINED): W.OPEN,
    (W.SOCKET_FULL, WE.CLOSE): W.CLOSED,
    (W.BOTH_FULL, WE.OUTBOX_TAKEN): W.SOCKET_FULL,
    (W.BOTH_FULL, WE.SOCKET_DRAINED): W.OUTBOX_FULL,
    (W.BOTH_FULL, WE.CLOSE): W.CLOSED,
    (W.CLOSED, WE.OUTBOX_FILLED): W.CLOSED,
    (W.CLOSED, WE.OUTBOX_TAKEN): W.CLOSED,
}
PRODUCING_LEGAL = {
    (P.FLOWING, PE.BLOCK): P.BLOCKED,
    (P.FLOWING, PE.CLOSE): P.CLOSED,
    (P.BLOCKED, PE.PARK): P.BLOCKED,
    (P.BLOCKED, PE.UNBLOCK): P.FLOWING,
    (P.BLOCKED, PE.CLOSE): P.CLOSED,
}
SYNC_LEGAL = {
    (Y.IDLE, YE.AWAIT): Y.AWAITING,
    (Y.AWAITING, YE.AWAIT): Y.AWAITING,
    (Y.AWAITING, YE.RELEASE): Y.AWAITING,
    (Y.AWAITING, YE.RELEASE_LAST): Y.IDLE,
    (Y.AWAITING, YE.DROP): Y.IDLE,
}


def test_the_module_tables_are_the_tables_written_here() -> None:
    assert READ_TRANSITIONS == READING_LEGAL
    assert WRITE_TRANSITIONS == WRITING_LEGAL
    assert PRODUCE_TRANSITIONS == PRODUCING_LEGAL
    assert SYNC_TRANSITIONS == SYNC_LEGAL


def _every_pair(states: type[enum.Enum], events: type[enum.Enum]) -> list[tuple[Any, Any]]:
    return list(itertools.product(states, events))


# Each machine, put in a state and given an event directly (the methods' checks are tested below).
MACHINES: dict[str, tuple[Callable[[], Any], dict[Any, Any], list[tuple[Any, Any]]]] = {
    "reading": (lambda: Reading(0.0), READING_LEGAL, _every_pair(ReadState, ReadEvent)),
    "writing": (lambda: Writing(0.0), WRITING_LEGAL, _every_pair(WriteState, WriteEvent)),
    "producing": (lambda: Producing(0.0), PRODUCING_LEGAL, _every_pair(ProduceState, ProduceEvent)),
    "fsync wait": (SyncWait, SYNC_LEGAL, _every_pair(SyncState, SyncEvent)),
}


def _reading_flags(r: Reading) -> None:
    assert r.paused is (r.state is R.PAUSED)
    assert r.holding is (r.state in (R.PAUSED, R.REPLAYING))


def _writing_flags(w: Writing) -> None:
    assert w.can_write is (w.state is W.OPEN)
    assert w.outbox_full is (w.state in (W.OUTBOX_FULL, W.BOTH_FULL))
    assert w.socket_full is (w.state in (W.SOCKET_FULL, W.BOTH_FULL))


#: What the plain attributes the per-message paths read must say after a move.
FLAGS: dict[str, Callable[[Any], None]] = {
    "reading": _reading_flags,
    "writing": _writing_flags,
    "producing": lambda p: None,
    "fsync wait": lambda s: None,
}
CASES = [(name, state, event) for name, (_, _, pairs) in MACHINES.items() for state, event in pairs]


@pytest.mark.parametrize(("machine", "state", "event"), CASES, ids=[f"{m}-{s.name}-{e.name}" for m, s, e in CASES])
def test_every_state_and_event(machine: str, state: Any, event: Any) -> None:
    make, legal, _ = MACHINES[machine]
    m = make()
    m.state = state
    if (state, event) in legal:
        m._fire(event)
        assert m.state is legal[state, event]
        FLAGS[machine](m)
    else:
        with pytest.raises(IllegalTransition) as caught:
            m._fire(event)
        assert (caught.value.machine, caught.value.state, caught.value.event) == (machine, state, event)
        assert f"{event.name} is not allowed in state {state.name}" in str(caught.value)
        assert m.state is state  # an illegal event changes nothing


def test_an_illegal_transition_is_a_bug_not_the_peers_fault() -> None:
    # It must propagate: the core turns ProtocolError (the peer's fault) into an ERROR frame.
    assert not issubclass(IllegalTransition, ProtocolError)
    assert issubclass(IllegalTransition, RuntimeError)


# ------------------------------------------------------------------ reading, through its methods


def frame(n: int) -> Frame:
    return Frame("SEND", {"destination": "/queue/q", "n": str(n)}, b"")


def test_reading_pauses_once_for_several_reasons_and_resumes_after_the_last() -> None:
    r = Reading(0.0)
    assert not r.paused and not r.holding
    assert r.pause("flow") is True  # the edge is told once...
    assert r.pause("store") is False  # ... not again for a second reason
    assert r.pause("store") is False  # nor for the same one again
    assert r.state is R.PAUSED and r.paused and r.holding and r.reasons == {"flow", "store"}
    assert r.resume("flow", 5.0) is False  # the store still keeps it unread
    assert r.state is R.PAUSED and r.reasons == {"store"} and r.resumed_at == 0.0
    assert r.resume("store", 7.0) is True
    assert r.state is R.REPLAYING and not r.paused and r.holding and r.resumed_at == 7.0
    assert r.drained() is None
    assert r.state is R.READING and not r.holding


def test_a_reason_that_was_not_pausing_ends_without_a_move() -> None:
    r = Reading(0.0)
    assert r.resume("flow", 1.0) is False  # a producer whose RECEIPT was withheld: never paused
    assert r.state is R.READING and r.resumed_at == 0.0
    r.pause("store")
    assert r.resume("flow", 2.0) is False
    assert r.state is R.PAUSED and r.reasons == {"store"}


def test_held_frames_and_the_error_after_them_wait_for_the_replay() -> None:
    r = Reading(0.0)
    r.pause("flow")
    r.hold([frame(1), frame(2)])
    r.hold([frame(3)])
    error = ProtocolError("bad frame")
    r.hold_error(error)
    r.resume("flow", 1.0)
    r.hold([frame(4)])  # read while replaying: behind the held ones
    assert [f.headers["n"] for f in r.held] == ["1", "2", "3", "4"]
    r.held.clear()  # (the core handles them)
    assert r.drained() is error
    assert r.held_error is None and r.state is R.READING


def test_nothing_is_held_while_reading_or_after_the_close() -> None:
    r = Reading(0.0)
    with pytest.raises(IllegalTransition):
        r.hold([frame(1)])  # a frame read while reading is handled at once
    with pytest.raises(IllegalTransition):
        r.hold_error(ProtocolError("x"))
    r.pause("flow")
    r.close()
    with pytest.raises(IllegalTransition):
        r.hold([frame(1)])


def test_drained_only_after_a_resume() -> None:
    r = Reading(0.0)
    with pytest.raises(IllegalTransition):
        r.drained()
    r.pause("login")
    with pytest.raises(IllegalTransition):
        r.drained()


def test_the_close_drops_what_was_held_and_nothing_starts_again() -> None:
    r = Reading(0.0)
    r.pause("flow")
    r.pause("store")
    r.hold([frame(1)])
    r.hold_error(ProtocolError("late"))
    r.close()
    assert r.state is R.CLOSED and not r.paused and not r.holding
    assert not r.reasons and not r.held and r.held_error is None
    assert r.resume("store", 1.0) is False  # a slow store's timer after the close: let through
    with pytest.raises(IllegalTransition):
        r.pause("flow")
    with pytest.raises(IllegalTransition):
        r.close()


# ------------------------------------------------------------------ writing, through its methods


def test_writes_wait_for_the_outbox_and_for_the_socket_independently() -> None:
    w = Writing(0.0)
    w.outbox_filled()
    assert w.state is W.OUTBOX_FULL and not w.can_write and w.outbox_full
    w.socket_blocked(3.0)
    assert w.state is W.BOTH_FULL and w.socket_full and w.blocked_since == 3.0
    w.outbox_taken()
    assert w.state is W.SOCKET_FULL and not w.can_write  # the socket still holds it back
    w.socket_drained()
    assert w.state is W.OPEN and w.can_write


def test_the_edge_reports_a_socket_full_or_drained_only_as_it_changes() -> None:
    w = Writing(0.0)
    with pytest.raises(IllegalTransition):
        w.socket_drained()
    w.socket_blocked(1.0)
    with pytest.raises(IllegalTransition):
        w.socket_blocked(2.0)
    assert w.blocked_since == 1.0  # the illegal report changed nothing


def test_a_closed_connection_is_given_nothing_more() -> None:
    w = Writing(0.0)
    w.close()
    w.outbox_filled()  # the ERROR written before the close
    w.outbox_taken()
    assert w.state is W.CLOSED and not w.can_write
    for report in (w.socket_drained, lambda: w.socket_blocked(1.0), w.close):
        with pytest.raises(IllegalTransition):
            report()


def _session(limit: int) -> tuple[Session, list[Session]]:
    told: list[Session] = []
    return Session(1, "peer", FrameParser(), 0.0, limit, told.append), told


def test_a_session_outbox_at_its_limit_stops_dispatch_until_taken() -> None:
    session, told = _session(10)
    session.write(b"12345")
    assert told == [session] and session.writing.can_write
    session.write(b"67890")  # 10 bytes: the limit
    assert session.writing.state is W.OUTBOX_FULL
    session.write(b"more")  # past it: no second OUTBOX_FILLED (it would be illegal)
    assert session.take_output() == b"1234567890more"
    assert session.writing.state is W.OPEN and session.out_bytes == 0


def test_a_framing_session_takes_its_outbox_frame_by_frame_with_the_same_moves() -> None:
    session, _ = _session(4)
    session.writing.socket_blocked(0.0)
    session.write(b"ab")
    session.write(b"cd")
    assert session.writing.state is W.BOTH_FULL
    assert session.take_frames() == [b"ab", b"cd"]
    assert session.writing.state is W.SOCKET_FULL


# ------------------------------------------------------------------ producing, through its methods


def test_the_first_parked_send_blocks_the_producer_and_the_rest_queue_behind_it() -> None:
    p = Producing(0.0)
    assert p.park("send 1", 2.0) is True  # blocked now: listed, warned, traced once
    assert p.park("send 2", 3.0) is False
    assert p.state is P.BLOCKED and list(p.parked) == ["send 1", "send 2"] and p.blocked_since == 2.0
    p.parked.clear()  # (the broker lets them in as room comes)
    p.unblock()
    assert p.state is P.FLOWING
    with pytest.raises(IllegalTransition):
        p.unblock()  # a producer that was not blocked cannot be let go


def test_a_producer_whose_parked_sends_all_went_stays_blocked_until_let_go() -> None:
    # A parked SEND refused after its timeout empties the queue before the broker's next pass:
    # a SEND parked then joins the same block (not a second one).
    p = Producing(0.0)
    p.park("send 1", 1.0)
    p.parked.clear()
    assert p.park("send 2", 2.0) is False
    assert p.state is P.BLOCKED and p.blocked_since == 1.0


def test_the_close_drops_the_parked_sends_and_nothing_parks_after_it() -> None:
    p = Producing(0.0)
    p.park("send 1", 1.0)
    p.close()
    assert p.state is P.CLOSED and not p.parked
    with pytest.raises(IllegalTransition):
        p.park("send 2", 2.0)
    with pytest.raises(IllegalTransition):
        p.close()


# ------------------------------------------------------------------ fsync wait, through its methods


def test_receipts_wait_for_the_fsync_and_are_let_go_one_by_one() -> None:
    s = SyncWait()
    s.wait()
    s.wait()
    assert s.state is Y.AWAITING and s.count == 2
    s.release()
    assert s.state is Y.AWAITING and s.count == 1
    s.release()
    assert s.state is Y.IDLE and s.count == 0
    with pytest.raises(IllegalTransition):
        s.release()  # one more released than waited: the count never goes below zero
    assert s.count == 0


def test_the_close_drops_the_waiting_receipts() -> None:
    s = SyncWait()
    with pytest.raises(IllegalTransition):
        s.drop()  # nothing waits: the close has nothing to drop
    s.wait()
    s.wait()
    s.drop()
    assert s.state is Y.IDLE and s.count == 0


# ------------------------------------------------------------------ the broker, driven by the edge


def test_a_producer_blocked_without_receipts_is_paused_then_read_again_when_memory_frees() -> None:
    doc = {
        "system_usage": {"memory_limit": "64 kb"},
        "destination_policy": [{"queue": ">", "pending_cursor": "vm"}],
    }
    net = VirtualNetwork(parse_config(doc))
    p = net.connected_client("p")
    for _ in range(40):  # about 80 KiB for a 64 KiB broker: memory fills part way
        p.send("/queue/full", "x" * 976)
    session = net.broker.sessions[p.sid]
    assert session.reading.state is R.PAUSED and session.reading.reasons == {"flow"}
    assert session.producing.state is P.BLOCKED and session.producing.parked
    assert p.reading_paused  # the edge was told: the SENDs after the one that blocked it wait, unread
    c = net.connected_client("c")
    c.subscribe("/queue/full")  # takes them all, freeing the memory
    assert session.reading.state is R.READING and not session.reading.held
    assert session.producing.state is P.FLOWING
    assert len(c.messages()) == 40


def test_an_edge_reporting_a_socket_drained_that_was_never_full_is_a_bug_that_raises() -> None:
    net = VirtualNetwork(parse_config({}))
    c = net.connected_client("c")
    with pytest.raises(IllegalTransition, match="SOCKET_DRAINED is not allowed in state OPEN"):
        net.broker.set_writable(c.sid, True)
    net.broker.set_writable(c.sid, False)
    assert net.broker.sessions[c.sid].writing.state is W.SOCKET_FULL
    net.broker.set_writable(c.sid, True)
    assert net.broker.sessions[c.sid].writing.state is W.OPEN
