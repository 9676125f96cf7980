"""One write per connection per turn, through the real server.

A turn is what the server does for one read of a socket: the core handles the
frames read, then the server carries out what they left (``BrokerServer.flush``).
Whatever the frames of one read give a connection (the MESSAGEs of a batch of
SENDs, several subscriptions' copies of a topic message, a RECEIPT after a
MESSAGE, the messages a batch of ACKs lets through) leaves in one
``transport.write``: a syscall per connection per turn, not per frame. (A
connection whose outbox fills to its half of ``write_buffer_limit`` within a
turn gets a second write once the first is in the socket's buffer: the tests
here stay under it.)

The transports are wrapped to count their writes; the turns are the calls of
``TcpConnection.data_received``.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from minibroker.edge.connection import EdgeConnection, TcpConnection
from wire import Wire


class _CountingTransport:
    """A transport whose writes are counted per turn; everything else is the transport's."""

    def __init__(self, transport: Any, conn: EdgeConnection, writes: _Writes) -> None:
        self._transport = transport
        self._conn = conn
        self._writes = writes

    def write(self, data: bytes) -> None:
        self._writes.wrote(self._conn)
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _Writes:
    """Writes per (turn, connection): turns are reads, numbered as they start."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.turn = 0
        self.per_turn: Counter[tuple[int, int]] = Counter()

    def wrote(self, conn: EdgeConnection) -> None:
        with self.lock:
            if self.turn:
                self.per_turn[(self.turn, conn.sid)] += 1

    def most_in_a_turn(self) -> int:
        with self.lock:
            return max(self.per_turn.values(), default=0)

    def to(self, sid: int) -> int:
        """Writes to connection ``sid`` during turns so far."""
        with self.lock:
            return sum(n for (_, s), n in self.per_turn.items() if s == sid)


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Writes]:
    counted = _Writes()
    attach = EdgeConnection.attach
    data_received = TcpConnection.data_received

    def counting_attach(self: EdgeConnection, transport: Any) -> None:
        attach(self, transport)
        self.transport = _CountingTransport(self.transport, self, counted)  # type: ignore[assignment]

    def turn(self: TcpConnection, data: bytes) -> None:
        with counted.lock:
            counted.turn += 1
        data_received(self, data)

    monkeypatch.setattr(EdgeConnection, "attach", counting_attach)
    monkeypatch.setattr(TcpConnection, "data_received", turn)
    yield counted


def _session_id(broker: Any, wire: Wire) -> int:
    """The server's connection id of ``wire`` (by its local port)."""
    port = wire.sock.getsockname()[1]
    [sid] = [s.id for s in broker.server.broker.sessions.values() if s.peer.endswith(f":{port}")]
    return sid


def test_a_batch_of_sends_reaches_the_consumer_in_one_write_per_read(broker, writes: _Writes) -> None:
    consumer, producer = Wire(broker.address), Wire(broker.address)
    consumer.connect()
    consumer.send("SUBSCRIBE", {"destination": "/queue/batch", "id": "s", "receipt": "sub"})
    consumer.receipt("sub")
    producer.connect()
    sends = b"".join(
        b"SEND\ndestination:/queue/batch\ncontent-length:100\n\n" + b"%100d" % i + b"\x00" for i in range(199)
    )
    producer.sock.sendall(sends + b"SEND\ndestination:/queue/batch\nreceipt:done\n\nlast\x00")
    producer.receipt("done")
    consumer.until(lambda f: f.body == b"last")
    assert [f.body for f in consumer.frames if f.command == "MESSAGE"] == [b"%100d" % i for i in range(199)] + [b"last"]
    assert writes.most_in_a_turn() == 1
    # 200 MESSAGEs in as many writes as the broker read the SENDs in: a few, not 200.
    assert writes.to(broker.call(lambda: _session_id(broker, consumer))) <= 20


def test_a_topic_message_for_several_subscriptions_of_one_connection_is_one_write(broker, writes: _Writes) -> None:
    consumer, producer = Wire(broker.address), Wire(broker.address)
    consumer.connect()
    for sub in ("a", "b", "c"):
        consumer.send("SUBSCRIBE", {"destination": "/topic/fan", "id": sub})
    consumer.send("SUBSCRIBE", {"destination": "/queue/none", "id": "d", "receipt": "subs"})
    consumer.receipt("subs")
    before = writes.to(broker.call(lambda: _session_id(broker, consumer)))
    producer.connect()
    producer.send("SEND", {"destination": "/topic/fan", "receipt": "sent"}, b"one")
    producer.receipt("sent")
    for sub in ("a", "b", "c"):
        consumer.until(lambda f, sub=sub: f.command == "MESSAGE" and f.headers["subscription"] == sub)
    assert writes.most_in_a_turn() == 1
    assert writes.to(broker.call(lambda: _session_id(broker, consumer))) == before + 1


def test_a_message_and_the_receipt_after_it_leave_together(broker, writes: _Writes) -> None:
    client = Wire(broker.address)
    client.connect()
    client.send("SUBSCRIBE", {"destination": "/queue/self", "id": "s", "receipt": "sub"})
    client.receipt("sub")
    client.send("SEND", {"destination": "/queue/self", "receipt": "sent"}, b"to myself")
    client.receipt("sent")
    client.until(lambda f: f.command == "MESSAGE")
    assert writes.most_in_a_turn() == 1


def test_a_batch_of_acks_lets_the_next_messages_through_in_one_write(broker, writes: _Writes) -> None:
    producer, consumer = Wire(broker.address), Wire(broker.address)
    producer.connect()
    for i in range(20):
        producer.send("SEND", {"destination": "/queue/acks"}, b"m%d" % i)
    producer.send("SEND", {"destination": "/queue/acks", "receipt": "filled"}, b"m20")
    producer.receipt("filled")
    consumer.connect()
    consumer.send(
        "SUBSCRIBE",
        {"destination": "/queue/acks", "id": "s", "ack": "client-individual", "activemq.prefetchSize": "10"},
    )
    consumer.until(lambda f: f.body == b"m9")
    first = [f for f in consumer.frames if f.command == "MESSAGE"]
    consumer.sock.sendall(b"".join(b"ACK\nid:%s\n\n\x00" % f.headers["ack"].encode() for f in first))
    consumer.until(lambda f: f.body == b"m19")
    assert writes.most_in_a_turn() == 1
