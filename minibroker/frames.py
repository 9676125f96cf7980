"""STOMP frames as immutable values, and the command vocabulary.

A ``Frame`` is what the codec produces and consumes: a command, an ordered
mapping of headers (the first of a repeated header wins, so there is exactly
one value per name) and a body of bytes. Frames are frozen; code that needs a
variant builds a new one (``frame.with_headers(...)``) instead of mutating.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "Frame",
    "ParsedHeaders",
    "CLIENT_COMMANDS",
    "SERVER_COMMANDS",
    "BODY_COMMANDS",
    "VERSIONS",
]

#: Frames a client may send (STOMP 1.2 section "Client Frames").
CLIENT_COMMANDS = frozenset(
    {
        "CONNECT",
        "STOMP",
        "SEND",
        "SUBSCRIBE",
        "UNSUBSCRIBE",
        "ACK",
        "NACK",
        "BEGIN",
        "COMMIT",
        "ABORT",
        "DISCONNECT",
    }
)
#: Frames a server sends.
SERVER_COMMANDS = frozenset({"CONNECTED", "MESSAGE", "RECEIPT", "ERROR"})
#: The only frames that may carry a body.
BODY_COMMANDS = frozenset({"SEND", "MESSAGE", "ERROR"})
#: Protocol versions this implementation speaks, lowest first.
VERSIONS = ("1.0", "1.1", "1.2")


class ParsedHeaders(dict[str, str]):
    """A parsed frame's headers (a ``dict``), with the head they were read from.

    ``head`` is the frame's command line and header lines exactly as received
    (LF line ends, nothing unescaped), or None where the codec did not keep it
    (CRLF line ends); ``lines`` is the same split at its line ends (the list the
    codec read it by), or None with it. The broker passes a SEND's header lines
    through to the MESSAGE as they are when nothing in them changes
    (``message.send_block``) instead of encoding its dict again. Compares equal
    to a plain dict.
    """

    __slots__ = ("head", "lines")
    head: str | None
    lines: list[str] | None


class Frame(NamedTuple):
    """One STOMP frame: immutable; ``headers`` must not be mutated.

    A NamedTuple rather than a frozen dataclass: frames are built for every
    message on the hot path and a tuple is three times cheaper to construct
    (measured: 0.3 us against 0.9 us), with the same immutability.
    ``headers`` is typed as the ``dict`` it is (a ``ParsedHeaders`` where the
    codec made the frame), not as a read-only ``Mapping``: the compiled build
    reads a ``dict`` with dict operations, a ``Mapping`` by method calls.
    """

    command: str
    headers: dict[str, str] = {}
    body: bytes = b""

    def get(self, name: str, default: str | None = None) -> str | None:
        """The value of header ``name``, or ``default``."""
        return self.headers.get(name, default)

    def with_headers(self, **extra: str) -> Frame:
        """A copy with ``extra`` headers added (or replaced)."""
        merged = dict(self.headers)
        merged.update(extra)
        return Frame(self.command, merged, self.body)

    def __repr__(self) -> str:
        body = self.body if len(self.body) <= 40 else self.body[:40] + b"..."
        return f"Frame({self.command!r}, {dict(self.headers)!r}, {body!r})"
