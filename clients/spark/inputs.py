"""Which form of each trace the analysis reads: its JSON lines or its Parquet segments.

A trace named on the command line may be a JSON-lines file, a directory of
them, or a Parquet segments directory (``minibroker.trace.segments``); a
trace file whose Parquet twin (``FILE.parquet/``) holds segments is read from
the twin (``--input-format auto``, the default): the same events, typed
columns, a fraction of the bytes. ``--input-format jsonl`` reads the JSON
lines even then, ``parquet`` refuses a trace that has no segments. Both
engines take the resolved paths and tell the two forms apart by
``is_segments_dir``. Imports no pyarrow and no Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from minibroker.trace.segments import TWIN_SUFFIX, is_segments_dir, segment_files, twin_dir

from .findings import TraceFormatError

__all__ = ["INPUT_FORMATS", "TraceInput", "resolve_inputs", "missing_inputs", "describe_inputs", "is_parquet"]

INPUT_FORMATS = ("auto", "jsonl", "parquet")


@dataclass(frozen=True)
class TraceInput:
    """One trace as named (``name``) and what is read for it (``path``, in ``form``)."""

    name: str
    path: str
    form: str  # "jsonl" or "parquet"


def is_parquet(path: str) -> bool:
    """Whether the analysis reads ``path`` as Parquet segments (a remote path: by its suffix)."""
    if "://" in path:
        return path.rstrip("/").endswith(TWIN_SUFFIX)
    return is_segments_dir(path)


def resolve_inputs(names: list[str], input_format: str = "auto") -> list[TraceInput]:
    """What to read for each trace named (see the module doc); a name that does not
    exist is fine when its twin does. Raises ``TraceFormatError`` for
    ``input_format="parquet"`` and a trace with no segments."""
    if input_format not in INPUT_FORMATS:
        raise ValueError(f"input format {input_format!r}: expected one of {', '.join(INPUT_FORMATS)}")
    out = []
    for name in names:
        found = None
        if input_format != "jsonl":
            for candidate in (name, twin_dir(name)):
                if is_parquet(candidate):
                    found = TraceInput(name, candidate, "parquet")
                    break
        if found is None and input_format == "parquet":
            raise TraceFormatError(f"{name}: no Parquet segments there, nor in {twin_dir(name)}")
        out.append(found or TraceInput(name, name, "jsonl"))
    return out


def missing_inputs(names: list[str]) -> list[str]:
    """The local names with neither a file nor a Parquet twin."""
    return [n for n in names if "://" not in n and not Path(n).exists() and not is_segments_dir(twin_dir(n))]


def describe_inputs(inputs: list[TraceInput]) -> list[str]:
    """One line per trace: what was read for it."""
    lines = []
    for i in inputs:
        if i.form == "parquet":
            segments = len(segment_files(i.path)) if "://" not in i.path else "?"
            twin = f" (the Parquet twin of {i.name})" if i.path != i.name else ""
            lines.append(f"reading {i.path}: Parquet, {segments} segment(s){twin}")
        else:
            lines.append(f"reading {i.path}: JSON lines")
    return lines
