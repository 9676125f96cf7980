"""Interoperability: stomp.py, a client we did not write, against the real server."""

from __future__ import annotations

import queue
import socket
import time
from typing import Any

import pytest

from interop_scenario import BINARY, BINARY_QUEUE, QUEUE, TOPIC, check_scenario
from minibroker.protocol import FrameParser
from stomp_py_support import WAIT, Collector, close, connect


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_connect_and_version(broker, version: str) -> None:
    conn, listener = connect(broker, version)
    try:
        assert conn.is_connected()
        assert conn.get_listener("collector") is listener
    finally:
        close(conn)


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_queue_send_receive(broker, version: str) -> None:
    conn, listener = connect(broker, version)
    try:
        conn.subscribe("/queue/interop", id="s1", ack="auto")
        for i in range(5):
            conn.send("/queue/interop", f"hello {i}", headers={"app": f"v:{i}"})
        got = listener.take(5)
        assert [f.body for f in got] == [f"hello {i}" for i in range(5)]
        assert [f.headers["app"] for f in got] == [f"v:{i}" for i in range(5)]
        assert all(f.headers["destination"] == "/queue/interop" for f in got)
    finally:
        close(conn)


def receipt(listener: Collector, receipt_id: str) -> bool:
    """Wait for the RECEIPT ``receipt_id``; True once it came."""
    deadline = time.time() + WAIT
    while receipt_id not in listener.receipts and time.time() < deadline:
        time.sleep(0.01)
    return receipt_id in listener.receipts


def ack(conn: Any, version: str, frame: Any) -> None:
    """ACK ``frame`` as stomp.py's ``version`` connection takes it."""
    if version == "1.2":
        conn.ack(frame.headers["ack"])
    elif version == "1.1":
        conn.ack(frame.headers["message-id"], frame.headers["subscription"])
    else:
        conn.ack(frame.headers["message-id"])


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2"])
def test_stomp_py_holds_the_interop_scenario(broker, version: str) -> None:
    """The scenario every third-party client plays (``interop_scenario``), by stomp.py
    speaking each version."""

    def noted(frame: Any) -> dict[str, Any]:
        return {
            "command": frame.cmd,
            "body": frame.body.decode(),
            "n": frame.headers.get("n"),
            "destination": frame.headers.get("destination"),
        }

    seen: dict[str, Any] = {"receipts": [], "first": [], "second": [], "disconnect_receipts": []}
    (a, la), (b, lb), (c, lc) = (connect(broker, version, auto_decode=False) for _ in range(3))
    try:
        seen["connected"] = {
            "version": la.connected.headers.get("version"),
            "session": "session" in la.connected.headers,
        }
        for n in range(5):
            a.send(QUEUE, f"m{n}", headers={"n": str(n), "receipt": f"r{n}"})
            seen["receipts"].append(receipt(la, f"r{n}"))
        a.send(BINARY_QUEUE, BINARY, headers={"receipt": "r-bin"})  # stomp.py sets content-length
        seen["receipts"].append(receipt(la, "r-bin"))

        a.subscribe(QUEUE, id="q", ack="client", headers={"activemq.prefetchSize": "1"})
        for i in range(3):  # prefetch 1: the next comes once this one is acknowledged
            frame = la.take(1)[0]
            seen["first"].append(noted(frame))
            if i < 2:
                ack(a, version, frame)
        a.disconnect(receipt="bye-a")
        seen["disconnect_receipts"].append(receipt(la, "bye-a"))

        b.subscribe(QUEUE, id="q", ack="client")  # default prefetch: back to back
        for frame in lb.take(3):
            seen["second"].append(noted(frame))
            ack(b, version, frame)
        b.subscribe(BINARY_QUEUE, id="bin", ack="auto")
        frame = lb.take(1)[0]
        seen["binary"] = {"hex": frame.body.hex(), "content_length": frame.headers.get("content-length")}

        b.subscribe(TOPIC, id="t", ack="auto", headers={"receipt": "sub-b"})
        c.subscribe(TOPIC, id="t", ack="auto", headers={"receipt": "sub-c"})
        seen["topic_receipts"] = [receipt(lb, "sub-b"), receipt(lc, "sub-c")]
        c.send(TOPIC, "to all")
        seen["topic"] = [lb.take(1)[0].body.decode(), lc.take(1)[0].body.decode()]
        for conn, listener, name in ((b, lb, "bye-b"), (c, lc, "bye-c")):
            conn.disconnect(receipt=name)
            seen["disconnect_receipts"].append(receipt(listener, name))
    finally:
        for conn in (a, b, c):
            close(conn)
    check_scenario(seen, broker, version)


