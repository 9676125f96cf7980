"""A persistent message's bytes in a journal record (the store's payload format).

A fixed prefix, then the message-id and the headers as STOMP
1.2 puts them on the wire, then the body (version 2)::

    <BBBxqqQ  version=2, flags (bit 0 persistent, bit 1 plain headers),
              priority, pad, expires (ms), timestamp (ms), broker seq
    <III      length of the message-id, length of the header block, and
              (plain headers) the characters of their names and values
    id        the message-id, escaped as STOMP 1.2
    headers   "name:value\\n" lines, escaped as STOMP 1.2
    body

"Plain" headers are ASCII without escapes: a page-in leaves them undecoded
until something needs them (``decode_messages``), and the lengths in the
prefix spare it any search. Version 1 payloads (one length, then a block with a
``message-id`` line first) are still read.

The broker seq is kept so a restarted broker continues the sequence and
recovered messages keep their place and their message ids.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import NamedTuple

from minibroker.protocol.codec import decode_header_block, encode_headers, escape
from minibroker.protocol.message import Message, message_id_from_wire

__all__ = ["StoredMessage", "decode_messages", "decode_meta", "decode_payload", "encode_payload", "encode_wire_payload"]

_PREFIX = struct.Struct("<BBBxqqQ")
#: Version 2: the prefix and the three lengths, written and read at once.
_PREFIX_V2 = struct.Struct("<BBBxqqQIII")
_pack_v2 = _PREFIX_V2.pack
_unpack_v2 = _PREFIX_V2.unpack_from
#: Where the message-id starts in a version 2 payload.
_ID_START = _PREFIX_V2.size
#: Version 1: the prefix and the length of the block (message-id line, then headers).
_PREFIX_AND_LENGTH = struct.Struct("<BBBxqqQI")
_unpack_v1 = _PREFIX_AND_LENGTH.unpack_from
_BLOCK_START = _PREFIX_AND_LENGTH.size
_VERSION = 2
_VERSIONS = (1, 2)
_PERSISTENT, _PLAIN = 1, 2


class StoredMessage(NamedTuple):
    """A message decoded from its payload, whole (a page-in makes ``Message``s
    straight from the payloads instead: ``decode_messages``)."""

    seq: int
    message_id: str
    headers: dict[str, str]
    body: bytes
    persistent: bool
    priority: int
    expires: int
    timestamp: int
    #: The headers (all but message-id) as STOMP 1.2 puts them on the wire: the
    #: stored block is written that way, so a paged-in message needs no re-encoding.
    wire_headers: bytes | None = None
    #: The message-id as escaped on the wire.
    wire_message_id: bytes | None = None


def encode_payload(
    seq: int,
    message_id: str,
    headers: dict[str, str],
    body: bytes,
    *,
    persistent: bool,
    priority: int,
    expires: int,
    timestamp: int,
) -> bytes:
    """The journal payload of a message (see the module docstring)."""
    return encode_wire_payload(
        seq,
        escape(message_id, "1.2").encode("utf-8"),
        encode_headers(headers.items(), "1.2"),
        body,
        persistent=persistent,
        priority=priority,
        expires=expires,
        timestamp=timestamp,
    )


def encode_wire_payload(
    seq: int,
    message_id_wire: bytes,
    wire_headers: bytes,
    body: bytes,
    *,
    persistent: bool,
    priority: int,
    expires: int,
    timestamp: int,
) -> bytes:
    """``encode_payload`` for a message whose id and headers are already STOMP 1.2
    wire text (``Message.message_id_wire``, ``Message.wire_headers``)."""
    flags = _PERSISTENT if persistent else 0
    chars = 0
    if wire_headers.isascii() and b"\\" not in wire_headers:
        flags |= _PLAIN
        chars = len(wire_headers) - 2 * wire_headers.count(b"\n")  # each line is name:value\n
    prefix = _pack_v2(
        _VERSION, flags, priority, expires, timestamp, seq, len(message_id_wire), len(wire_headers), chars
    )
    return b"".join((prefix, message_id_wire, wire_headers, body))


def decode_meta(payload: bytes) -> tuple[int, int, int]:
    """(broker seq, priority, expires) from a payload's prefix alone."""
    version, _flags, priority, expires, _ts, seq = _PREFIX.unpack_from(payload)
    if version not in _VERSIONS:
        raise ValueError(f"unknown message payload version {version}")
    return seq, priority, expires


