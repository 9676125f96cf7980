"""Record framing over hand-built byte strings (etcd's ``record_test.go``).

Each case is a byte string and what ``decode`` must say about it: a record, or
END / SHORT / BAD. The bytes are built here with ``struct`` and ``zlib``, not
with ``encode``, so the test checks the format as documented, not the code
against itself.
"""

from __future__ import annotations

import struct
import zlib
from array import array

import pytest

from storage.bodies import (
    decode_dequeue,
    decode_dequeue_many,
    decode_enqueue,
    decode_file_header,
    decode_ref,
    encode_dequeue,
    encode_dequeue_many,
    encode_enqueue,
    encode_file_header,
    encode_ref,
    verified_payload,
)
from storage.errors import CorruptRecord
from storage.record import (
    HEADER_SIZE,
    Record,
    RecordType,
    Status,
    decode,
    encode,
    find_valid_after,
    scan,
)


def frame(rtype: int, seq: int, body: bytes, *, magic: int = 0x424D, flags: int = 0) -> bytes:
    """A record built by hand from the documented layout."""
    tail = struct.pack("<HBBIQ", magic, rtype, flags, len(body), seq)
    return struct.pack("<I", zlib.crc32(tail + body)) + tail + body


BODY = struct.pack("<HH", 6, 0) + b"orders" + b"hello, world"
FULL = frame(RecordType.ENQUEUE, 7, BODY)
EMPTY_BODY = frame(RecordType.TX_COMMIT, 9, b"")


