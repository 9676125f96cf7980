"""Recovery: scan a journal directory, replay it, classify what ends each file.

Theory of operation (the outcomes are described in the package docstring):

1. ``discover`` the layout's files and check each one's FILE_HEADER record:
   a valid header, a blank file (zeros: an unused ring file, or a growing
   file whose creation was cut by a crash), or a damaged header.
2. Order the files with a header by their header seq: the log order. For the
   ring that is not the name order; the last-written file is the one with
   the highest header seq. A damaged or blank file can only be the file the
   writer was rolling into when it crashed (the ring successor of the last
   file, or the growing file with the highest id); anywhere else it is
   corruption.
3. Replay every record of every file into a ``JournalIndex``. Within a file
   seqs must increase by one; a CRC-valid record with a wrong seq or body is
   corruption wherever it is.
4. Classify where each file's records end (``_classify``): a clean end, a
   torn tail (last file only) or corruption.

``scan_directory`` never modifies a file: ``Journal.open`` cuts the torn tail
it reports, ``inspect`` only shows it, and ``repair`` keeps a ``.broken`` copy
of each damaged file and truncates it at the last good record.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import shutil
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from storage.bodies import (
    Layout,
    decode_dequeue,
    decode_dequeue_many,
    decode_enqueue,
    decode_file_header,
    decode_ref,
)
from storage.errors import CorruptRecord, StorageError, StoreFailed, TornWrite
from storage.fileio import file_ops
from storage.growing import GrowingLayout
from storage.index import JournalIndex
from storage.model import JournalConfig
from storage.record import HEADER, HEADER_SIZE, RecordType, Status, check, find_valid_after, scan
from storage.ring import _NAME as _RING_NAME
from storage.ring import RingLayout
from storage.segment import Segment, fsync_directory, numbered_files

__all__ = [
    "RecoveryReport",
    "RepairAction",
    "ScanResult",
    "detect_config",
    "make_layout",
    "repair",
    "scan_directory",
]

LayoutPolicy = RingLayout | GrowingLayout


def make_layout(config: JournalConfig) -> LayoutPolicy:
    return RingLayout(config) if config.layout == "ring" else GrowingLayout(config)


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What ``Journal.open`` found: outcome ``new``, ``clean`` or ``torn``."""

    outcome: str
    files: int
    records: int
    live: int
    torn: TornWrite | None = None
    aborted_txids: tuple[bytes, ...] = ()
    #: unfinished transactions committed at open because their decision was given (``Journal.open``)
    committed_txids: tuple[bytes, ...] = ()


@dataclass(frozen=True, slots=True)
class RepairAction:
    """One damaged file ``repair`` truncated, and where it kept the original."""

    file: str
    offset: int
    broken_copy: str
    reason: str


@dataclass(slots=True)
class ScanResult:
    """A replayed journal directory; ``damage`` is a torn tail not yet cut."""

    segments: dict[int, Segment]
    order: list[int]
    index: JournalIndex
    next_seq: int
    records: int
    damage: TornWrite | None = None


# -- replaying records -----------------------------------------------------------

Apply = Callable[[JournalIndex, bytes, int, int, int, int, dict[bytes, bytes], int], None]
# Each takes the record at ``data[off:end]``, which is at ``base + off`` in its file.


def _enqueue(
    index: JournalIndex, data: bytes, fid: int, seq: int, off: int, end: int, keys: dict[bytes, bytes], base: int
) -> None:
    key, txid, _ = decode_enqueue(data, off, end)
    index.enqueue(seq, keys.setdefault(key, key), txid, fid, base + off, base + end)


def _dequeue(
    index: JournalIndex, data: bytes, fid: int, seq: int, off: int, end: int, keys: dict[bytes, bytes], base: int
) -> None:
    ref, txid = decode_dequeue(data, off, end)
    index.dequeue(seq, ref, txid, fid, base + end)


def _dequeue_many(
    index: JournalIndex, data: bytes, fid: int, seq: int, off: int, end: int, keys: dict[bytes, bytes], base: int
) -> None:
    index.dequeue_many(seq, decode_dequeue_many(data, off, end), fid, base + end)


def _commit(
    index: JournalIndex, data: bytes, fid: int, seq: int, off: int, end: int, keys: dict[bytes, bytes], base: int
) -> None:
    index.commit(seq, data[off + HEADER_SIZE : end], fid, base + end)


