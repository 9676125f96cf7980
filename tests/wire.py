"""A blocking STOMP connection over a real socket, for tests of the real server."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from minibroker.frames import Frame
from minibroker.protocol import FrameParser, encode


class Wire:
    """One socket to the broker: send frames, read until the frame a test waits for."""

    def __init__(self, address: tuple[str, int], timeout: float = 20.0) -> None:
        self.sock = socket.create_connection(address, timeout=timeout)
        self.timeout = timeout
        self.parser = FrameParser(role="client", version="1.2")
        self.frames: list[Frame] = []
        self.closed = False

    def send(self, command: str, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.sock.sendall(encode(Frame(command, headers or {}, body), self.parser.version))

    def connect(self, **headers: str) -> Frame:
        """CONNECT (STOMP 1.2) and return the CONNECTED or ERROR frame."""
        self.sock.sendall(encode(Frame("CONNECT", {"accept-version": "1.2", "host": "localhost", **headers})))
        return self.until(lambda f: f.command in ("CONNECTED", "ERROR"))

    def until(self, wanted: Callable[[Frame], bool]) -> Frame:
        """Read until a frame ``wanted`` accepts arrives (kept with the others in ``frames``)."""
        deadline = time.monotonic() + self.timeout
        seen = 0
        while True:
            for frame in self.frames[seen:]:
                if wanted(frame):
                    return frame
            seen = len(self.frames)
            if self.closed or time.monotonic() > deadline:
                raise AssertionError(f"the frame waited for never came; got {[f.command for f in self.frames]}")
            self.read_some()

    def read_some(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            self.closed = True
        self.frames += self.parser.feed(data)

    def until_closed(self) -> list[Frame]:
        """Read until the broker closes the socket; every frame received."""
        while not self.closed:
            self.read_some()
        return self.frames

    def receipt(self, receipt_id: str) -> Frame:
        return self.until(lambda f: f.command in ("RECEIPT", "ERROR") and f.headers.get("receipt-id") == receipt_id)

    def close(self) -> None:
        self.sock.close()