def flipped(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def zeroed(data: bytes, start: int, end: int) -> bytes:
    return data[:start] + bytes(end - start) + data[end:]


CASES: list[tuple[str, bytes, Record | Status]] = [
    ("full", FULL, Record(RecordType.ENQUEUE, 7, 0, len(FULL), BODY)),
    ("empty body", EMPTY_BODY, Record(RecordType.TX_COMMIT, 9, 0, HEADER_SIZE, b"")),
    ("trailing bytes are not read", FULL + b"\x01\x02", Record(RecordType.ENQUEUE, 7, 0, len(FULL), BODY)),
    ("no bytes", b"", Status.END),
    ("zero header", bytes(HEADER_SIZE), Status.END),
    ("a few zeros", bytes(7), Status.END),
    ("cut inside the crc", FULL[:3], Status.SHORT),
    ("cut inside the header", FULL[: HEADER_SIZE - 1], Status.SHORT),
    ("cut after the header", FULL[:HEADER_SIZE], Status.SHORT),
    ("cut inside the body", FULL[: len(FULL) // 2], Status.SHORT),
    ("last byte missing", FULL[:-1], Status.SHORT),
    ("crc byte flipped", flipped(FULL, 0), Status.BAD),
    ("magic flipped", flipped(FULL, 4), Status.BAD),
    ("type flipped", flipped(FULL, 6), Status.BAD),
    ("flags set", flipped(FULL, 7), Status.BAD),
    ("length grown past the end", flipped(FULL, 8), Status.SHORT),
    ("seq flipped", flipped(FULL, 12), Status.BAD),
    ("first body byte flipped", flipped(FULL, HEADER_SIZE), Status.BAD),
    ("last byte flipped", flipped(FULL, len(FULL) - 1), Status.BAD),
    ("body zeroed", zeroed(FULL, HEADER_SIZE, len(FULL)), Status.BAD),
    ("tail zeroed (torn write in preallocated space)", zeroed(FULL, 30, len(FULL)), Status.BAD),
    ("header zeroed, body kept", zeroed(FULL, 0, HEADER_SIZE), Status.END),
    ("type 0", frame(0, 1, b"x"), Status.BAD),
    ("unknown type", frame(99, 1, b"x"), Status.BAD),
    ("wrong magic with a good crc", frame(RecordType.ENQUEUE, 1, BODY, magic=0x4D42), Status.BAD),
]


@pytest.mark.parametrize(("data", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decode(data: bytes, expected: Record | Status) -> None:
    assert decode(data) == expected


@pytest.mark.parametrize(("data", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_decode_at_an_offset(data: bytes, expected: Record | Status) -> None:
    """The same bytes after a valid record decode the same way at their offset."""
    prefix = frame(RecordType.DELIVERED, 1, struct.pack("<Q", 5))
    got = decode(prefix + data, len(prefix))
    if isinstance(expected, Record):
        expected = expected._replace(offset=len(prefix))
    assert got == expected


def test_encode_matches_the_hand_built_frame() -> None:
    assert encode(RecordType.ENQUEUE, 7, [BODY[:4], BODY[4:10], BODY[10:]]) == FULL
    assert encode(RecordType.TX_COMMIT, 9, []) == EMPTY_BODY


def test_scan_stops_at_the_first_bad_record() -> None:
    second = frame(RecordType.TX_ABORT, 8, b"t")
    data = FULL + second + flipped(FULL, 20) + FULL
    records = scan(data, 0)
    assert [(r[0], r[1]) for r in records] == [(RecordType.ENQUEUE, 7), (RecordType.TX_ABORT, 8)]
    assert records.status is Status.BAD
    assert records.stop == len(FULL) + len(second)
    assert records.reason == "crc mismatch"


def test_scan_of_preallocated_space_ends_cleanly() -> None:
    records = scan(FULL + bytes(100), 0)
    assert len(list(records)) == 1
    assert (records.status, records.stop) == (Status.END, len(FULL))


def test_find_valid_after_skips_damage_and_older_seqs() -> None:
    later = frame(RecordType.TX_COMMIT, 12, b"t")
    data = zeroed(FULL, 25, 40) + b"MB junk" + later
    assert find_valid_after(data, 0, min_seq=7) == len(data) - len(later)
    assert find_valid_after(data, 0, min_seq=12) == -1
    assert find_valid_after(bytes(64), 0, min_seq=0) == -1


BODY_CASES = [
    (RecordType.ENQUEUE, encode_enqueue(b"k", b"tx", b"payload"), decode_enqueue, (b"k", b"tx", 27)),
    (RecordType.ENQUEUE, encode_enqueue(b"", b"", b""), decode_enqueue, (b"", b"", 24)),
    (RecordType.DEQUEUE, encode_dequeue(42, b"tx"), decode_dequeue, (42, b"tx")),
    (RecordType.DEQUEUE, encode_dequeue(2**64 - 1, b""), decode_dequeue, (2**64 - 1, b"")),
    (RecordType.DELIVERED, encode_ref(3), decode_ref, 3),
    (
        RecordType.DEQUEUE_MANY,
        encode_dequeue_many(array("Q", [7, 2**64 - 1, 9])),
        decode_dequeue_many,
        array("Q", [7, 2**64 - 1, 9]),
    ),
]


@pytest.mark.parametrize(("rtype", "parts", "decoder", "expected"), BODY_CASES)
def test_bodies_round_trip(rtype: int, parts: list[bytes], decoder: object, expected: object) -> None:
    data = encode(rtype, 1, parts)
    assert decoder(data, 0, len(data)) == expected  # type: ignore[operator]


def test_file_header_round_trip_and_version_check() -> None:
    data = encode(RecordType.FILE_HEADER, 1, encode_file_header(1, 5, 4096))
    assert decode_file_header(data, 0, len(data)) == (2, 1, 5, 4096)
    old = encode(RecordType.FILE_HEADER, 1, [b"\x01" + encode_file_header(1, 5, 4096)[0][1:]])
    assert decode_file_header(old, 0, len(old)) == (1, 1, 5, 4096)  # written before DEQUEUE_MANY: still read
    for version in (b"\x00", b"\x03"):
        wrong = encode(RecordType.FILE_HEADER, 1, [version + encode_file_header(1, 5, 4096)[0][1:]])
        assert decode_file_header(wrong, 0, len(wrong)) is None


def test_malformed_bodies_are_rejected() -> None:
    short_enqueue = frame(RecordType.ENQUEUE, 1, struct.pack("<HH", 50, 0) + b"k")
    with pytest.raises(ValueError):
        decode_enqueue(short_enqueue, 0, len(short_enqueue))
    long_dequeue = frame(RecordType.DEQUEUE, 1, struct.pack("<QH", 1, 0) + b"extra")
    with pytest.raises(ValueError):
        decode_dequeue(long_dequeue, 0, len(long_dequeue))
    for body in (b"", b"\x01" * 12):  # empty, or not a whole number of seqs
        many = frame(RecordType.DEQUEUE_MANY, 1, body)
        with pytest.raises(ValueError):
            decode_dequeue_many(many, 0, len(many))


def test_verified_payload_names_the_file_and_offset() -> None:
    assert verified_payload(FULL, 7, "f", 0) == b"hello, world"
    with pytest.raises(CorruptRecord, match=r"in f at offset 100: expected enqueue 8"):
        verified_payload(FULL, 8, "f", 100)
    with pytest.raises(CorruptRecord, match="crc mismatch"):
        verified_payload(flipped(FULL, 30), 7, "f", 0)