def _abort(
    index: JournalIndex, data: bytes, fid: int, seq: int, off: int, end: int, keys: dict[bytes, bytes], base: int
) -> None:
    index.abort(seq, data[off + HEADER_SIZE : end], fid, base + end)


def _delivered(
    index: JournalIndex, data: bytes, fid: int, seq: int, off: int, end: int, keys: dict[bytes, bytes], base: int
) -> None:
    index.delivered(seq, decode_ref(data, off, end), fid, base + end)


def _misplaced_header(
    index: JournalIndex, data: bytes, fid: int, seq: int, off: int, end: int, keys: dict[bytes, bytes], base: int
) -> None:
    raise ValueError("a file header record inside a file")


_APPLY: dict[int, Apply] = {
    RecordType.FILE_HEADER: _misplaced_header,
    RecordType.ENQUEUE: _enqueue,
    RecordType.DEQUEUE: _dequeue,
    RecordType.TX_COMMIT: _commit,
    RecordType.TX_ABORT: _abort,
    RecordType.DELIVERED: _delivered,
    RecordType.DEQUEUE_MANY: _dequeue_many,
}


#: Recovery reads a file this many bytes at a time (a longer record, whole): its
#: memory is a window, not a file of ``max_file_length`` (32 MB by default).
_WINDOW = 1 << 20
_SEEK_DATA: int | None = getattr(os, "SEEK_DATA", None)  # Linux, the BSDs, macOS


def _replay(
    index: JournalIndex, seg: Segment, header_seq: int, header_end: int, keys: dict[bytes, bytes], is_last: bool
) -> tuple[int, int, TornWrite | None]:
    """Replay one file, a window at a time; returns (last seq, records, torn tail)
    or raises CorruptRecord.

    A window that ends before the file may cut its last record: the next window
    starts at that record, and is made long enough for it if its header says it
    is longer than a window. Where the records really end is classified as
    ``_classify`` says; only a file that is damaged there is read whole.
    """
    index.add_file(seg.file_id, header_seq, header_end)
    expected = header_seq + 1
    fid = seg.file_id
    enqueue = _APPLY[RecordType.ENQUEUE]
    ops = file_ops()
    with _descriptor(seg) as fd:
        size = os.fstat(fd).st_size
        pos, want = header_end, _WINDOW
        while True:
            data = ops.pread(fd, min(want, max(size - pos, 0)), pos)
            records = scan(data, 0)
            off = 0
            try:
                for rtype, seq, off, end in records:
                    if seq != expected:
                        raise CorruptRecord(seg.name, pos + off, f"seq {seq} where {expected} was expected")
                    if rtype == RecordType.ENQUEUE:  # most records: skip the table lookup
                        enqueue(index, data, fid, seq, off, end, keys, pos)
                    else:
                        _APPLY[rtype](index, data, fid, seq, off, end, keys, pos)
                    expected += 1
            except (ValueError, struct.error) as err:
                raise CorruptRecord(seg.name, pos + off, f"malformed body: {err}") from None
            if pos + len(data) >= size:  # this window reaches the end of the file
                break
            need = _record_length(data, records.stop)
            if need <= len(data) - records.stop:  # a whole record that is not valid: the end (or damage)
                break
            pos, want = pos + records.stop, max(_WINDOW, need)  # read on from the record the window cut
        stop = pos + records.stop
        clean = records.status is Status.END and _zeros(fd, stop, size)
    seg.offset = seg.flushed = stop
    damage = None
    if not clean:  # damage, or stray bytes after the end: decided on the whole file
        data = seg.read_all()
        status, _, _, bad_end, reason = check(data, memoryview(data), stop)
        damage = _classify(seg.name, data, stop, status, reason, bad_end, expected - 1, is_last)
    return expected - 1, expected - header_seq, damage


@contextlib.contextmanager
def _descriptor(seg: Segment) -> Iterator[int]:
    """A descriptor to read ``seg`` with, opened and closed through the file seam."""
    ops = file_ops()
    fd = ops.open(seg.path, os.O_RDONLY)
    try:
        yield fd
    finally:
        ops.close(fd)


@contextlib.contextmanager
def _reading(store: str, seg: Segment) -> Iterator[None]:
    """A read of ``seg`` that fails is a store that failed, naming the file: the
    broker refuses to start rather than recover what it could not read."""
    try:
        yield
    except OSError as exc:
        raise StoreFailed(store, f"reading {seg.path}", exc) from None


