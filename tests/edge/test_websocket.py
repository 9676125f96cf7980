"""STOMP over WebSocket: the upgrade (subprotocols, Origin), frames split or batched
across messages, one frame per message out, the same limits and heart-beats as TCP,
and stomp.py's WebSocket transport against the real listener."""

from __future__ import annotations

import json
import queue
import time
from typing import Any

import pytest
import stomp
from websockets.exceptions import ConnectionClosedOK, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from minibroker.config import ANY_PORT, parse_config
from minibroker.errors import ConfigError

WAIT = 10.0
CONNECT_12 = b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00"


def ws_broker(broker_factory, **transport: Any):  # type: ignore[no-untyped-def]
    return broker_factory(transport={"websocket_port": ANY_PORT, **transport})


def ws_connect(broker, **kwargs: Any) -> ClientConnection:  # type: ignore[no-untyped-def]
    return connect(f"ws://127.0.0.1:{broker.server.websocket_port}/", open_timeout=WAIT, **kwargs)


def frame_of(message: str | bytes) -> tuple[str, dict[str, str], bytes]:
    """One STOMP frame from one WebSocket message (command, headers, body): the whole
    message is exactly that frame, its NUL (and the EOL the broker writes after it) last."""
    data = message.encode("utf-8") if isinstance(message, str) else message
    head, _, body = data.partition(b"\n\n")
    assert body.endswith(b"\x00\n"), data
    command, *lines = head.decode("utf-8").split("\n")
    return command, dict(line.split(":", 1) for line in lines), body[:-2]


def receive_frame(ws: ClientConnection) -> tuple[str, dict[str, str], bytes]:
    """The next STOMP frame, skipping heart-beat EOLs."""
    while True:
        message = ws.recv(timeout=WAIT)
        if message not in ("\n", b"\n"):
            return frame_of(message)


def test_frames_split_and_batched_across_messages(broker_factory) -> None:  # type: ignore[no-untyped-def]
    broker = ws_broker(broker_factory)
    with ws_connect(broker, subprotocols=["v10.stomp", "v11.stomp", "v12.stomp"]) as ws:
        assert ws.subprotocol == "v12.stomp"  # the highest offered
        ws.send(CONNECT_12[:9])  # CONNECT split across three messages, text and binary
        ws.send(CONNECT_12[9:20].decode())
        ws.send(CONNECT_12[20:])
        command, headers, _ = receive_frame(ws)
        assert (command, headers["version"]) == ("CONNECTED", "1.2")
        # Two SENDs and a SUBSCRIBE batched in one message; the body with NULs in a binary one.
        ws.send(
            b"SUBSCRIBE\nid:s\ndestination:/queue/ws.q\n\n\x00"
            b"SEND\ndestination:/queue/ws.q\n\none\x00SEND\ndestination:/queue/ws.q\n\ntwo\x00"
        )
        ws.send(b"SEND\ndestination:/queue/ws.q\ncontent-length:4\nreceipt:r\n\n\x00\xff\x00\x01\x00")
        frames = [receive_frame(ws) for _ in range(4)]
        # One STOMP frame per message out: text when it is UTF-8, binary otherwise.
        assert [(c, b) for c, _, b in frames[:2]] == [("MESSAGE", b"one"), ("MESSAGE", b"two")]
        assert {frames[2][0], frames[3][0]} == {"MESSAGE", "RECEIPT"}
        assert [b for c, _, b in frames if c == "MESSAGE"][2] == b"\x00\xff\x00\x01"


def test_subprotocols_none_and_one_version(broker_factory) -> None:  # type: ignore[no-untyped-def]
    broker = ws_broker(broker_factory)
    with ws_connect(broker) as ws:  # no subprotocol offered: accepted without one
        assert ws.subprotocol is None
        ws.send(b"CONNECT\naccept-version:1.0,1.1\n\n\x00")
        assert receive_frame(ws)[1]["version"] == "1.1"
    with ws_connect(broker, subprotocols=["v10.stomp"]) as ws:
        assert ws.subprotocol == "v10.stomp"
        ws.send(b"CONNECT\n\n\x00")
        assert receive_frame(ws)[0] == "CONNECTED"


