"""Record bodies: the per-type layout inside a record (see the package docstring).

Encoders return a list of parts for ``record.encode`` (so a payload is never
copied before the single write); decoders take the record's bytes and its
offsets, so recovery never slices a payload it does not need.
"""

from __future__ import annotations

import struct
import sys
import zlib
from array import array
from collections.abc import Sequence
from typing import NamedTuple, NoReturn

from storage.errors import CorruptRecord
from storage.record import HEADER, HEADER_SIZE, MAGIC, RecordType, check

__all__ = [
    "FORMAT_VERSION",
    "FileHeader",
    "Layout",
    "as_bytes",
    "decode_dequeue",
    "decode_dequeue_many",
    "decode_enqueue",
    "decode_file_header",
    "decode_ref",
    "encode_dequeue",
    "encode_dequeue_many",
    "encode_enqueue",
    "encode_file_header",
    "encode_ref",
    "ENQUEUE_FIXED",
    "verified_payload",
    "verified_payloads",
]

#: Written in every file header. Version 2 may hold DEQUEUE_MANY records; a
#: version 1 file (written before them) is still read.
FORMAT_VERSION = 2
_READABLE_VERSIONS = (1, 2)
_FILE_HEADER = struct.Struct("<BBHIQ")  # version, layout, reserved, file_id, capacity
_ENQUEUE = struct.Struct("<HH")  # key length, txid length
_DEQUEUE = struct.Struct("<QH")  # enqueue seq, txid length
_REF = struct.Struct("<Q")  # DELIVERED: enqueue seq
_MAX_ID = 0xFFFF
#: An ENQUEUE record's header and fixed body part: where its key starts.
ENQUEUE_FIXED = HEADER_SIZE + _ENQUEUE.size
_ENQUEUE_TYPE = int(RecordType.ENQUEUE)


class Layout:
    """The layout codes stored in a file header."""

    RING = 1
    GROWING = 2
    TEMP = 3
    NAMES = {RING: "ring", GROWING: "growing", TEMP: "temp"}


class FileHeader(NamedTuple):
    """The body of a FILE_HEADER record."""

    version: int
    layout: int
    file_id: int
    capacity: int


def as_bytes(value: bytes | str, what: str) -> bytes:
    """A key or txid as bytes (a ``str`` is UTF-8 encoded); at most 65535 bytes."""
    raw = value.encode() if isinstance(value, str) else bytes(value)
    if len(raw) > _MAX_ID:
        raise ValueError(f"{what} is {len(raw)} bytes; at most {_MAX_ID} are allowed")
    return raw


def encode_file_header(layout: int, file_id: int, capacity: int) -> list[bytes]:
    return [_FILE_HEADER.pack(FORMAT_VERSION, layout, 0, file_id, capacity)]


def decode_file_header(data: bytes, offset: int, end: int) -> FileHeader | None:
    """The header's fields, or None if the body has the wrong size or version."""
    if end - offset - HEADER_SIZE != _FILE_HEADER.size:
        return None
    version, layout, _, file_id, capacity = _FILE_HEADER.unpack_from(data, offset + HEADER_SIZE)
    if version not in _READABLE_VERSIONS:
        return None
    return FileHeader(version, layout, file_id, capacity)


def encode_enqueue(key: bytes, txid: bytes, payload: bytes) -> list[bytes]:
    return [_ENQUEUE.pack(len(key), len(txid)), key, txid, payload]


def decode_enqueue(data: bytes, offset: int, end: int) -> tuple[bytes, bytes, int]:
    """``(key, txid, payload_offset)`` of the ENQUEUE record at ``offset``."""
    start = offset + HEADER_SIZE
    klen, tlen = _ENQUEUE.unpack_from(data, start)
    k = start + 4
    t = k + klen
    p = t + tlen
    if p > end:
        raise ValueError("enqueue body is shorter than its key and txid")
    return data[k:t], data[t:p], p


def verified_payload(data: bytes, seq: int, file: str, offset: int) -> bytes:
    """The payload of the ENQUEUE record ``seq`` that fills ``data``, which is at
    ``offset`` of ``file``: checked as ``verified_payloads`` checks each of its records."""
    return verified_payloads(data, offset, (offset,), (len(data),), (seq,), file)[0]


