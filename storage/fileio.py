"""The one seam between ``storage`` and the file system.

Every file operation of this package that can fail in a way the broker must
answer for (open, read, write, preallocate, fsync, rename, truncate, unlink,
making a directory, and the fsync of a directory) goes through the ``FileOps`` object that ``file_ops()``
returns. Tests install another one (``using``) to make any call fail with
EIO or ENOSPC, write short, or fail an fsync, without patching ``os``.

Theory of operation: what a failure means, and who decides
------------------------------------------------------------
The seam only moves bytes; the meaning of an error is decided by its callers,
in two classes (``errors.py``):

``StoreFull``
    ENOSPC or EDQUOT on a write or an allocation, cut back so the file is
    exactly as it was before the call. Nothing was promised, nothing was lost:
    the operation is refused and may be tried again when space returns.
``StoreFailed``
    anything else, and any failed fsync. After a failed fsync the pages it
    covered may be gone from the page cache while the file looks intact
    (PostgreSQL's and etcd's "fsyncgate" lesson): a retry that succeeds
    proves nothing. The journal refuses everything from then on, and what was
    durable before is what the next start recovers.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["FileOps", "NO_SPACE_ERRNOS", "file_ops", "is_no_space", "using"]

#: The errors that mean "no room", not "broken".
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})

PathLike = str | os.PathLike[str]


def is_no_space(exc: BaseException) -> bool:
    """Is ``exc`` a full disk (or quota), as opposed to a failing one?"""
    return isinstance(exc, OSError) and exc.errno in NO_SPACE_ERRNOS


class FileOps:
    """The real file operations (thin wrappers of ``os``); subclass to inject faults.

    Each method is one system call (``fsync_directory`` and ``replace_file``
    are the usual short sequences of them), so a subclass can fail any one.
    """

    def open(self, path: PathLike, flags: int, mode: int = 0o644) -> int:
        return os.open(path, flags, mode)

    def close(self, fd: int) -> None:
        os.close(fd)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        """Write at ``offset``; may write fewer bytes than given (a short write)."""
        return os.pwrite(fd, data, offset)

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        """Read up to ``length`` bytes at ``offset``."""
        return os.pread(fd, length, offset)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        """Reserve disk blocks for ``[offset, offset + length)`` (ENOSPC when there are none)."""
        try:
            os.posix_fallocate(fd, offset, length)
        except OSError as exc:
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            # A file system without fallocate: the writes themselves will say when the disk is full.

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def truncate(self, path: PathLike, length: int) -> None:
        os.truncate(path, length)

    def replace(self, source: PathLike, target: PathLike) -> None:
        """Rename ``source`` over ``target`` (atomic on POSIX)."""
        os.replace(source, target)

    def unlink(self, path: PathLike) -> None:
        os.unlink(path)

    def mkdir(self, path: PathLike) -> None:
        """Make one directory (its parent exists)."""
        os.mkdir(path)

    def fsync_directory(self, directory: PathLike) -> None:
        """Make a created, renamed or deleted entry of ``directory`` durable."""
        fd = self.open(directory, os.O_RDONLY)
        try:
            self.fsync(fd)
        finally:
            self.close(fd)

    # -- short sequences of the calls above ------------------------------------------------

    def write_all(self, fd: int, data: bytes | memoryview, offset: int) -> None:
        """``pwrite`` until all of ``data`` is at ``offset``. An error after a short
        write leaves the bytes written so far in the file (``OSError.written`` says
        how many), for the caller to cut back."""
        view = memoryview(data)
        done = 0
        try:
            while done < len(view):
                n = self.pwrite(fd, view[done:], offset + done)
                if n <= 0:
                    raise OSError(errno.EIO, f"write returned {n}")
                done += n
        except OSError as exc:
            exc.written = done  # type: ignore[attr-defined]
            raise

    def read_file(self, path: PathLike, length: int | None = None) -> bytes:
        """The first ``length`` bytes of ``path`` (None: all of it; fewer if it is shorter)."""
        fd = self.open(path, os.O_RDONLY)
        try:
            if length is None:
                length = os.fstat(fd).st_size
            parts: list[bytes] = []
            done = 0
            while done < length:
                chunk = self.pread(fd, length - done, done)
                if not chunk:
                    break
                parts.append(chunk)
                done += len(chunk)
            return b"".join(parts)
        finally:
            self.close(fd)

    def make_directory(self, path: PathLike) -> None:
        """Make ``path`` and its missing parents, each made durable (its parent
        fsynced after it), so a power loss cannot take a directory the store
        wrote into. Nothing happens to a directory that exists."""
        target = Path(path)
        missing: list[Path] = []
        while not target.is_dir():
            missing.append(target)
            if target.parent == target:
                break
            target = target.parent
        for directory in reversed(missing):
            try:
                self.mkdir(directory)
            except FileExistsError:
                if not directory.is_dir():
                    raise
                continue  # made meanwhile by another: its maker fsyncs the parent
            self.fsync_directory(directory.parent)

    def replace_file(self, path: PathLike, data: bytes) -> None:
        """Write ``path`` atomically: a temporary file, fsynced, renamed over it, then
        the directory fsynced, so the new content (or the old) survives a crash."""
        target = Path(path)
        tmp = target.with_name(target.name + ".tmp")
        fd = self.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            self.write_all(fd, data, 0)
            self.fsync(fd)
        finally:
            self.close(fd)
        self.replace(tmp, target)
        self.fsync_directory(target.parent)


_current: FileOps = FileOps()


def file_ops() -> FileOps:
    """The ``FileOps`` every storage file operation goes through now."""
    return _current


@contextlib.contextmanager
def using(ops: FileOps) -> Iterator[FileOps]:
    """Route storage's file operations through ``ops`` inside the block (tests)."""
    global _current
    previous, _current = _current, ops
    try:
        yield ops
    finally:
        _current = previous