def test_application_headers_reach_consumers_of_every_version_unchanged(broker) -> None:
    """A 1.2 producer's headers, passed through as they came (plain ones) or rebuilt
    (one that needs escaping), reach stomp.py consumers of 1.0, 1.1 and 1.2 alike,
    with the broker's own headers and without the SEND's receipt."""
    consumers = {v: connect(broker, v) for v in ("1.0", "1.1", "1.2")}
    producer, producer_listener = connect(broker, "1.2")
    try:
        for version, (conn, _) in consumers.items():
            conn.subscribe("/topic/headers", id=f"s{version}", ack="auto", headers={"receipt": f"sub{version}"})
        deadline = time.time() + WAIT
        while time.time() < deadline and not all(f"sub{v}" in l.receipts for v, (_, l) in consumers.items()):
            time.sleep(0.01)
        plain = {"app": "plain value", "kind": "order", "persistent": "true"}
        producer.send("/topic/headers", "one", headers={**plain, "receipt": "send-1"})
        producer.send("/topic/headers", "two", headers={"app": "colon:inside", "x-id": "a\\b"})
        for version, (_, listener) in consumers.items():
            one, two = listener.take(2)
            assert (one.body, two.body) == ("one", "two"), version
            assert {k: one.headers[k] for k in plain} == plain, version
            assert two.headers["app"] == "colon:inside" and two.headers["x-id"] == "a\\b", version
            for frame in (one, two):
                assert frame.headers["destination"] == "/topic/headers", version
                assert frame.headers["subscription"] == f"s{version}", version
                assert frame.headers["message-id"] and frame.headers["priority"] == "4", version
                assert int(frame.headers["timestamp"]) > 0 and frame.headers["expires"] == "0", version
                assert "receipt" not in frame.headers, version
        deadline = time.time() + WAIT
        while time.time() < deadline and "send-1" not in producer_listener.receipts:
            time.sleep(0.01)
        assert producer_listener.receipts == ["send-1"]  # the receipt went to its producer, once
    finally:
        for conn, _ in consumers.values():
            close(conn)
        close(producer)


def test_topic_fan_out(broker) -> None:
    subs = [connect(broker) for _ in range(3)]
    producer, _ = connect(broker)
    try:
        for i, (conn, _) in enumerate(subs):
            conn.subscribe("/topic/interop", id=f"t{i}", ack="auto", headers={"receipt": f"sub{i}"})
        deadline = time.time() + WAIT
        while not all(l.receipts for _, l in subs) and time.time() < deadline:
            time.sleep(0.01)
        for i in range(10):
            producer.send("/topic/interop", str(i))
        for _, listener in subs:
            assert [f.body for f in listener.take(10)] == [str(i) for i in range(10)]
    finally:
        for conn, _ in subs:
            close(conn)
        close(producer)


def test_competing_consumers_share_a_queue(broker) -> None:
    (a, la), (b, lb) = connect(broker), connect(broker)
    producer, _ = connect(broker)
    try:
        for conn in (a, b):
            conn.subscribe(
                "/queue/share", id="s", ack="client-individual", headers={"activemq.prefetchSize": "1", "receipt": "r"}
            )
        assert receipt(la, "r") and receipt(lb, "r")  # both subscribed before the first send
        for i in range(10):
            producer.send("/queue/share", str(i))
        got: list[str] = []
        deadline = time.time() + WAIT
        while len(got) < 10 and time.time() < deadline:
            for conn, listener in ((a, la), (b, lb)):
                try:
                    f = listener.messages.get(timeout=0.05)
                except queue.Empty:
                    continue
                got.append(f.body)
                conn.ack(f.headers["ack"])
        assert sorted(got, key=int) == [str(i) for i in range(10)]
    finally:
        close(a)
        close(b)
        close(producer)


@pytest.mark.parametrize("version", ["1.1", "1.2"])
def test_client_individual_ack_and_redelivery_after_disconnect(broker, version: str) -> None:
    conn, listener = connect(broker, version)
    producer, _ = connect(broker)
    try:
        conn.subscribe("/queue/ci", id="s", ack="client-individual")
        for i in range(3):
            producer.send("/queue/ci", str(i))
        frames = listener.take(3)
        if version == "1.2":
            conn.ack(frames[1].headers["ack"])
        else:
            conn.ack(frames[1].headers["message-id"], "s")
        conn.disconnect()
        again, l2 = connect(broker, version)
        again.subscribe("/queue/ci", id="s2", ack="auto")
        got = l2.take(2)
        assert [f.body for f in got] == ["0", "2"]
        assert all(f.headers.get("redelivered") == "true" for f in got)
        assert l2.nothing_more()
        close(again)
    finally:
        close(producer)


