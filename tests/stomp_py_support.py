"""stomp.py, a client we did not write, as the tests drive it against the real server: a
listener that collects what a connection receives, connect and close, waits with a deadline."""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import Any

import stomp

WAIT = 10.0


class Collector(stomp.ConnectionListener):
    """Collects what a stomp.py connection receives, with blocking waits."""

    def __init__(self) -> None:
        self.messages: queue.Queue[Any] = queue.Queue()
        self.errors: list[Any] = []
        self.receipts: list[str] = []
        self.disconnected = threading.Event()
        self.connected: Any = None  # the CONNECTED frame
        self.heartbeats = 0  # heart-beats received from the broker

    def on_connected(self, frame: Any) -> None:
        self.connected = frame

    def on_message(self, frame: Any) -> None:
        self.messages.put(frame)

    def on_error(self, frame: Any) -> None:
        self.errors.append(frame)

    def on_receipt(self, frame: Any) -> None:
        self.receipts.append(frame.headers["receipt-id"])

    def on_disconnected(self) -> None:
        self.disconnected.set()

    def on_heartbeat(self) -> None:
        self.heartbeats += 1

    def take(self, n: int, timeout: float = WAIT) -> list[Any]:
        return [self.messages.get(timeout=timeout) for _ in range(n)]

    def nothing_more(self, wait: float = 0.3) -> bool:
        try:
            self.messages.get(timeout=wait)
            return False
        except queue.Empty:
            return True


def connect(broker, version: str = "1.2", *, auto_decode: bool = True, **kwargs: Any) -> tuple[Any, Collector]:
    cls = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}[version]
    conn_kwargs = {"heartbeats": kwargs.pop("heartbeats", (0, 0))} if version != "1.0" else {}
    conn = cls([broker.address], auto_decode=auto_decode, **conn_kwargs)
    listener = Collector()
    conn.set_listener("collector", listener)
    conn.connect(wait=True, **kwargs)
    return conn, listener


def close(conn: Any) -> None:
    """Disconnect if still connected (clean-up: a connection the test already
    disconnected may still say it is connected for a moment while stomp.py's
    receiver thread drops its socket)."""
    if conn.is_connected():
        with contextlib.suppress(stomp.exception.NotConnectedException):
            conn.disconnect()


def wait_for(predicate, timeout: float = WAIT) -> bool:
    """True as soon as ``predicate()`` is, False after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def subscribe_sync(conn, listener: Collector, destination: str, sub_id: str, **kw) -> None:
    """SUBSCRIBE and wait for its RECEIPT."""
    headers = dict(kw.pop("headers", {}))
    receipt = f"sub-{sub_id}-{time.monotonic_ns()}"
    headers["receipt"] = receipt
    conn.subscribe(destination, id=sub_id, headers=headers, **kw)
    assert wait_for(lambda: receipt in listener.receipts)
