"""Messages inside the broker.

A ``Message`` is built once from a SEND frame and then shared: a queue holds
it until one consumer acknowledges it, a topic hands the same object to every
subscription. Its headers and body never change after construction; what
changes is delivery bookkeeping (``redeliveries``) and two caches:

- the *wire tail*: the encoded headers (escaped for the receiver's version),
  ``content-length``, the blank line, the body and the NUL. A MESSAGE frame is
  the per-delivery head (``subscription``, ``message-id``, ``ack``,
  ``redelivered``) followed by this tail, so a message delivered to four
  topic subscribers is encoded once, not four times.
- ``size``: memory charged for it, as ActiveMQ does: a fixed 1024 bytes of
  overhead plus the headers and the body (``Message.getSize``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from minibroker.protocol.codec import FRAME_END, decode_header_block, encode_headers, escape, unescape

__all__ = [
    "Message",
    "MESSAGE_OVERHEAD",
    "BROKER_SET_HEADERS",
    "LAYOUT_CACHE",
    "SEND_BLOCK",
    "message_id_from_wire",
    "send_block",
    "moved_copy",
]

#: Fixed per-message memory charge (ActiveMQ ``Message.getSize``).
MESSAGE_OVERHEAD = 1024

#: Headers the broker sets on MESSAGE: a client cannot forge them on SEND.
BROKER_SET_HEADERS = frozenset(
    {"message-id", "subscription", "ack", "redelivered", "destination", "receipt", "transaction", "content-length"}
)


#: The last lines of a MESSAGE's header block for a message that never expires, of the default priority.
_DEFAULT_END = "expires:0\npriority:4\n"

#: SEND headers the broker rewrites in place (``handlers._make_message``): a SEND naming one
#: takes the general path (``persistent:true`` excepted: it stays as it is).
_REWRITTEN_HEADERS = frozenset({"timestamp", "expires", "priority", "reply-to", "persistent"})


#: SEND layouts (their header names, in order) -> (where the lines a MESSAGE keeps are
#: among the head's lines, how many of the names the broker rewrites): what ``send_block``
#: works out once per layout, for a producer sends the same layout again and again.
_LAYOUTS: dict[tuple[str, ...], tuple[tuple[int, ...], int]] = {}
#: The most layouts kept (then forgotten all at once: a client cannot grow the broker with them).
_LAYOUTS_KEPT = 256
#: Make a MESSAGE's header block from its SEND's lines (``send_block``); the tests turn it
#: off to hold the broker to building the header dict and encoding it.
SEND_BLOCK = True
#: Keep each layout worked out (``_kept_layout``); the tests turn it off to hold the broker
#: to working each one out.
LAYOUT_CACHE = True


def _layout(names: tuple[str, ...]) -> tuple[tuple[int, ...], int]:
    """The layout of ``names``: where the lines a MESSAGE keeps are among the head's
    lines, and how many of the names the broker rewrites."""
    return (
        tuple(i for i, name in enumerate(names, 1) if name not in BROKER_SET_HEADERS),
        len(_REWRITTEN_HEADERS.intersection(names)),
    )


def _kept_layout(names: tuple[str, ...]) -> tuple[tuple[int, ...], int]:
    """``_layout(names)``, worked out once and kept in ``_LAYOUTS``."""
    layout = _LAYOUTS.get(names)
    if layout is None:
        if len(_LAYOUTS) >= _LAYOUTS_KEPT:
            _LAYOUTS.clear()
        layout = _LAYOUTS[names] = _layout(names)
    return layout


def send_block(
    head: str,
    headers: dict[str, str],
    address: str,
    timestamp: int,
    expires: int,
    priority: int,
    lines: list[str] | None = None,
) -> tuple[bytes, int] | None:
    """A MESSAGE's STOMP 1.2 header block made from a SEND's head as received.

    Theory of operation: the broker's headers for a message are the SEND's
    headers without the ones it sets itself (``BROKER_SET_HEADERS``), after
    ``destination`` and followed by ``timestamp``, ``expires`` and ``priority``
    (``handlers._make_message`` builds that dict). When the SEND's head
    (``ParsedHeaders.head``: command line, then ``name:value`` lines) holds no
    escape, one colon per line and no repeated name, its lines already are
    their own 1.2 encoding, so the block is those lines minus the broker-set
    ones, with the broker's lines around them: the bytes ``encode_headers``
    would give for the dict, without building or encoding it. Which lines those
    are depends only on the names, in order (the dict's order is the lines', as no
    name repeats): it is worked out once per layout (``_LAYOUTS``). ``lines`` is
    ``head`` split at its line ends, if the caller has it (``ParsedHeaders.lines``).
    Returns (block, characters of its names and values), or None where the head
    does not qualify (the caller builds the dict instead).
    """
    # Measured on the compiled core: 29% fewer instructions per queued message (docs/benchmarks.md).
    if not SEND_BLOCK:
        return None
    if lines is None:
        lines = head.split("\n")
    count = len(lines) - 1
    if len(headers) != count or head.count(":") != count or "\\" in head:
        return None
    names = tuple(headers)
    # Measured on the compiled core: 11% fewer instructions per queued message (docs/benchmarks.md).
    kept, rewritten = _kept_layout(names) if LAYOUT_CACHE else _layout(names)
    if rewritten and (rewritten > 1 or headers.get("persistent") != "true"):
        return None
    if address != headers.get("destination") and (
        "\\" in address or ":" in address or "\n" in address or "\r" in address
    ):
        return None
    block = ["destination:" + address]
    block += map(lines.__getitem__, kept)
    block.append(f"timestamp:{timestamp}")
    block.append(_DEFAULT_END if expires == 0 and priority == 4 else f"expires:{expires}\npriority:{priority}\n")
    text = "\n".join(block)
    # Every line is one name, one colon, one value and its EOL: 4 lines of the broker's own.
    return text.encode("utf-8"), len(text) - 2 * (len(kept) + 4)


def message_id_from_wire(wire_id: bytes) -> str:
    """The message-id whose STOMP 1.2 wire form is ``wire_id``."""
    colons = wire_id.replace(b"\\c", b":")
    if b"\\" not in colons:  # only colons were escaped (the broker's ids): no unescape call
        return colons.decode("utf-8")
    return unescape(wire_id.decode("utf-8"), "1.2")  # an escaped backslash leaves one behind


class Message:
    """One message: immutable content plus delivery bookkeeping."""

    __slots__ = (
        "seq",
        "_message_id",
        "destination",
        "_headers",
        "_wire_headers",
        "body",
        "persistent",
        "priority",
        "expires",
        "timestamp",
        "size",
        "redeliveries",
        "origin",
        "store_ref",
        "refs",
        "_tail",
        "_tail10",
        "_mid_wire",
    )

    def __init__(
        self,
        seq: int,
        message_id: str | None,
        destination: str,
        headers: Mapping[str, str] | None,
        body: bytes,
        persistent: bool = False,
        priority: int = 4,
        expires: int = 0,
        timestamp: int = 0,
        origin: int = 0,
        message_id_wire: bytes | None = None,
        wire_headers: bytes | None = None,
        header_chars: int = 0,
    ) -> None:
        # The hot paths (a SEND, a page-in) pass every argument by position: with
        # keywords, making a Message costs a dict more, about twice as much.
        #: Broker-wide arrival order; FIFO means ordered by ``seq``.
        self.seq = seq
        # None (a page-in) until first use: made from ``message_id_wire``, which must then be given.
        self._message_id = message_id
        #: Full destination address, e.g. ``/queue/orders``.
        self.destination = destination
        # Every header the consumer will see besides the per-delivery ones (``headers``);
        # None until first use for a paged-in message, whose ``wire_headers`` hold them.
        self._headers = headers
        self._wire_headers = wire_headers
        self.body = body
        self.persistent = persistent
        self.priority = priority
        #: Expiry, ms since the epoch; 0 = never.
        self.expires = expires
        self.timestamp = timestamp
        #: The session id of the producer (for noLocal and diagnostics).
        self.origin = origin
        self.redeliveries = 0
        #: Where it is in the journal, when persisted (a ``persistence.StoreRef``).
        self.store_ref: Any = None
        #: Holders (a queue, or topic subscriptions) keeping it in memory.
        self.refs = 0
        if message_id is None and message_id_wire is None:
            raise ValueError("a message needs its message-id, or its wire form")
        if headers is None:
            if wire_headers is None:
                raise ValueError("a message needs its headers, or their wire form")
            self.size = MESSAGE_OVERHEAD + len(body) + header_chars
        else:
            self.size = MESSAGE_OVERHEAD + len(body) + sum(map(len, headers)) + sum(map(len, headers.values()))
        # The 1.2 tail (``tail``), made at the first dispatch: a message that goes to the
        # store only (past the cursor's mark) never needs it, and a cached one would
        # hold its body twice meanwhile.
        self._tail: bytes | None = None
        self._tail10: bytes | None = None
        #: The message-id as escaped on the wire (1.1, 1.2), when the creator knows it.
        self._mid_wire: bytes | None = message_id_wire

    @property
    def message_id(self) -> str:
        """The ``message-id`` header's value."""
        message_id = self._message_id
        if message_id is None:
            assert self._mid_wire is not None
            message_id = self._message_id = message_id_from_wire(self._mid_wire)
        return message_id

    @property
    def headers(self) -> Mapping[str, str]:
        """Every header the consumer will see besides the per-delivery ones."""
        headers = self._headers
        if headers is None:
            assert self._wire_headers is not None
            headers = self._headers = decode_header_block(self._wire_headers)
        return headers

    @property
    def wire_headers(self) -> bytes:
        """Every header of ``headers`` as STOMP 1.2 ``name:value`` lines (as stored in the journal)."""
        if self._wire_headers is None:
            self._wire_headers = encode_headers(self.headers.items(), "1.2", strict=False)
        return self._wire_headers

    def tail(self, version: str) -> bytes:
        """Headers, content-length, blank line, body and the frame's end, for ``version``."""
        if version == "1.0":
            if self._tail10 is None:
                self._tail10 = self._build_tail("1.0")
            return self._tail10
        if self._tail is None:
            body = self.body
            self._tail = b"".join((self.wire_headers, b"content-length:%d\n\n" % len(body), body, FRAME_END))
        if version == "1.1" and b"\\r" in self._tail:
            return self._build_tail("1.1")  # 1.1 has no \\r escape: rare, not cached
        return self._tail

    def rest(self, version: str) -> bytes:
        """What follows the ``message-id:`` of a MESSAGE frame where nothing more is per
        delivery (an auto-ack delivery, not a redelivery): the message-id, its EOL and
        ``tail``. For 1.2, made in one join, not from a kept tail (a single delivery
        would copy the body once more for nothing)."""
        if version != "1.2":
            return b"".join((self.message_id_wire(version), b"\n", self.tail(version)))
        mid, wire, body = self._mid_wire, self._wire_headers, self.body
        if mid is None or wire is None:  # made on first use (the usual SEND and page-in have both)
            mid, wire = self.message_id_wire("1.2"), self.wire_headers
        return b"".join((mid, b"\n", wire, b"content-length:%d\n\n" % len(body), body, FRAME_END))

    def _build_tail(self, version: str) -> bytes:
        return b"".join(
            (
                encode_headers(self.headers.items(), version, strict=False),
                b"content-length:%d\n\n" % len(self.body),
                self.body,
                FRAME_END,
            )
        )

    def message_id_wire(self, version: str) -> bytes:
        """The ``message-id`` value as it goes on the wire (escaped from 1.1)."""
        if version == "1.0":
            return self.message_id.encode("utf-8")
        if self._mid_wire is None:
            self._mid_wire = escape(self.message_id, "1.2").encode("utf-8")
        return self._mid_wire

    def is_expired(self, now_ms: int) -> bool:
        """True once the ``expires`` time has passed."""
        return 0 < self.expires <= now_ms

    def header_view(self) -> dict[str, str]:
        """Headers as a consumer's selector sees them (with ``message-id``)."""
        view = dict(self.headers)
        view["message-id"] = self.message_id
        return view

    def __repr__(self) -> str:
        return f"<Message {self.message_id} {self.destination} seq={self.seq} size={self.size}>"


def moved_copy(
    message: Message, address: str, extra: Mapping[str, str] | None = None, *, expires: int | None = None
) -> Message:
    """``message`` for another destination (a dead letter queue, an admin move):
    the same id, headers (``destination`` changed, ``extra`` added), body,
    persistence and priority; its redelivery count starts again at 0."""
    headers = dict(message.headers)
    headers["destination"] = address
    if extra:
        headers.update(extra)
    # By position (see Message.__init__): persistent, priority, expires, timestamp, origin.
    return Message(
        message.seq,
        message.message_id,
        address,
        headers,
        message.body,
        message.persistent,
        message.priority,
        message.expires if expires is None else expires,
        message.timestamp,
        message.origin,
    )
