"""Loading: a TOML document walked against the declared sections, into a ``BrokerConfig``.

- An unknown key or section is refused with the nearest known name and the list of known ones.
- A bad value is refused with the option's dotted name, the value and what was expected.
- A few rules span options (the frame memory limit and the largest frame; one name per user).
- With no file, the embedded default (``minibroker/default.toml``) is loaded.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
from collections.abc import Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from minibroker.errors import ConfigError

from .document import SECTIONS, TABLE_ARRAYS, BrokerConfig
from .entries import DestinationEntry, User
from .sections import TransportConfig

__all__ = ["default_config_text", "load_config", "parse_config"]


def _nearest(key: str, known: Iterable[str]) -> str:
    """`` did you mean 'KNOWN'?`` for the known key nearest a misspelt one, or nothing."""
    close = difflib.get_close_matches(key, list(known), n=1)
    return f" did you mean '{close[0]}'?" if close else ""


def _build(cls: type, table: Any, where: str, source: str = "configuration") -> Any:
    """One table of ``cls`` built from ``table``, each value read by its field's parser."""
    if not isinstance(table, dict):
        raise ConfigError(f"'{where}' must be a table")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key, raw in table.items():
        f = fields.get(key)
        if f is None:
            known = ", ".join(sorted(fields))
            raise ConfigError(f"unknown key '{where}.{key}' in {source}:{_nearest(key, fields)} (known keys: {known})")
        try:
            values[key] = f.metadata["parse"](raw)
        except ValueError as exc:
            raise ConfigError(f"bad value for '{where}.{key}': {raw!r} ({exc})") from None
    return cls(**values)


def _build_array(key: str, value: Any, source: str) -> tuple[Any, ...]:
    """The entries of the array of tables ``key``, each checked for the keys it needs."""
    cls = TABLE_ARRAYS[key]
    if not isinstance(value, list):
        raise ConfigError(f"'{key}' in {source} must be an array of tables ([[{key}]])")
    built = []
    for i, table in enumerate(value):
        where = f"{key}[{i}]"
        entry = _build(cls, table, where, source)
        if issubclass(cls, DestinationEntry) and (entry.queue is None) == (entry.topic is None):
            raise ConfigError(f"'{where}' needs exactly one of 'queue' or 'topic'")
        if cls is User and (not entry.name or not entry.password_hash):
            raise ConfigError(f"'{where}' needs both 'name' and 'password_hash'")
        built.append(entry)
    return tuple(built)


def parse_config(data: Mapping[str, Any], source: str = "configuration") -> BrokerConfig:
    """Validate a parsed TOML document and build a ``BrokerConfig``."""
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key in SECTIONS:
            values[key] = _build(SECTIONS[key], value, key, source)
        elif key in TABLE_ARRAYS:
            values[key] = _build_array(key, value, source)
        else:
            known = ", ".join(sorted([*SECTIONS, *TABLE_ARRAYS]))
            if isinstance(value, (dict, list)):
                nearest = _nearest(key, [*SECTIONS, *TABLE_ARRAYS])
                raise ConfigError(f"unknown section '{key}' in {source}:{nearest} (known: {known})")
            raise ConfigError(
                f"unknown key '{key}' in {source}: a configuration's keys belong in its sections ({known})"
            )
    transport = values.get("transport", TransportConfig())
    if transport.partial_frame_memory_limit < transport.max_frame_size:
        raise ConfigError(
            f"'transport.partial_frame_memory_limit' ({transport.partial_frame_memory_limit}) is below "
            f"'transport.max_frame_size' ({transport.max_frame_size}) in {source}: the largest frame could never arrive"
        )
    names = [u.name for u in values.get("users", ())]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConfigError(f"user {duplicates[0]!r} is defined more than once in {source}")
    return BrokerConfig(**values)


def default_config_text() -> str:
    """The embedded default configuration, as TOML text."""
    return resources.files("minibroker").joinpath("default.toml").read_text(encoding="utf-8")


def load_config(path: str | Path | None = None) -> BrokerConfig:
    """Load ``path`` (or the embedded default) and validate it."""
    if path is None:
        return parse_config(tomllib.loads(default_config_text()), "the default configuration")
    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read configuration file '{p}': {exc.strerror}") from None
    try:
        data = tomllib.loads(raw)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"configuration file '{p}' is not valid TOML: {exc}") from None
    return parse_config(data, f"'{p}'")