def _record_length(data: bytes, offset: int) -> int:
    """How long the record at ``offset`` says it is (its header's length, if whole)."""
    if len(data) - offset < HEADER_SIZE:
        return HEADER_SIZE
    length: int = HEADER.unpack_from(data, offset)[4]
    return HEADER_SIZE + length


def _zeros(fd: int, start: int, size: int) -> bool:
    """Is the file all zeros from ``start`` to ``size``?

    Holes are skipped unread (``SEEK_DATA``: a file preallocated with
    ``ftruncate`` is one hole past its data); what is left is read a window at
    a time. Where the file system cannot tell holes, everything is read.
    """
    while start < size:
        try:
            start = os.lseek(fd, start, _SEEK_DATA) if _SEEK_DATA is not None else start
        except OSError as err:
            if err.errno == errno.ENXIO:  # no data from ``start`` to the end of the file
                return True
            if err.errno != errno.EINVAL:  # EINVAL: holes unknown here; just read
                raise
        if start >= size:
            return True
        chunk = file_ops().pread(fd, min(_WINDOW, size - start), start)
        if not chunk or chunk.count(0) != len(chunk):
            return not chunk
        start += len(chunk)
    return True


def _classify(
    name: str, data: bytes, stop: int, status: Status, reason: str, bad_end: int, last_seq: int, is_last: bool
) -> TornWrite | None:
    """What the place where a file's records stop means (see the package docstring)."""
    if status is Status.END:
        if data.count(0, stop) == len(data) - stop:
            return None
        reason = "stray bytes after the end of the data"
    if not is_last:
        raise CorruptRecord(name, stop, reason)
    if find_valid_after(data, stop, last_seq) != -1:
        raise CorruptRecord(name, stop, f"{reason}; valid records follow")
    looks_cut = status is not Status.BAD or bad_end >= len(data) or data[bad_end - 1] == 0
    if not looks_cut:
        raise CorruptRecord(name, stop, f"{reason} in the final record")
    return TornWrite(name, stop, reason)


# -- scanning a directory -----------------------------------------------------------


_PROBE = 64  # bytes read to check a file header (the header record is 36)


def _read_header(layout: LayoutPolicy, seg: Segment) -> tuple[str, int, int]:
    """("ok", header seq, header end) | ("blank", 0, 0) | ("damaged", 0, 0).

    Reads only the start of the file unless it starts with zeros (then the
    rest a window at a time, to tell blank from damaged); raises
    ``StorageError`` if a valid header belongs to another journal or config.
    """
    probe = seg.read_head(_PROBE)
    status, rtype, seq, end, _ = check(probe, memoryview(probe), 0)
    if status is Status.END:  # starts with zeros: blank only if zeros to the end (read in windows)
        with _descriptor(seg) as fd:
            blank = _zeros(fd, 0, os.fstat(fd).st_size)
        return ("blank" if blank else "damaged"), 0, 0
    header = decode_file_header(probe, 0, end) if status is Status.OK else None
    if header is None or rtype != RecordType.FILE_HEADER:
        return "damaged", 0, 0
    if header.layout != layout.code or header.file_id != seg.file_id:
        raise StorageError(
            f"{seg.name} belongs to a {Layout.NAMES.get(header.layout, '?')} journal file "
            f"{header.file_id}, not to this {Layout.NAMES[layout.code]} journal"
        )
    if layout.fixed_files and header.capacity != layout.size:
        raise StorageError(f"{seg.name} was written for {header.capacity}-byte files; the config says {layout.size}")
    seg.capacity = header.capacity
    return "ok", seq, end


