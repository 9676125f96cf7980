"""Hostile clients against the real server: pre-login limits, the connection
cap, and password hashing that never stops the event loop."""

from __future__ import annotations

import threading

from minibroker.config import parse_config
from minibroker.connection import hash_password
from wire import Wire

HUGE_CONNECT = b"CONNECT\naccept-version:1.2\nhost:h\ncontent-length:104857600\n\n"


def test_hostile_sockets_before_login_cannot_make_the_broker_hold_their_frames(broker) -> None:
    hostile = [Wire(broker.address) for _ in range(5)]
    try:
        for wire in hostile:
            # The refusal comes at the header block: a little body is enough (more, left unread
            # when the broker closes, would make the kernel reset the socket and drop the ERROR).
            wire.sock.sendall(HUGE_CONNECT + b"x" * 4096)
        for wire in hostile:
            frames = wire.until_closed()
            assert [f.command for f in frames] == ["ERROR"]
            assert "before the CONNECT is accepted" in frames[0].headers["message"]
        assert broker.call(lambda: broker.server.broker.partial_bytes) == 0
        good = Wire(broker.address)
        assert good.connect().command == "CONNECTED"
        good.close()
    finally:
        for wire in hostile:
            wire.close()


def test_the_connection_over_the_limit_gets_an_error_then_is_closed(broker_factory) -> None:
    rb = broker_factory(transport={"max_connections": 2})
    first, second, third = Wire(rb.address), Wire(rb.address), Wire(rb.address)
    try:
        assert first.connect().command == "CONNECTED" and second.connect().command == "CONNECTED"
        [error] = third.until_closed()
        assert error.headers["message"].startswith("the broker has reached its limit of 2 connections")
        second.send("SEND", {"destination": "/queue/q", "receipt": "r"}, b"x")
        assert second.receipt("r").command == "RECEIPT"
    finally:
        for wire in (first, second, third):
            wire.close()


def test_a_password_hash_never_stops_the_other_connections(broker_factory) -> None:
    config = parse_config({"users": [{"name": "alice", "password_hash": hash_password("wonderland", iterations=1000)}]})
    rb = broker_factory(config)
    started, release = threading.Event(), threading.Event()
    real = rb.call(lambda: rb.server.broker.security.pbkdf2)

    def slow(name: str, password: bytes, salt: bytes, iterations: int) -> bytes:
        """A hash that takes as long as the test says (at most 30 s)."""
        started.set()
        release.wait(30)
        return real(name, password, salt, iterations)

    alice, guesser = Wire(rb.address), Wire(rb.address)
    try:
        assert alice.connect(login="alice", passcode="wonderland").command == "CONNECTED"

        def make_slow() -> None:
            rb.server.broker.security.pbkdf2 = slow

        rb.call(make_slow)
        guesser.sock.sendall(b"CONNECT\naccept-version:1.2\nlogin:alice\npasscode:guess\n\n\x00")
        assert started.wait(20)  # the guess is being hashed ...
        alice.send("SEND", {"destination": "/queue/q", "receipt": "meanwhile"}, b"x")
        assert alice.receipt("meanwhile").command == "RECEIPT"  # ... and alice is served meanwhile
        assert not release.is_set() and guesser.frames == []
        release.set()
        [error] = guesser.until_closed()
        assert error.headers["message"] == "User name [alice] or password is invalid."
    finally:
        release.set()
        alice.close()
        guesser.close()


def test_a_websocket_client_cannot_send_more_than_a_connect_before_login(broker_factory) -> None:
    """The WebSocket layer takes a whole message before the STOMP limits see it: until the
    CONNECT is accepted, the edge closes a connection past a CONNECT's worth (1009)."""
    from websockets.exceptions import ConnectionClosedError
    from websockets.sync.client import connect

    from minibroker.config import ANY_PORT

    rb = broker_factory(transport={"websocket_port": ANY_PORT})
    url = f"ws://127.0.0.1:{rb.server.websocket_port}/"
    with connect(url, open_timeout=20, max_size=None) as hostile:
        try:
            hostile.send(HUGE_CONNECT + b"x" * (1024 * 1024))
            hostile.recv(timeout=20)
            raise AssertionError("the broker answered instead of closing")
        except ConnectionClosedError as closed:
            assert closed.rcvd is not None and closed.rcvd.code == 1009
            assert "before the CONNECT is accepted" in closed.rcvd.reason
    with connect(url, open_timeout=20) as good:  # a CONNECT, then a frame well past the CONNECT limit
        good.send(b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00")
        assert good.recv(timeout=20).startswith("CONNECTED")
        body = b"y" * (256 * 1024)
        good.send(b"SEND\ndestination:/queue/ws.big\nreceipt:r\n\n" + body + b"\x00")
        assert "receipt-id:r" in good.recv(timeout=20)
