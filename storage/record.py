"""Record framing: a CRC-checked header and a body (see the package docstring).

Theory of operation: ``encode`` builds one record as a single ``bytes`` so the
writer issues one ``write`` per record. ``check`` is the one place that decides
whether the bytes at an offset are a record; it answers with a ``Status``
rather than an exception, because what a bad record *means* (torn tail or
corruption) depends on where it is, which only the segment scanner knows:

========  ============================================================
OK        a whole record whose CRC matches
END       no bytes left, or a header of zeros: the data ends here
SHORT     the bytes end inside the header or inside the body
BAD       wrong magic, unknown type, non-zero flags or a CRC mismatch
========  ============================================================

``scan`` walks records from an offset until the first non-OK status, and
``find_valid_after`` looks past damage for a later valid record (by the magic),
which is how recovery tells a torn tail from corruption in the last file.
"""

from __future__ import annotations

import enum
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import NamedTuple

__all__ = [
    "HEADER",
    "HEADER_SIZE",
    "MAGIC",
    "Record",
    "RecordType",
    "Status",
    "check",
    "decode",
    "encode",
    "find_valid_after",
    "scan",
]

HEADER = struct.Struct("<IHBBIQ")  # crc32, magic, type, flags, length, seq
HEADER_SIZE = HEADER.size  # 20
MAGIC = 0x424D  # b"MB" little-endian
MAGIC_BYTES = struct.pack("<H", MAGIC)
_TAIL = struct.Struct("<HBBIQ")  # the header after the crc: what the crc covers first
_CRC = struct.Struct("<I")
_ZERO_HEADER = bytes(HEADER_SIZE)
_crc32 = zlib.crc32


class RecordType(enum.IntEnum):
    """The record types; 0 is never a type, so a zero header is "no record"."""

    FILE_HEADER = 1
    ENQUEUE = 2
    DEQUEUE = 3
    TX_COMMIT = 4
    TX_ABORT = 5
    DELIVERED = 6
    DEQUEUE_MANY = 7


_TYPES = frozenset(int(t) for t in RecordType)


class Status(enum.Enum):
    """What ``check`` found at an offset."""

    OK = "ok"
    END = "end"
    SHORT = "short"
    BAD = "bad"


class Record(NamedTuple):
    """A decoded record: its type, seq, where it starts, its total length, its body."""

    rtype: RecordType
    seq: int
    offset: int
    length: int
    body: bytes


def encode(rtype: int, seq: int, parts: Sequence[bytes], body_length: int = -1) -> bytes:
    """Return the bytes of one record whose body is the concatenation of ``parts``.

    ``body_length`` saves summing the parts when the caller already knows it.
    """
    if body_length < 0:
        body_length = sum(map(len, parts))
    tail = _TAIL.pack(MAGIC, rtype, 0, body_length, seq)
    crc = _crc32(tail)
    for part in parts:
        if part:
            crc = _crc32(part, crc)
    return b"".join((_CRC.pack(crc), tail, *parts))


def check(data: bytes, view: memoryview, offset: int) -> tuple[Status, int, int, int, str]:
    """Check the record at ``offset`` of ``data`` (``view`` is ``memoryview(data)``).

    Returns ``(status, rtype, seq, end, reason)``; ``end`` is the offset just
    after the record (for SHORT/BAD, where it would end if its length is
    believable, else the end of the data).
    """
    size = len(data)
    if size - offset < HEADER_SIZE:
        if not any(view[offset:]):
            return Status.END, 0, 0, size, "end of data"
        return Status.SHORT, 0, 0, size, "the data ends inside a record header"
    crc, magic, rtype, flags, length, seq = HEADER.unpack_from(data, offset)
    end = offset + HEADER_SIZE + length
    if magic != MAGIC or rtype not in _TYPES or flags:
        if data[offset : offset + HEADER_SIZE] == _ZERO_HEADER:
            return Status.END, 0, 0, offset, "zero header"
        return Status.BAD, rtype, seq, min(end, size), "not a record header"
    if end > size:
        return Status.SHORT, rtype, seq, size, f"a {length}-byte body runs past the end"
    if _crc32(view[offset + 4 : end]) != crc:
        return Status.BAD, rtype, seq, end, "crc mismatch"
    return Status.OK, rtype, seq, end, ""


def decode(data: bytes, offset: int = 0) -> Record | Status:
    """Decode the record at ``offset``: a ``Record``, or the non-OK ``Status``."""
    status, rtype, seq, end, _ = check(data, memoryview(data), offset)
    if status is not Status.OK:
        return status
    body = data[offset + HEADER_SIZE : end]
    return Record(RecordType(rtype), seq, offset, end - offset, body)


class scan:  # noqa: N801 - used like a function: ``for ... in scan(data, 0)``
    """Iterate the records of ``data`` from ``start`` as ``(rtype, seq, offset, end)``.

    Iteration stops at the first non-OK record; afterwards ``stop`` is the
    offset where it stopped, ``status`` the ``Status`` found there, ``reason``
    a word on it and ``bad_end`` where the record found there would end.
    """

    def __init__(self, data: bytes, start: int) -> None:
        self.data = data
        self.stop = start
        self.status = Status.OK
        self.reason = ""
        self.bad_end = start

    def __iter__(self) -> Iterator[tuple[int, int, int, int]]:
        # Recovery spends most of its time here, so a whole, valid record is
        # accepted inline; anything else goes to ``check``, which decides (and
        # says why) exactly as it would have for the whole record.
        data = self.data
        view = memoryview(data)
        size = len(data)
        unpack, crc32, types, header_size = HEADER.unpack_from, _crc32, _TYPES, HEADER_SIZE
        offset = self.stop
        try:
            while True:
                if offset + header_size <= size:
                    crc, magic, rtype, flags, length, seq = unpack(data, offset)
                    end = offset + header_size + length
                    if (
                        magic == MAGIC
                        and rtype in types
                        and not flags
                        and end <= size
                        and crc32(view[offset + 4 : end]) == crc
                    ):
                        yield rtype, seq, offset, end
                        offset = end
                        continue
                status, rtype, seq, end, reason = check(data, view, offset)
                if status is not Status.OK:  # pragma: no branch - the inline test agrees
                    self.status, self.reason, self.bad_end = status, reason, end
                    return
        finally:
            self.stop = offset
            view.release()


def find_valid_after(data: bytes, start: int, min_seq: int) -> int:
    """Offset of the first valid record after ``start`` with seq > ``min_seq``, or -1.

    Candidates are found by the magic, so this costs one ``find`` per stray
    "MB" in the damaged region; it only runs when recovery meets damage.
    """
    view = memoryview(data)
    try:
        at = data.find(MAGIC_BYTES, start + 5)
        while at != -1:
            offset = at - 4
            status, _, seq, _, _ = check(data, view, offset)
            if status is Status.OK and seq > min_seq:
                return offset
            at = data.find(MAGIC_BYTES, at + 1)
        return -1
    finally:
        view.release()
