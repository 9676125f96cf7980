"""Test support: a ``FileOps`` that fails chosen calls, and a disk that fills up.

Installed with ``storage.fileio.using`` (never by patching ``os``): only the
storage package's file operations see the faults.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
import stat
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


class PowerLossDisk(FaultyFileOps):
    """A disk whose page cache a power loss empties: the storage seam's view of
    what survives one.

    Theory of operation:

    - Every call still reaches the real file system (what the running broker
      reads back is the page cache), and fsyncs are not passed on: what counts
      as durable is tracked here, per inode (``os.fstat``), so a duplicated
      descriptor (the journal's fsync outside its lock) names the same file.
    - A file's data is durable as of its last ``fsync``: the whole file then.
      Writes, truncations and allocations since are kept in order, pending.
    - A directory's entries are durable as of its last fsync; a create (an
      ``open`` with ``O_CREAT`` of a new name, ``make_directory``), a rename and
      an unlink are pending in their directory's list until then. A directory
      the store makes without the seam is known only from its parent's
      listing at that parent's fsync, as a file system would keep it.
    - ``cut(rng)`` builds what the disk holds after a power loss: the durable
      state of each directory and file, plus (with ``torn``) a random prefix of
      its pending operations, the last one possibly cut short (a torn write);
      ``restore`` then replaces the real tree under ``root`` with it.
    - An unlinked or replaced inode is held open until the next power loss, so
      the file system cannot give its number to a new file.
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        super().__init__()
        self.root = os.fspath(root)
        os.makedirs(self.root, exist_ok=True)
        self.durable_data: dict[int, bytes] = {}
        self.pending_data: dict[int, list[tuple]] = {}
        self.durable_dirs: dict[int, dict[str, int]] = {}
        self.pending_dirs: dict[int, list[tuple]] = {}
        self.dirs: set[int] = set()
        self.fsyncs = 0
        self._held: list[int] = []
        self._settle()

    # -- what is durable now
    def _settle(self) -> None:
        """Everything on the real file system now is durable (a fresh start)."""
        for fd in self._held:
            os.close(fd)
        self._held = []
        self.durable_data.clear()
        self.pending_data.clear()
        self.durable_dirs.clear()
        self.pending_dirs.clear()
        self.dirs.clear()
        for directory, _subdirs, files in os.walk(self.root):
            self.durable_dirs[self._ino(directory)] = self._listing(directory)
            self.dirs.add(self._ino(directory))
            for name in files:
                with open(os.path.join(directory, name), "rb") as f:
                    self.durable_data[os.fstat(f.fileno()).st_ino] = f.read()

    @staticmethod
    def _ino(path: str) -> int:
        return os.lstat(path).st_ino

    def _listing(self, directory: str) -> dict[str, int]:
        out = {}
        for entry in os.scandir(directory):
            ino = entry.inode()
            out[entry.name] = ino
            if entry.is_dir(follow_symlinks=False):
                self.dirs.add(ino)
        return out

    def _inside(self, path: str) -> bool:
        return os.path.abspath(path).startswith(self.root + os.sep) or os.path.abspath(path) == self.root

    def _dir_op(self, path: str, op: tuple) -> None:
        parent = os.path.dirname(os.path.abspath(path))
        if self._inside(parent):
            self.pending_dirs.setdefault(self._ino(parent), []).append(op)

    def _hold(self, path: str) -> None:
        """Keep ``path``'s inode alive (its number not reused) until the power loss."""
        with contextlib.suppress(OSError):
            self._held.append(os.open(path, os.O_RDONLY))

    # -- the seam's calls
    def open(self, path, flags, mode=0o644):  # type: ignore[no-untyped-def]
        text = os.fspath(path)
        new = bool(flags & os.O_CREAT) and not os.path.lexists(text)
        fd = super().open(path, flags, mode)
        if new:
            self._dir_op(text, ("link", os.path.basename(text), os.fstat(fd).st_ino))
        if flags & os.O_TRUNC and not new:
            self.pending_data.setdefault(os.fstat(fd).st_ino, []).append(("truncate", 0))
        return fd

    def mkdir(self, path):  # type: ignore[no-untyped-def]
        text = os.fspath(path)
        super().mkdir(path)
        ino = self._ino(text)
        self.dirs.add(ino)
        self._dir_op(text, ("link", os.path.basename(text), ino))

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> int:
        n = super().pwrite(fd, data, offset)
        self.pending_data.setdefault(os.fstat(fd).st_ino, []).append(("write", offset, bytes(data[:n])))
        return n

    def ftruncate(self, fd: int, length: int) -> None:
        super().ftruncate(fd, length)
        self.pending_data.setdefault(os.fstat(fd).st_ino, []).append(("truncate", length))

    def truncate(self, path, length):  # type: ignore[no-untyped-def]
        super().truncate(path, length)
        self.pending_data.setdefault(self._ino(os.fspath(path)), []).append(("truncate", length))

    def fallocate(self, fd: int, offset: int, length: int) -> None:
        super().fallocate(fd, offset, length)
        self.pending_data.setdefault(os.fstat(fd).st_ino, []).append(("allocate", offset + length))

    def replace(self, source, target):  # type: ignore[no-untyped-def]
        src, dst = os.fspath(source), os.fspath(target)
        ino = self._ino(src)
        if os.path.lexists(dst):
            self._hold(dst)
        super().replace(source, target)
        if os.path.dirname(os.path.abspath(src)) == os.path.dirname(os.path.abspath(dst)):
            self._dir_op(dst, ("rename", os.path.basename(src), os.path.basename(dst), ino))
        else:
            self._dir_op(src, ("unlink", os.path.basename(src)))
            self._dir_op(dst, ("link", os.path.basename(dst), ino))

    def unlink(self, path):  # type: ignore[no-untyped-def]
        text = os.fspath(path)
        self._hold(text)
        super().unlink(path)
        self._dir_op(text, ("unlink", os.path.basename(text)))

    def fsync(self, fd: int) -> None:
        fault = self._check("fsync", self._paths.get(fd, ""))
        if fault is not None:
            self._raise(fault, self._paths.get(fd, ""))
        info = os.fstat(fd)
        self.fsyncs += 1
        if stat.S_ISDIR(info.st_mode):
            path = self._paths.get(fd)
            if path is not None and self._inside(path):
                self.durable_dirs[info.st_ino] = self._listing(path)
                self.pending_dirs.pop(info.st_ino, None)
            return
        reader = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)  # the descriptor may be write-only
        try:
            self.durable_data[info.st_ino] = os.pread(reader, info.st_size, 0) if info.st_size else b""
        finally:
            os.close(reader)
        self.pending_data.pop(info.st_ino, None)

    # -- the power loss
    def cut(self, rng: random.Random | None = None) -> dict[str, object]:
        """What a power loss now leaves under ``root`` (``rng``: also a random prefix
        of what was not durable; None: nothing of it), for ``restore``."""
        return self._image(self._ino(self.root), rng)

    def restore(self, image: dict[str, object]) -> None:
        """Replace the tree under ``root`` with ``image`` (the power came back):
        from now on all of it is durable."""
        shutil.rmtree(self.root)
        self._write(self.root, image)
        self._settle()

    def _prefix(self, ops: list[tuple], rng: random.Random | None) -> tuple[list[tuple], float | None]:
        """How many of ``ops`` survive, and (a torn write) what share of the next one."""
        if rng is None or not ops:
            return [], None
        k = rng.randint(0, len(ops))
        return ops[:k], (rng.random() if k < len(ops) else None)

    def _image(self, ino: int, rng: random.Random | None) -> dict[str, object]:
        entries = dict(self.durable_dirs.get(ino, {}))
        done, _ = self._prefix(self.pending_dirs.get(ino, []), rng)
        for op in done:
            if op[0] == "link":
                entries[op[1]] = op[2]
            elif op[0] == "unlink":
                entries.pop(op[1], None)
            else:
                entries.pop(op[1], None)
                entries[op[2]] = op[3]
        out: dict[str, object] = {}
        for name, child in entries.items():
            out[name] = self._image(child, rng) if child in self.dirs else self._file(child, rng)
        return out

    def _file(self, ino: int, rng: random.Random | None) -> bytes:
        data = bytearray(self.durable_data.get(ino, b""))
        ops = self.pending_data.get(ino, [])
        done, torn = self._prefix(ops, rng)
        if torn is not None and ops[len(done)][0] == "write":
            _, offset, chunk = ops[len(done)]
            done = [*done, ("write", offset, chunk[: int(len(chunk) * torn)])]
        for op in done:
            if op[0] == "write":
                _, offset, chunk = op
                if len(data) < offset:
                    data.extend(bytes(offset - len(data)))
                data[offset : offset + len(chunk)] = chunk
            elif op[0] == "truncate":
                del data[op[1] :]
                data.extend(bytes(op[1] - len(data)))
            else:
                data.extend(bytes(max(0, op[1] - len(data))))
        return bytes(data)

    def _write(self, path: str, image: dict[str, object]) -> None:
        os.makedirs(path, exist_ok=True)
        for name, content in image.items():
            if isinstance(content, dict):
                self._write(os.path.join(path, name), content)
            else:
                with open(os.path.join(path, name), "wb") as f:
                    f.write(content)  # type: ignore[arg-type]
