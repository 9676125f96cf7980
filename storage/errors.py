"""The storage error hierarchy.

``StorageError`` is the base of everything this package raises on purpose.
Recovery has three outcomes (clean end, ``TornWrite``, ``CorruptRecord``); a
full journal has two (``EnqueueThresholdExceeded`` for a refused enqueue, the
Qpid legacystore's message word for word, and ``JournalFull`` when even a
dequeue, commit, abort or marker cannot be written). A file system that
fails has two: ``StoreFull`` (no space: the operation was refused and left no
trace) and ``StoreFailed`` (anything else, a failed fsync above all: final;
see ``fileio.py``). Programming errors (a
dequeue of an unknown seq, a closed journal) are ``KeyError`` / ``ValueError``
and propagate as such.
"""

from __future__ import annotations

__all__ = [
    "CorruptRecord",
    "EnqueueThresholdExceeded",
    "JournalFull",
    "StorageError",
    "StoreFailed",
    "StoreFull",
    "TornWrite",
]


class StorageError(Exception):
    """Base class of the errors the storage package raises."""


class _Damage(StorageError):
    """Damage found at a place in a file (shared shape of the two outcomes)."""

    kind = "damage"

    def __init__(self, file: str, offset: int, reason: str) -> None:
        self.file = file
        self.offset = offset
        self.reason = reason
        super().__init__(f"{self.kind} in {file} at offset {offset}: {reason}")


class TornWrite(_Damage):
    """The last-written file ends in a record that was cut by a crash.

    ``Journal.open`` handles it itself (it zeroes the tail and continues);
    scanning functions raise it so that a caller (inspection, repair) can say
    what open would cut.
    """

    kind = "torn write"


class CorruptRecord(_Damage):
    """A record before the tail of the log is damaged: the journal will not start.

    Run ``storage.repair(directory)`` to keep a ``.broken`` copy of the file and
    truncate it at the last good record.
    """

    kind = "corrupt record"


class EnqueueThresholdExceeded(StorageError):
    """The ring refused an enqueue: its look-ahead reached a file still in use.

    The message is the Qpid legacystore's (``JournalImpl.cpp``) word for word.
    """

    def __init__(self, name: str, file_id: int, offset: int, needed: int) -> None:
        self.name = name
        self.file_id = file_id
        self.offset = offset
        self.needed = needed
        super().__init__(f'Enqueue capacity threshold exceeded on queue "{name}".')


class JournalFull(StorageError):
    """A record cannot be written at all: the next file still holds live enqueues."""

    def __init__(self, name: str, file_id: int, live: int) -> None:
        self.name = name
        self.file_id = file_id
        self.live = live
        super().__init__(f'Journal full on queue "{name}": next file {file_id} still holds {live} live enqueue(s).')


class StoreFull(StorageError):
    """The disk (or a quota) is full: a write or an allocation was refused.

    Whatever the call wrote was cut back: the store is exactly as before it,
    and the same operation may succeed once space returns.
    """

    def __init__(self, store: str, what: str, error: OSError) -> None:
        self.store = store
        self.what = what
        self.error = error
        super().__init__(f'Store "{store}" has no space left: {what} failed: {error.strerror or error}')


class StoreFailed(StorageError):
    """The file system failed the store in a way nothing can undo (fail-stop).

    A failed fsync above all: the pages it covered may be lost while the file
    still reads back intact, so no later fsync can prove them durable. The
    journal refuses every operation afterwards; what was durable before is
    what the next start recovers.
    """

    def __init__(self, store: str, what: str, error: BaseException) -> None:
        self.store = store
        self.what = what
        self.error = error
        text = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        code = f"[Errno {error.errno}] " if isinstance(error, OSError) and error.errno else ""
        super().__init__(f'Store "{store}" failed: {what}: {code}{text}')
