"""The values an option takes: each parser reads a TOML value or refuses it.

- A parser takes the raw TOML value and returns the typed one.
- A refusal is a ``ValueError`` whose message says what was expected; the loader
  (``loading.py``) adds the option's name and the value given.
- ``option`` declares a field of a section: its default, its parser, its one line of doc.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from dataclasses import field
from typing import Any

from minibroker.digits import parse_decimal

__all__ = [
    "ANY_PORT",
    "MAX_HASH_ITERATIONS",
    "Parser",
    "boolean",
    "choice",
    "destination_pattern",
    "heart_beat",
    "integer",
    "is_size",
    "listener_port",
    "number",
    "option",
    "parse_size",
    "password_hash",
    "size",
    "size_at_least",
    "string_list",
    "text",
]

Parser = Callable[[Any], Any]

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "gib": 1024**3,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(value: Any) -> int:
    """Bytes from an integer or a text like ``"64 mb"`` (ActiveMQ's units are powers of 1024)."""
    if isinstance(value, bool):
        raise ValueError('expected a size such as 65536 or "64 mb"')
    if isinstance(value, int):
        if value < 0:
            raise ValueError("expected a size of 0 or more")
        return value
    if isinstance(value, str):
        m = _SIZE_RE.match(value)
        if m and m.group(2).lower() in _SIZE_UNITS:
            return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
    raise ValueError('expected a size such as 65536 or "64 mb"')


def integer(low: int, high: int | None = None) -> Parser:
    """An integer within ``[low, high]`` (no upper bound when ``high`` is None)."""
    expected = (
        f"expected an integer from {low} to {high}" if high is not None else f"expected an integer of {low} or more"
    )

    def parse(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
            raise ValueError(expected)
        return value

    return parse


def size(value: Any) -> int:
    """A size in bytes, of 0 or more (``parse_size`` as an option's parser)."""
    return parse_size(value)


def is_size(parse: Parser | None) -> bool:
    """Whether ``parse`` reads a size (``size`` or one made by ``size_at_least``); None: no."""
    return parse is size or getattr(parse, "reads_size", False)


def size_at_least(low: int, why: str) -> Parser:
    """A size of at least ``low`` bytes; ``why`` says what needs that much."""

    def parse(value: Any) -> int:
        parsed = parse_size(value)
        if parsed < low:
            raise ValueError(f"expected a size of at least {low} bytes: {why}")
        return parsed

    parse.reads_size = True  # type: ignore[attr-defined]
    return parse


#: The most PBKDF2 iterations a password hash may ask for: each login runs them all,
#: and OWASP's advice for PBKDF2-SHA256 (2023) is 600,000.
MAX_HASH_ITERATIONS = 2_000_000


def password_hash(value: Any) -> str:
    """``pbkdf2_sha256$<iterations>$<salt>$<hash>`` as ``minibroker passwd`` prints it."""
    if not isinstance(value, str):
        raise ValueError("expected a string")
    parts = value.split("$")
    if len(parts) != 4 or parts[0] != "pbkdf2_sha256" or not parts[2] or not parts[3]:
        raise ValueError("expected pbkdf2_sha256$<iterations>$<salt>$<hash>, as `minibroker passwd` prints it")
    iterations = parse_decimal(parts[1])
    if not 1 <= iterations <= MAX_HASH_ITERATIONS:
        raise ValueError(
            f"expected from 1 to {MAX_HASH_ITERATIONS:,} iterations (every login runs them all), not {iterations:,}"
        )
    for part in parts[2:]:
        try:
            base64.b64decode(part + "=" * (-len(part) % 4), validate=True)
        except ValueError:
            raise ValueError(f"the salt and the hash must be base64, not {part[:20]!r}") from None
    return value


def boolean(value: Any) -> bool:
    """``true`` or ``false``, nothing else (not 0 or 1)."""
    if not isinstance(value, bool):
        raise ValueError("expected true or false")
    return value


def text(value: Any) -> str:
    """Any string."""
    if not isinstance(value, str):
        raise ValueError("expected a string")
    return value


def choice(*options: str) -> Parser:
    """One of ``options``, spelt exactly."""

    def parse(value: Any) -> str:
        if value not in options:
            raise ValueError("expected one of " + ", ".join(repr(o) for o in options))
        return str(value)

    return parse


def heart_beat(value: Any) -> tuple[int, int]:
    """``"cx,cy"`` in milliseconds, as in the STOMP ``heart-beat`` header."""
    if isinstance(value, str):
        parts = value.split(",")
        try:
            if len(parts) == 2:
                cx, cy = (parse_decimal(p.strip()) for p in parts)
                if max(cx, cy) <= 2**31 - 1:
                    return (cx, cy)
        except ValueError:
            pass
    raise ValueError('expected two millisecond counts such as "0,0" or "10000,10000"')


def number(low: float, high: float) -> Parser:
    """An integer or a float within ``[low, high]``, as a float."""

    def parse(value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise ValueError(f"expected a number from {low} to {high}")
        return float(value)

    return parse


def destination_pattern(value: Any) -> str:
    """A destination name or ActiveMQ wildcard (``orders.>``), without a ``/queue/`` prefix."""
    if not isinstance(value, str) or not value or value.startswith("/"):
        raise ValueError('expected a destination name or ActiveMQ wildcard without prefix, such as "orders.>"')
    return value


#: A listener port that takes any free port (tests), where 0 means "off".
ANY_PORT = -1


def listener_port(value: Any) -> int:
    """A port for an optional listener: 1-65535, 0 = off, or "any" (a free port, for tests)."""
    if value == "any" or value == ANY_PORT:
        return ANY_PORT
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise ValueError('expected an integer from 0 (off) to 65535, or "any" (any free port)')
    return value


def string_list(value: Any) -> tuple[str, ...]:
    """A list of names, or one string of names separated by commas."""
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError('expected a list of names such as ["admins", "users"]')
    return tuple(value)


def option(default: Any, parse: Parser, doc: str) -> Any:
    """Declare a configuration option: its default, its parser, one line of doc."""
    return field(default=default, metadata={"parse": parse, "doc": doc})