def test_allowed_origins(broker_factory) -> None:  # type: ignore[no-untyped-def]
    broker = ws_broker(broker_factory, allowed_origins=("http://console.example:8161",))
    with pytest.raises(InvalidStatus) as refused:
        ws_connect(broker, origin="http://elsewhere.example")
    assert refused.value.response.status_code == 403
    for origin in ("http://console.example:8161", None):  # the allowed page, and a client that is not a browser
        with ws_connect(broker, origin=origin) as ws:
            ws.send(CONNECT_12)
            assert receive_frame(ws)[0] == "CONNECTED"


def test_the_same_limits_and_heart_beats_as_tcp(broker_factory) -> None:  # type: ignore[no-untyped-def]
    broker = ws_broker(broker_factory, max_data_length=1000)
    with ws_connect(broker) as ws:
        ws.send(b"CONNECT\naccept-version:1.2\nheart-beat:0,100\n\n\x00")
        assert receive_frame(ws)[1]["heart-beat"] == "100,0"
        assert ws.recv(timeout=WAIT) == "\n"  # the broker's heart-beat: a message holding an EOL
        # The connection statistics name the transport.
        session = broker.call(lambda: broker.server.broker.sessions[min(broker.server.broker.sessions)])
        assert session.protocol == "websocket" and session.framed
        ws.send(b"SEND\ndestination:/queue/big\ncontent-length:2000\n\n" + b"x" * 2000 + b"\x00")
        command, headers, _ = receive_frame(ws)
        assert command == "ERROR" and "1000" in headers["message"]
        with pytest.raises(ConnectionClosedOK):  # then the broker closes the WebSocket, cleanly
            ws.recv(timeout=WAIT)


def test_connect_timeout_covers_an_unfinished_upgrade(broker_factory) -> None:  # type: ignore[no-untyped-def]
    import socket

    broker = ws_broker(broker_factory, connect_timeout=200)
    with socket.create_connection(("127.0.0.1", broker.server.websocket_port), timeout=WAIT) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # never finishes its request
        assert sock.recv(100) == b""  # the broker closed it


class _Collector(stomp.ConnectionListener):
    def __init__(self) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()
        self.receipts: queue.Queue[str] = queue.Queue()

    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)

    def on_receipt(self, frame: Any) -> None:
        self.receipts.put(frame.headers["receipt-id"])


def test_stomp_py_websocket_transport(broker_factory) -> None:  # type: ignore[no-untyped-def]
    broker = ws_broker(broker_factory)
    conn = stomp.WSStompConnection([("127.0.0.1", broker.server.websocket_port)], ws_path="/")
    listener = _Collector()
    conn.set_listener("collector", listener)
    conn.connect(wait=True)
    try:
        conn.subscribe("/queue/py.ws", id="s1", ack="client-individual", headers={"activemq.prefetchSize": "1"})
        for n in range(3):
            conn.send("/queue/py.ws", json.dumps({"n": n}), receipt=f"r{n}")
        assert sorted(listener.receipts.get(timeout=WAIT) for _ in range(3)) == ["r0", "r1", "r2"]
        got = []
        for _ in range(3):  # prefetch 1: the next comes only once this one is acked
            frame = listener.messages.get(timeout=WAIT)
            got.append(json.loads(frame.body)["n"])
            conn.ack(frame.headers["ack"])
        assert got == [0, 1, 2]
        conn.unsubscribe("s1", receipt="done")
        assert listener.receipts.get(timeout=WAIT) == "done"
        queue_ = broker.call(lambda: broker.server.broker.destinations["/queue/py.ws"])
        assert broker.call(lambda: (queue_.size(), queue_.dequeued)) == (0, 3)
    finally:
        conn.disconnect()


def test_websocket_port_option() -> None:
    assert parse_config({"transport": {"websocket_port": "any"}}).transport.websocket_port == ANY_PORT
    assert parse_config({"transport": {"websocket_port": 0}}).transport.websocket_port == 0
    with pytest.raises(ConfigError, match="transport.websocket_port"):
        parse_config({"transport": {"websocket_port": 70000}})
    # A broker on free ports (tests, live labs) has no WebSocket listener unless it asks for "any".
    cfg = parse_config({})
    assert cfg.transport.websocket_port == 61614 and cfg.on_free_ports().transport.websocket_port == 0
    assert parse_config({"transport": {"websocket_port": "any"}}).on_free_ports().transport.websocket_port == ANY_PORT