def verified_payloads(
    data: bytes, base: int, offsets: Sequence[int], lengths: Sequence[int], seqs: Sequence[int], file: str
) -> list[bytes]:
    """The payloads of the ENQUEUE records ``seqs`` in ``data``, which holds
    ``file`` from its offset ``base`` on: record k at ``offsets[k]`` of the file,
    ``lengths[k]`` bytes long (a page-in reads a span of neighbours at once).

    Each is checked in place, without copying the record: header, type, seq,
    length and CRC. Raises ``CorruptRecord`` (naming ``file`` and the record's
    offset) with what is wrong if one is not that record intact.
    """
    out: list[bytes] = []
    append = out.append
    view = memoryview(data)
    size = len(data)
    unpack_header, unpack_enqueue, crc32 = HEADER.unpack_from, _ENQUEUE.unpack_from, zlib.crc32
    for offset, length, seq in zip(offsets, lengths, seqs, strict=True):
        at = offset - base
        end = at + length
        if length >= ENQUEUE_FIXED and end <= size:
            crc, magic, rtype, flags, body_length, found = unpack_header(data, at)
            if (
                magic == MAGIC
                and rtype == _ENQUEUE_TYPE
                and not flags
                and found == seq
                and HEADER_SIZE + body_length == length
                and crc32(view[at + 4 : end]) == crc
            ):
                klen, tlen = unpack_enqueue(data, at + HEADER_SIZE)
                append(data[at + ENQUEUE_FIXED + klen + tlen : end])
                continue
        view.release()
        _refuse(data[at:end], seq, file, offset)
    view.release()
    return out


def _refuse(record: bytes, seq: int, file: str, offset: int) -> NoReturn:
    """Raise ``CorruptRecord`` saying why ``record`` is not the ENQUEUE record ``seq``."""
    _, rtype, found, record_end, reason = check(record, memoryview(record), 0)
    if not reason:
        reason = (
            f"expected enqueue {seq}, found record {found}"
            if rtype != RecordType.ENQUEUE or found != seq
            else "the enqueue record does not fill its span"
            if record_end != len(record)
            else "the enqueue body is shorter than its key and txid lengths"
        )
    raise CorruptRecord(file, offset, reason)


def encode_dequeue(ref: int, txid: bytes) -> list[bytes]:
    return [_DEQUEUE.pack(ref, len(txid)), txid]


def decode_dequeue(data: bytes, offset: int, end: int) -> tuple[int, bytes]:
    """``(enqueue seq, txid)`` of the DEQUEUE record at ``offset``."""
    start = offset + HEADER_SIZE
    ref, tlen = _DEQUEUE.unpack_from(data, start)
    t = start + _DEQUEUE.size
    if t + tlen != end:
        raise ValueError("dequeue body length does not match its txid length")
    return ref, data[t:end]


def encode_dequeue_many(refs: array[int]) -> list[bytes]:
    """The body of a DEQUEUE_MANY record: the enqueue seqs, little-endian u64 each."""
    if sys.byteorder != "little":
        refs = array("Q", refs)
        refs.byteswap()
    return [refs.tobytes()]


def decode_dequeue_many(data: bytes, offset: int, end: int) -> array[int]:
    """The enqueue seqs a DEQUEUE_MANY record removes."""
    start = offset + HEADER_SIZE
    if (end - start) % 8 or end == start:
        raise ValueError("a dequeue-many body is not a non-empty run of 8-byte seqs")
    refs = array("Q", data[start:end])
    if sys.byteorder != "little":
        refs.byteswap()
    return refs


def encode_ref(ref: int) -> list[bytes]:
    return [_REF.pack(ref)]


def decode_ref(data: bytes, offset: int, end: int) -> int:
    """The enqueue seq a DELIVERED record refers to."""
    if end - offset - HEADER_SIZE != _REF.size:
        raise ValueError("delivered body is not 8 bytes")
    return int(_REF.unpack_from(data, offset + HEADER_SIZE)[0])