def test_client_ack_is_cumulative(broker) -> None:
    conn, listener = connect(broker)
    try:
        conn.subscribe("/queue/cum", id="s", ack="client")
        for i in range(4):
            conn.send("/queue/cum", str(i))
        frames = listener.take(4)
        conn.ack(frames[2].headers["ack"])
        conn.disconnect()
        again, l2 = connect(broker)
        again.subscribe("/queue/cum", id="s", ack="auto")
        assert [f.body for f in l2.take(1)] == ["3"]
        assert l2.nothing_more()
        close(again)
    finally:
        close(conn)


def test_nack_redelivers(broker) -> None:
    conn, listener = connect(broker)
    try:
        conn.subscribe("/queue/nack", id="s", ack="client-individual")
        conn.send("/queue/nack", "retry me")
        first = listener.take(1)[0]
        assert "redelivered" not in first.headers
        conn.nack(first.headers["ack"])
        second = listener.take(1)[0]
        assert second.body == "retry me"
        assert second.headers["redelivered"] == "true"
        conn.ack(second.headers["ack"])
        assert listener.nothing_more()
    finally:
        close(conn)


def test_receipts(broker) -> None:
    conn, listener = connect(broker)
    try:
        conn.subscribe("/queue/rc", id="s", ack="auto", headers={"receipt": "sub-r"})
        conn.send("/queue/rc", "x", headers={"receipt": "send-r"})
        listener.take(1)
        deadline = time.time() + WAIT
        while len(listener.receipts) < 2 and time.time() < deadline:
            time.sleep(0.01)
        assert listener.receipts == ["sub-r", "send-r"]
        conn.disconnect(receipt="bye")
        assert not conn.is_connected()
    finally:
        close(conn)


def test_heart_beats_keep_stomp_py_alive_and_silence_is_detected(broker) -> None:
    conn, listener = connect(broker, heartbeats=(200, 200))
    try:
        # Five of the broker's beats (a second or more), while stomp.py beats too:
        # the broker, which drops a client silent for two periods, kept this one.
        deadline = time.time() + WAIT
        while listener.heartbeats < 5 and not listener.disconnected.is_set() and time.time() < deadline:
            time.sleep(0.01)
        assert listener.heartbeats >= 5
        assert conn.is_connected()
        assert not listener.disconnected.is_set()
        # Now make stomp.py go silent: stop its heart-beat thread.
        conn.heartbeat_terminate_event.set()
        assert listener.disconnected.wait(WAIT), "the broker should drop a silent client"
        assert any("heart-beat timeout" in e.headers.get("message", "") for e in listener.errors)
    finally:
        close(conn)


def raw_exchange(broker, data: bytes, wait: float = 2.0) -> bytes:
    with socket.create_connection(broker.address, timeout=WAIT) as s:
        s.sendall(data)
        chunks = []
        s.settimeout(wait)
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        except TimeoutError:
            raise AssertionError("the broker did not close the connection") from None
        return b"".join(chunks)


def test_malformed_frame_gets_error_and_close_while_stomp_py_keeps_working(broker) -> None:
    conn, listener = connect(broker)
    try:
        conn.subscribe("/queue/steady", id="s", ack="auto")
        reply = raw_exchange(
            broker,
            b"CONNECT\naccept-version:1.2\nhost:h\n\n\x00SEND\ndestination:/queue/steady\nreceipt:77\nno colon here\n\nboom\x00",
        )
        frames = FrameParser(role="client", version="1.2").feed(reply)
        assert [f.command for f in frames] == ["CONNECTED", "ERROR"]
        assert "without ':'" in frames[1].headers["message"]
        conn.send("/queue/steady", "unaffected")
        assert listener.take(1)[0].body == "unaffected"
    finally:
        close(conn)


def test_bad_frame_error_carries_receipt_id(broker) -> None:
    reply = raw_exchange(broker, b"CONNECT\naccept-version:1.2\nhost:h\n\n\x00SEND\nreceipt:r-5\n\nno destination\x00")
    frames = FrameParser(role="client", version="1.2").feed(reply)
    assert frames[-1].command == "ERROR"
    assert frames[-1].headers["receipt-id"] == "r-5"
    assert frames[-1].headers["message"] == "SEND frame has no destination header"


def test_no_common_version_over_a_socket(broker) -> None:
    reply = raw_exchange(broker, b"CONNECT\naccept-version:9.9\nhost:h\n\n\x00")
    frames = FrameParser(role="client").feed(reply)
    assert frames[0].command == "ERROR"
    assert frames[0].headers["version"] == "1.0,1.1,1.2"


def test_stomp_py_sees_broker_errors(broker) -> None:
    conn, listener = connect(broker)
    conn.send("/nowhere/x", "lost")
    assert listener.disconnected.wait(WAIT)
    assert "unknown destination" in listener.errors[0].headers["message"]