def test_producer_flow_control_blocks_a_websocket_producer(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """The core's flow control stops reading a WebSocket producer as it does a TCP one,
    and a consumer's draining lets it go on."""
    from minibroker.config import PolicyEntry

    broker = broker_factory(
        transport={"websocket_port": ANY_PORT},
        system_usage={"memory_limit": 64 * 1024},
        destination_policy=(PolicyEntry(queue=">", pending_cursor="vm"),),
    )
    with ws_connect(broker) as ws:
        ws.send(CONNECT_12)
        assert receive_frame(ws)[0] == "CONNECTED"
        body = b"x" * 1024
        for _ in range(200):  # 200 KB for a 64 KB broker, no receipts: the producer is blocked part way
            ws.send(b"SEND\ndestination:/queue/ws.flow\ncontent-length:1024\n\n" + body + b"\x00")
        ws.send(b"SEND\ndestination:/queue/ws.flow\nreceipt:all-in\n\nlast\x00")

        def blocked() -> bool:
            session = next(iter(broker.server.broker.sessions.values()))
            return session.reading.paused and session.protocol == "websocket"

        deadline = time.monotonic() + WAIT
        while not broker.call(blocked):
            assert time.monotonic() < deadline, "the WebSocket producer was never blocked"
            time.sleep(0.02)
        consumer = stomp.Connection12([broker.address])
        got = _Collector()
        consumer.set_listener("c", got)
        consumer.connect(wait=True)
        consumer.subscribe("/queue/ws.flow", id="c", ack="auto")
        try:
            command, headers, _ = receive_frame(ws)  # the rest is read once memory frees
            assert (command, headers["receipt-id"]) == ("RECEIPT", "all-in")
            for _ in range(201):
                got.messages.get(timeout=WAIT)
        finally:
            consumer.disconnect()


def test_the_limits_before_login_are_the_tcp_listeners(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """Limits before login hold for a WebSocket client as for a TCP one: the CONNECT's
    small frame limit, and max_connections counting both listeners' connections."""
    broker = ws_broker(broker_factory, max_connections=2, max_connect_frame_size=4096)
    with ws_connect(broker) as ws:
        ws.send(b"CONNECT\naccept-version:1.2\nbig:" + b"x" * 8000 + b"\n\n\x00")
        command, headers, _ = receive_frame(ws)
        assert command == "ERROR" and "4096" in headers["message"], headers
    tcp = stomp.Connection12([broker.address])
    tcp.connect(wait=True)
    try:
        with ws_connect(broker) as first:  # the second connection: allowed
            first.send(CONNECT_12)
            assert receive_frame(first)[0] == "CONNECTED"
            with ws_connect(broker) as over:  # the third, over WebSocket: refused like a TCP one
                command, headers, _ = receive_frame(over)
                assert command == "ERROR" and "connections" in headers["message"], headers
    finally:
        tcp.disconnect()


class _CountingTransport:
    """The connection's transport, counting the writes that reach it."""

    def __init__(self, transport: Any) -> None:
        self.transport = transport
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transport, name)


def test_a_turns_frames_leave_in_one_write_one_message_each(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """Ten messages a producer sent at once reach a WebSocket consumer as ten WebSocket
    messages, written to its socket with one write, as on TCP (not one write per frame)."""
    import socket

    from minibroker.frames import Frame
    from minibroker.protocol import encode

    broker = ws_broker(broker_factory)
    with ws_connect(broker) as ws:
        ws.send(CONNECT_12)
        assert receive_frame(ws)[0] == "CONNECTED"
        ws.send(b"SUBSCRIBE\nid:s\ndestination:/queue/ws.turn\nreceipt:r\n\n\x00")
        assert receive_frame(ws)[0] == "RECEIPT"
        counting = broker.call(lambda: _count_writes(broker, "websocket"))
        with socket.create_connection(broker.address, timeout=WAIT) as producer:
            batch = b"".join(encode(Frame("SEND", {"destination": "/queue/ws.turn"}, b"m%d" % i)) for i in range(10))
            producer.sendall(CONNECT_12 + batch)  # one send: one read, or two if the kernel splits it
            bodies = [receive_frame(ws)[2] for _ in range(10)]
    assert bodies == [b"m%d" % i for i in range(10)]
    # The ten arrived in as few turns as the producer's reads took: at most one write each.
    assert counting.writes <= 2, counting.writes


def _count_writes(broker, protocol: str) -> _CountingTransport:  # type: ignore[no-untyped-def]
    (conn,) = [c for c in broker.server.connections.values() if c.protocol == protocol]
    conn.transport = counting = _CountingTransport(conn.transport)
    return counting
