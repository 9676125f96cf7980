"""Test support: a ``FileOps`` that fails chosen calls, and a disk that fills up.

Installed with ``storage.fileio.using`` (never by patching ``os``): only the
storage package's file operations see the faults.
"""

from __future__ import annotations

import errno
import os
import threading
from dataclasses import dataclass, field

from storage.fileio import FileOps


@dataclass
class Fault:
    """Fail the calls of ``op`` (after ``skip`` of them pass) ``times`` times with
    ``error``. With ``short``, a ``pwrite`` writes only that many bytes and says
    so, as a real short write does, and the call that would write the rest
    fails. ``path``: only calls on files whose path contains it."""

    op: str
    error: int = errno.EIO
    skip: int = 0
    times: int = 1
    short: int = 0
    path: str | None = None
    fired: int = 0
    seen: int = field(default=0, repr=False)


class FaultyFileOps(FileOps):
    """Real file operations, failing where a ``Fault`` says; ``calls`` logs them all.

    ``free`` (bytes, None: unlimited) models a disk that fills: ``fallocate``
    takes blocks from it (ENOSPC when there are not enough), and deleting a
    file gives its blocks back. Writes into reserved blocks always succeed, as
    on a real file system.
    """

    def __init__(self, free: int | None = None) -> None:
        self.faults: list[Fault] = []
        self.calls: list[tuple[str, str]] = []
        self.free = free
        self._paths: dict[int, str] = {}
        #: fd -> the error its next pwrite raises (the rest of a short write).
        self._then: dict[int, int] = {}
        self._allocated: dict[str, int] = {}
        self._lock = threading.Lock()

    def fail(self, op: str, error: int = errno.EIO, **kwargs: object) -> Fault:
        fault = Fault(op, error, **kwargs)  # type: ignore[arg-type]
        self.faults.append(fault)
        return fault

    def _check(self, op: str, path: str) -> Fault | None:
        with self._lock:
            self.calls.append((op, path))
            for fault in self.faults:
                if fault.op != op or (fault.path is not None and fault.path not in path):
                    continue
                fault.seen += 1
                if fault.seen > fault.skip and fault.fired < fault.times:
                    fault.fired += 1
                    return fault
        return None

    def _raise(self, fault: Fault, path: str) -> None:
        raise OSError(fault.error, os.strerror(fault.error), path)

    def open(self, path, flags, mode=0o644):  # type: ignore[no-untyped-def]
        text = os.fspath(path)
        fault = self._check("open", text)
        if fault is not None:
            self._raise(fault, text)
        fd = super().open(path, flags, mode)
        self._paths[fd] = text
        return fd

    def close(self, fd: int) -> None:
        self._paths.pop(fd, None)
        super().close(fd)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        path = self._paths.get(fd, "")
        then = self._then.pop(fd, None)
        if then is not None:
            raise OSError(then, os.strerror(then), path)
        fault = self._check("pwrite", path)
        if fault is not None:
            if fault.short:
                self._then[fd] = fault.error
                return os.pwrite(fd, bytes(data[: fault.short]), offset)
            self._raise(fault, path)
        return super().pwrite(fd, data, offset)

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        path = self._paths.get(fd, "")
        fault = self._check("pread", path)
        if fault is not None:
            self._raise(fault, path)
        return super().pread(fd, length, offset)

    def fsync(self, fd: int) -> None:
        path = self._paths.get(fd, "")
        fault = self._check("fsync", path)
        if fault is not None:
            self._raise(fault, path)
        super().fsync(fd)

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        path = self._paths.get(fd, "")
        fault = self._check("fallocate", path)
        if fault is not None:
            self._raise(fault, path)
        with self._lock:
            if self.free is not None:
                if length > self.free:
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
                self.free -= length
                self._allocated[path] = self._allocated.get(path, 0) + length
        super().fallocate(fd, offset, length)

    def ftruncate(self, fd: int, length: int) -> None:
        path = self._paths.get(fd, "")
        fault = self._check("ftruncate", path)
        if fault is not None:
            self._raise(fault, path)
        super().ftruncate(fd, length)

    def truncate(self, path, length):  # type: ignore[no-untyped-def]
        fault = self._check("truncate", os.fspath(path))
        if fault is not None:
            self._raise(fault, os.fspath(path))
        super().truncate(path, length)

    def replace(self, source, target):  # type: ignore[no-untyped-def]
        fault = self._check("replace", os.fspath(target))
        if fault is not None:
            self._raise(fault, os.fspath(target))
        super().replace(source, target)

    def unlink(self, path):  # type: ignore[no-untyped-def]
        text = os.fspath(path)
        fault = self._check("unlink", text)
        if fault is not None:
            self._raise(fault, text)
        super().unlink(path)
        with self._lock:
            freed = self._allocated.pop(text, 0)
            if self.free is not None:
                self.free += freed

    def fsync_directory(self, directory):  # type: ignore[no-untyped-def]
        text = os.fspath(directory)
        fault = self._check("fsync_directory", text)
        if fault is not None:
            self._raise(fault, text)
        super().fsync_directory(directory)  # its open and fsync are logged (and may fail) too
