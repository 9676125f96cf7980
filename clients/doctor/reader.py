"""Which reader a file needs: ActiveMQ XML or our TOML.

A file is ActiveMQ's when its name ends in ``.xml`` or its first character
(after a byte-order mark and white space) is ``<``; anything else is read as
our TOML. No path means the embedded default configuration.
"""

from __future__ import annotations

from pathlib import Path

from .model import DoctorError, Setup
from .read_toml import read_toml
from .read_xml import read_xml

__all__ = ["read", "looks_like_xml"]


def looks_like_xml(path: Path, data: bytes) -> bool:
    return path.suffix.lower() == ".xml" or data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"<")


def read(path: str | Path | None, heap: int | None = None) -> Setup:
    """Read ``path`` (None: the embedded default). ``heap`` is the JVM heap for
    ActiveMQ's ``percentOfJvmHeap``; it does not apply to our TOML."""
    if path is None:
        return read_toml(None)
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise DoctorError(f"cannot read configuration file '{p}': {exc.strerror}") from None
    if looks_like_xml(p, data):
        return read_xml(p, data, heap)
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DoctorError(
            f"configuration file '{p}' is neither XML nor UTF-8 TOML (byte {exc.start} is not UTF-8)"
        ) from None
    return read_toml(p)