def decode_payload(payload: bytes) -> StoredMessage:
    """The message a payload holds, decoded whole."""
    if payload[0] == 2:
        _, flags, priority, expires, timestamp, seq, id_length, length, _ = _unpack_v2(payload)
        start = _ID_START + id_length
        end = start + length
        if end > len(payload):
            raise ValueError(f"message payload of {len(payload)} bytes is shorter than its lengths say ({end})")
        wire_id, wire_headers, body = payload[_ID_START:start], payload[start:end], payload[end:]
        return StoredMessage(
            seq,
            message_id_from_wire(wire_id),
            decode_header_block(wire_headers),
            body,
            flags & _PERSISTENT == 1,
            priority,
            expires,
            timestamp,
            wire_headers,
            wire_id,
        )
    version, flags, priority, expires, timestamp, seq, length = _unpack_v1(payload)
    if version != 1:
        raise ValueError(f"unknown message payload version {version}")
    end = _BLOCK_START + length
    if not payload.startswith(b"message-id:", _BLOCK_START):  # version 1 always wrote it first
        raise ValueError("message payload does not start with its message-id")
    eol = payload.index(b"\n", _BLOCK_START, end)
    wire_id, wire_headers, body = payload[_BLOCK_START + 11 : eol], payload[eol + 1 : end], payload[end:]
    return StoredMessage(
        seq,
        message_id_from_wire(wire_id),
        decode_header_block(wire_headers),
        body,
        flags & 1 == 1,
        priority,
        expires,
        timestamp,
        wire_headers,
        wire_id,
    )


def decode_messages(payloads: Iterable[bytes], seqs: Iterable[int], address: str) -> list[Message]:
    """The ``Message``s of a page-in, made straight from their payloads: broker
    seq ``seqs[k]``, destination ``address``.

    Theory of operation: a page-in makes hundreds at a time, and a dispatch
    needs only the wire form, so where the stored header block is plain (a
    version 2 payload whose block is ASCII without escapes: the usual case)
    nothing is decoded: the message keeps the block and the escaped
    message-id as they are stored, with the block's characters (for its
    memory charge) from the prefix, and ``Message`` decodes them on first use
    (a selector, a 1.0 or 1.1 consumer, a DLQ copy, a trace). Any other payload
    (escapes, or version 1) is decoded whole (``decode_payload``).
    """
    out: list[Message] = []
    append = out.append
    for payload, seq in zip(payloads, seqs, strict=False):
        if payload[0] == 2:
            _, flags, priority, expires, timestamp, _, id_length, length, chars = _unpack_v2(payload)
            start = _ID_START + id_length
            end = start + length
            if flags & _PLAIN and end <= len(payload):
                # By position (see Message.__init__): persistent, priority, expires, timestamp,
                # origin, message_id_wire, wire_headers, header_chars.
                append(
                    Message(
                        seq,
                        None,
                        address,
                        None,
                        payload[end:],
                        flags & _PERSISTENT == 1,
                        priority,
                        expires,
                        timestamp,
                        0,
                        payload[_ID_START:start],
                        payload[start:end],
                        chars,
                    )
                )
                continue
        stored = decode_payload(payload)
        append(
            Message(
                seq,
                stored.message_id,
                address,
                stored.headers,
                stored.body,
                stored.persistent,
                stored.priority,
                stored.expires,
                stored.timestamp,
                0,
                stored.wire_message_id,
                stored.wire_headers,
            )
        )
    return out