def scan_directory(config: JournalConfig, layout: LayoutPolicy | None = None) -> ScanResult:
    """Replay the journal in ``config.directory`` without modifying any file.

    Raises ``CorruptRecord`` on damage before the tail and ``StorageError`` if
    the files do not match the config; a torn tail is returned as ``damage``.
    """
    layout = layout or make_layout(config)
    directory = config.path
    paths = layout.discover(directory) if directory.is_dir() else {}
    other = replace(config, layout="growing" if isinstance(layout, RingLayout) else "ring")
    if directory.is_dir() and make_layout(other).discover(directory):
        raise StorageError(f"{directory} holds {other.layout} journal files; the config says {config.layout}")
    segments = {fid: Segment(path, fid, layout.capacity(fid), reserve=layout.reserves) for fid, path in paths.items()}
    headed: list[tuple[int, int, int]] = []  # (header seq, file id, header end)
    loose: dict[int, str] = {}  # blank or damaged files
    for fid in sorted(segments):
        with _reading(config.queue_name, segments[fid]):
            state, seq, header_end = _read_header(layout, segments[fid])
        if state == "ok":
            headed.append((seq, fid, header_end))
        elif not (state == "blank" and layout.fixed_files):  # an unused ring file is fine
            loose[fid] = state
    headed.sort()
    if not layout.fixed_files and [f for _, f, _ in headed] != sorted(f for _, f, _ in headed):
        raise StorageError(f"{directory}: file ids and header seqs disagree on the log order")

    # Only the file the writer was rolling into may lack a valid header.
    if isinstance(layout, RingLayout):
        rolling = (headed[-1][1] + 1) % layout.count if headed else 0
    else:
        rolling = max(segments, default=-1)
    for fid, state in loose.items():
        if fid != rolling:
            raise CorruptRecord(segments[fid].name, 0, f"{state} file header inside the log")

    index = JournalIndex(config.index_cache_rows, config.directory)
    keys: dict[bytes, bytes] = {}
    last_seq, records, damage = 0, 0, None
    # Replay allocates an object per live message and creates no cycles; the
    # cyclic collector would rescan them all again and again (a third of the
    # time for a million records), so it is paused (process-wide) meanwhile.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for position, (seq, fid, header_end) in enumerate(headed):
            if seq <= last_seq:
                raise CorruptRecord(segments[fid].name, 0, f"header seq {seq} is not after {last_seq}")
            is_last = position == len(headed) - 1 and rolling not in loose
            with _reading(config.queue_name, segments[fid]):
                last_seq, count, damage = _replay(index, segments[fid], seq, header_end, keys, is_last)
            records += count
    finally:
        if collecting:
            gc.enable()
    if rolling in loose:
        name = segments[rolling].name
        if loose[rolling] == "blank":
            damage = TornWrite(name, 0, "file created but its header never written")
        else:
            with _reading(config.queue_name, segments[rolling]):
                data = segments[rolling].read_all()
            status, _, _, bad_end, reason = check(data, memoryview(data), 0)
            if status is Status.OK:
                raise CorruptRecord(name, 0, "the first record is not a file header")
            damage = _classify(name, data, 0, status, reason or "damaged file header", bad_end, last_seq, True)
    return ScanResult(
        segments=segments,
        order=[fid for _, fid, _ in headed],
        index=index,
        next_seq=last_seq + 1,
        records=records,
        damage=damage,
    )


# -- offline helpers ------------------------------------------------------------------


def detect_config(directory: str | os.PathLike[str]) -> JournalConfig:
    """The config of the journal in ``directory``, read from its files' headers."""
    path = Path(directory)
    # The files themselves say how many there are: no count to check against yet.
    ring_files = numbered_files(path, _RING_NAME) if path.is_dir() else {}
    if not ring_files:
        grow = GrowingLayout(JournalConfig(directory=path, layout="growing"))
        sizes = [os.path.getsize(p) for p in grow.discover(path).values()] if path.is_dir() else []
        length = max([s for s in sizes if s >= 256], default=32 * 1024 * 1024)
        return JournalConfig(directory=path, layout="growing", max_file_length=length)
    sizes = [os.path.getsize(p) for p in ring_files.values()]
    return JournalConfig(directory=path, layout="ring", file_count=len(ring_files), file_size=max(sizes))


def _broken_name(path: Path) -> Path:
    candidate = path.with_name(path.name + ".broken")
    number = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.broken.{number}")
        number += 1
    return candidate


def repair(directory: str | os.PathLike[str], config: JournalConfig | None = None) -> list[RepairAction]:
    """Cut every damaged file of the journal in ``directory`` at its last good record.

    Each damaged file is first copied to ``<name>.broken`` (etcd's
    ``repair.go``); records after the damage are lost, so messages whose
    dequeue was among them come back (at-least-once). Returns what was done;
    an empty list means the journal was already clean.
    """
    config = config or detect_config(directory)
    actions: list[RepairAction] = []
    while True:
        try:
            damage: CorruptRecord | TornWrite | None = scan_directory(config).damage
        except CorruptRecord as err:
            damage = err
        if damage is None:
            return actions
        path = config.path / damage.file
        if os.path.getsize(path) <= damage.offset:
            return actions  # nothing left to cut: open handles the rest
        broken = _broken_name(path)
        shutil.copy2(path, broken)
        file_ops().truncate(path, damage.offset)
        Segment(path, 0, 0).fsync()
        fsync_directory(config.path)
        actions.append(RepairAction(damage.file, damage.offset, broken.name, damage.reason))
