"""The edge contract: events do the work, ``take_actions`` only drains the outbox.

Each event (bytes read, a timer, an fsync done ...) finishes its work before it
returns, down to what its frames left for the end of the batch: the store's
deferred dequeues written as one record, RECEIPTs released, the output joined.
The drain hands over what is ready and does nothing else. The disk is reached
only through the storage objects the edge chose the places of: the journals
(``store``) and the temp store (``temp_dir``).
"""

from __future__ import annotations

import ast
import errno
import inspect
from pathlib import Path

from disk_faults import FaultyFileOps
from minibroker.config import parse_config
from minibroker.connection import ManualClock
from minibroker.core import Broker, Shutdown, Write
from minibroker.durability import MessageStore
from minibroker.edge import VirtualNetwork
from storage.fileio import using

CONNECT = b"CONNECT\naccept-version:1.2\nhost:x\n\n\x00"


def _subscribe(destination: str, ack: str = "auto", sub_id: str = "1") -> bytes:
    return f"SUBSCRIBE\nid:{sub_id}\ndestination:{destination}\nack:{ack}\n\n\x00".encode()


def _journal_writes(ops: FaultyFileOps, since: int = 0) -> int:
    """The writes to journal files among the file operations since call ``since``."""
    return sum(1 for op, path in ops.calls[since:] if op == "pwrite" and "/journal/" in path)


def _messages(actions: list, session: int) -> int:
    return sum(a.data.count(b"MESSAGE\n") for a in actions if type(a) is Write and a.session == session)


