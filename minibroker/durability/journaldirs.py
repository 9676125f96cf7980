"""Where each destination's ring journal lives: one directory per name, never shared.

Theory of operation
-------------------
The ``ring`` layout keeps one journal per destination (store key) in
``<data_dir>/journal/<directory>``. ``directory_name`` maps a key to a
directory name that is *injective*: two different keys never get the same
name, so two destinations can never write one journal's files at once.

- A key that starts with ``/`` loses that slash; any other key (a durable
  subscription's ``durable:...``, or one made of slashes only) gets a leading
  ``~``.
- ``A-Z a-z 0-9 -`` stay as they are, ``/`` becomes ``.``, and every other
  character (``.`` and ``_`` included) becomes ``_`` and the two hex digits of
  each of its UTF-8 bytes: ``/queue/a.b`` -> ``queue.a_2eb``,
  ``/queue/a/b`` -> ``queue.a.b``. The name can be decoded, so it is unique.
- A name longer than 200 characters is cut to 160 and ends in ``~`` and 32
  hex digits of the key's SHA-256; a ``~`` past the first character marks it.

Each directory also holds the key itself in a file ``NAME``: that, not the
directory's name, says whose journal it is. ``scan`` reads every ``NAME`` at
start and refuses a data directory in which two directories claim one key.
A directory whose name is not the one ``directory_name`` gives for its key
was written by an older mapping (which turned ``/`` and ``.`` both into
``.``); ``scan`` renames it to its new name when that is unambiguous. Whether
such a directory held the records of two names is only known once its
journal is read: ``check_keys`` refuses it then.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from storage import StorageError, StoreFailed, file_ops
from storage.segment import fsync_directory

__all__ = ["NAME_FILE", "check_keys", "claim", "directory_name", "scan"]

#: The file in each journal directory holding the key it belongs to.
NAME_FILE = "NAME"

_KEEP = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")
_LONGEST = 200
_CUT = 160
#: Prefix of a directory being renamed to its new name (a character no name holds).
_MOVING = "+moving-"


def directory_name(key: str) -> str:
    """The directory of ``key``'s ring journal (see the module docstring)."""
    if key.startswith("/") and key.strip("/"):  # not "/", "//", ...: they would name "", ".", ".."
        prefix, rest = "", key[1:]
    else:
        prefix, rest = "~", key
    parts = [prefix]
    for char in rest:
        if char in _KEEP:
            parts.append(char)
        elif char == "/":
            parts.append(".")
        else:
            parts.append("".join(f"_{byte:02x}" for byte in char.encode("utf-8")))
    name = "".join(parts)
    if len(name) > _LONGEST:
        name = name[:_CUT] + "~" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]
    return name


def _read_name(directory: Path) -> str | None:
    """``directory``'s NAME file, read through the file seam (None: it has none)."""
    path = directory / NAME_FILE
    try:
        return file_ops().read_file(path).decode("utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreFailed("journal", f"reading {path}", exc) from None


def _write_name(directory: Path, key: str) -> None:
    """Write ``directory``'s NAME file durably (before its journal holds anything):
    a temporary file, fsynced, renamed, the directory fsynced (``storage.fileio``)."""
    file_ops().replace_file(directory / NAME_FILE, key.encode("utf-8"))


def scan(base: Path) -> dict[str, Path]:
    """Every ring journal directory under ``base``, by key, each under its own name.

    Refuses (``StorageError``) two directories that claim one key. Renames a
    directory named by an older mapping to its new name; a crash in the middle
    leaves directories that the next scan renames in the same way. A directory
    without a NAME file holds no journal yet and is left alone.
    """
    claims: dict[str, list[Path]] = {}
    for sub in sorted(p for p in base.iterdir() if p.is_dir()):
        key = _read_name(sub)
        if key is not None:
            claims.setdefault(key, []).append(sub)
    shared = {key: dirs for key, dirs in claims.items() if len(dirs) > 1}
    if shared:
        key, dirs = next(iter(shared.items()))
        raise StorageError(
            f"the data directory {base.parent} is refused: {len(dirs)} journal directories "
            f"({', '.join(d.name for d in dirs)}) all hold the journal of {key!r}; keep the one with its messages "
            f"and move the others out of {base}"
        )
    found = {key: dirs[0] for key, dirs in claims.items()}
    misnamed = {key: path for key, path in found.items() if path.name != directory_name(key)}
    if not misnamed:
        return found
    # Two steps, so that one directory's new name may be another's old one.
    moving = {}
    for n, (key, path) in enumerate(sorted(misnamed.items())):
        if path.name.startswith(_MOVING):
            moving[key] = path
            continue
        target = base / f"{_MOVING}{n}-{os.getpid()}"
        file_ops().replace(path, target)
        moving[key] = target
    fsync_directory(base)
    for key, path in moving.items():
        target = base / directory_name(key)
        if target.exists():
            raise StorageError(
                f"the data directory {base.parent} is refused: the journal of {key!r} (in {path.name}) cannot take "
                f"its name {target.name}, which the directory holds already for {_read_name(target)!r}"
            )
        file_ops().replace(path, target)
        found[key] = target
    fsync_directory(base)
    return found


def claim(base: Path, key: str) -> Path:
    """The directory for a new journal of ``key``, created with its NAME file.

    Refuses (``StorageError``) a directory that the filesystem already holds for
    another key (a case-insensitive filesystem maps ``A`` and ``a`` to one name).
    """
    directory = base / directory_name(key)
    file_ops().make_directory(directory)
    owner = _read_name(directory)
    if owner is None:
        _write_name(directory, key)
        fsync_directory(base)
    elif owner != key:
        raise StorageError(
            f"the journal directory {directory} of {key!r} holds the journal of {owner!r} "
            "(the filesystem maps both names to one directory)"
        )
    return directory


def check_keys(directory: Path, key: str, keys: Iterable[bytes]) -> None:
    """Refuse a journal holding records of another key than its own.

    Only a directory written by an older mapping can: it gave ``/queue/a.b``
    and ``/queue/a/b`` one directory, and two journals then wrote its files at
    once, so some of their messages may be gone. Nothing safe can be made of
    it automatically.
    """
    own = key.encode("utf-8")
    others = sorted({k for k in keys if k != own})
    if others:
        names = ", ".join(repr(k.decode("utf-8", "replace")) for k in [own, *others[:3]])
        raise StorageError(
            f"the data directory is refused: the journal directory {directory} holds the messages of "
            f"{1 + len(others)} destinations ({names}), whose names an older minibroker mapped to one directory; "
            "both wrote its files at once, so some of those messages may be lost. Move the directory out of the "
            "data directory to start without them; `minibroker journal inspect` reads what it holds"
        )
