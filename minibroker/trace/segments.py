"""Where a trace's Parquet form lives: its segments directory and its file names.

A trace written with ``broker.trace_format = "parquet"`` (or ``"both"``) has a
twin beside its path: the directory ``<trace>.parquet/`` holding segments
``part-00000.parquet``, ``part-00001.parquet``, ... in the order they were
written (``seq`` goes on from one to the next). A segment is written under a
hidden temporary name (``.part-00000.parquet.tmp``) and renamed once complete,
so a reader listing ``part-*.parquet`` never sees half a file (Spark skips
names that start with a dot, too).

This module imports only the standard library: the broker's process, the
analysis and the writer all use it, and only the writer (``parquet.py``)
imports pyarrow.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

__all__ = ["TWIN_SUFFIX", "twin_dir", "segment_name", "segment_files", "is_segments_dir", "clear_segments"]

#: The segments directory of the trace at ``PATH`` is ``PATH + TWIN_SUFFIX``.
TWIN_SUFFIX = ".parquet"

_SEGMENT = re.compile(r"^part-\d{5,}\.parquet$")
_TEMP = re.compile(r"^\.part-\d{5,}\.parquet\.tmp$")


def twin_dir(trace_path: str | os.PathLike[str]) -> str:
    """The segments directory of the trace at ``trace_path`` (which need not exist)."""
    return os.fspath(trace_path).rstrip("/" + os.sep) + TWIN_SUFFIX


def segment_name(index: int) -> str:
    """The file name of segment ``index`` (from 0): names sort in the order written."""
    return f"part-{index:05d}.parquet"


def segment_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The complete segments in ``directory``, in the order written (none: [])."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return [Path(directory) / n for n in sorted(names, key=lambda n: (len(n), n)) if _SEGMENT.match(n)]


def is_segments_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a directory holding at least one complete segment."""
    return bool(segment_files(path))


def clear_segments(directory: str | os.PathLike[str]) -> None:
    """Remove the segments (and temporary files) of an earlier trace from ``directory``;
    other files are left alone, and so is a directory that does not exist."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return
    for n in names:
        if _SEGMENT.match(n) or _TEMP.match(n):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(directory, n))