def test_an_event_does_the_store_s_work_and_the_drain_touches_no_file(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    with using(ops):
        net = VirtualNetwork(data_dir=tmp_path / "data")
        producer = net.connected_client("p")
        for i in range(3):
            producer.send("/queue/d", f"m{i}", persistent="true", receipt=f"r{i}")
        broker = net.broker
        journal = broker.store.journal_for("/queue/d")
        consumer = broker.open_session("c")
        before = len(ops.calls)
        broker.receive_data(consumer, CONNECT + _subscribe("/queue/d"))
        # The event consumed the three (auto ack) and wrote their dequeues, as one record,
        # before it returned: nothing is left for the drain to do.
        assert broker.store.deferred == 0 and journal.live_count == 0
        assert _journal_writes(ops, before) == 1
        at_drain = len(ops.calls)
        actions = broker.take_actions()
        assert _messages(actions, consumer) == 3
        assert broker.take_actions() == []
        assert ops.calls[at_drain:] == []  # neither drain reached the disk


def test_a_second_drain_with_no_event_between_gives_nothing(tmp_path: Path) -> None:
    """A consumer whose outbox filled gets more only once the edge says it carried
    out the writes (``actions_done``): draining again is not that event."""
    config = parse_config({"transport": {"write_buffer_limit": 4096}})
    broker = Broker(config, ManualClock(), temp_dir=tmp_path / "tmp")
    producer, consumer = broker.open_session("p"), broker.open_session("c")
    broker.receive_data(producer, CONNECT)
    body = b"x" * 500
    sends = b"".join(b"SEND\ndestination:/queue/q\ncontent-length:500\n\n" + body + b"\x00" for _ in range(20))
    broker.receive_data(producer, sends)
    broker.receive_data(consumer, CONNECT + _subscribe("/queue/q"))
    first = _messages(broker.take_actions(), consumer)
    assert 0 < first < 20  # the outbox's half of write_buffer_limit held the rest back
    assert broker.take_actions() == []
    received = first
    for _ in range(20):
        more = broker.actions_done()
        actions = broker.take_actions()
        assert more == bool(actions)  # it says whether there is anything to drain
        if not actions:
            break
        received += _messages(actions, consumer)
    assert received == 20
    assert broker.destinations["/queue/q"].dequeued == 20


def test_the_dequeues_of_one_read_are_one_write_and_of_one_turn_too(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    with using(ops):
        net = VirtualNetwork(data_dir=tmp_path / "data")
        producer = net.connected_client("p")
        for i in range(20):
            producer.send("/queue/d", f"m{i}", persistent="true")
        first, second = net.connected_client("a"), net.connected_client("b")
        for c in (first, second):
            c.subscribe("/queue/d", ack="client-individual", **{"activemq.prefetchSize": "10"})
        acks = {
            c: b"".join(f"ACK\nid:{m.headers['ack']}\n\n\x00".encode() for m in c.messages()) for c in (first, second)
        }
        assert all(len(c.messages()) == 10 for c in (first, second))
        broker = net.broker
        before = len(ops.calls)
        with broker.turn():  # an edge that reads both sockets before it drains
            broker.receive_data(first.sid, acks[first][: len(acks[first]) // 2])
            broker.receive_data(second.sid, acks[second][: len(acks[second]) // 2])
        assert _journal_writes(ops, before) == 1
        before = len(ops.calls)
        broker.receive_data(first.sid, acks[first][len(acks[first]) // 2 :])  # five ACKs, one read
        assert _journal_writes(ops, before) == 1
        before = len(ops.calls)
        broker.receive_data(second.sid, acks[second][len(acks[second]) // 2 :])
        assert _journal_writes(ops, before) == 1
        net.pump()
        assert broker.store.journal_for("/queue/d").live_count == 0


def test_a_failed_write_at_an_event_s_end_stops_the_broker(tmp_path: Path) -> None:
    """The deferred dequeues are written at the end of the event that consumed them:
    an I/O error there is a store failure like a failed fsync (fail-stop)."""
    ops = FaultyFileOps()
    with using(ops):
        net = VirtualNetwork(data_dir=tmp_path / "data")
        producer = net.connected_client("p")
        producer.send("/queue/d", "m", persistent="true", receipt="r")
        broker = net.broker
        consumer = broker.open_session("c")
        ops.fail("pwrite", errno.EIO, path="/journal/")
        broker.receive_data(consumer, CONNECT + _subscribe("/queue/d"))
        assert broker.store_state == "failed"
        assert "Input/output error" in (broker.store_failure or "")
        [shutdown] = [a for a in broker.take_actions() if type(a) is Shutdown]
        assert "Input/output error" in shutdown.reason


# -- the temp store's place is the edge's choice ------------------------------------------------

_FILE_CURSOR = {
    "system_usage": {"memory_limit": "64 kb"},
    "destination_policy": [{"queue": ">", "pending_cursor": "file"}],
}


def _spill(net: VirtualNetwork) -> None:
    producer = net.connected_client("p")
    for i in range(40):
        producer.send("/queue/spilled", f"m{i}" + "x" * 2000)
    assert net.broker.destinations["/queue/spilled"].cursor.spilled > 10


def test_the_temp_store_is_where_the_edge_put_it(tmp_path: Path) -> None:
    net = VirtualNetwork(parse_config(_FILE_CURSOR), data_dir=tmp_path / "data")
    _spill(net)
    assert sorted(p.name for p in (tmp_path / "data" / "tmp_storage").glob("tmp-*.data")) == ["tmp-00000001.data"]
    # Without a data directory the virtual network chooses one, as the server
    # chooses the data directory's: the broker is handed it.
    net = VirtualNetwork(parse_config(_FILE_CURSOR))
    _spill(net)
    assert net.broker.temp_dir == net.temp_dir
    assert list(Path(net.temp_dir).glob("tmp-*.data"))


def test_a_broker_given_no_temp_directory_makes_none_of_its_own(tmp_path: Path) -> None:
    config = parse_config(_FILE_CURSOR)
    broker = Broker(config, ManualClock(), store=MessageStore(config.store, tmp_path / "data"))
    producer = broker.open_session("p")
    broker.receive_data(producer, CONNECT)
    message = b"SEND\ndestination:/queue/spilled\n\n" + b"x" * 2000 + b"\x00"
    for _ in range(40):
        broker.receive_data(producer, message)
        if broker.store_failure:
            break
    assert "no temp directory" in (broker.store_failure or "")
    assert any(type(a) is Shutdown for a in broker.take_actions())
    broker.close()


#: The modules that give the core its sockets, clock and places on disk: the edges.
_EDGES = {"server.py", "edge.py", "websocket.py", "sim.py", "eventloop.py"}


def test_no_part_of_the_core_imports_tempfile() -> None:
    """The core chooses no place on disk: no module of ``minibroker`` but the edges
    (the server, the virtual network) imports ``tempfile``."""
    package = Path(inspect.getfile(Broker)).parent
    importing = []
    for path in sorted(package.glob("*.py")):
        if path.name in _EDGES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            if any(n.partition(".")[0] == "tempfile" for n in names):
                importing.append(path.name)
    assert importing == []


def test_a_write_is_a_value_equal_by_its_session_and_its_bytes() -> None:
    write = Write(3, b"MESSAGE\n\n\x00")
    assert write == Write(3, b"MESSAGE\n\n\x00") and hash(write) == hash(Write(3, b"MESSAGE\n\n\x00"))
    assert write != Write(4, b"MESSAGE\n\n\x00") and write != Write(3, b"RECEIPT\n\n\x00")
    assert write != (3, b"MESSAGE\n\n\x00")  # an action, not a pair
    assert (write.session, write.data) == (3, b"MESSAGE\n\n\x00")
    assert repr(write) == "Write(session=3, data=b'MESSAGE\\n\\n\\x00')"
