"""Reading our own configuration for ``doctor``.

``minibroker.config.load_config`` does the reading and the validation, so a
file the broker would refuse is refused here with the broker's own message.
The raw TOML is read once more only to learn which options the file sets
itself: the report marks the others ``(default)``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from minibroker.config import PolicyEntry, default_config_text, load_config
from minibroker.errors import ConfigError

from .model import DoctorError, Listener, Setup
from .spell_toml import TomlSyntax

__all__ = ["read_toml", "DEFAULT_SOURCE"]

#: How the report names the embedded default configuration.
DEFAULT_SOURCE = "minibroker/default.toml (the embedded default)"


def _explicit_keys(data: dict) -> frozenset[str]:
    keys: set[str] = set()
    for section, table in data.items():
        if isinstance(table, dict):
            keys.update(f"{section}.{k}" for k in table)
        elif isinstance(table, list):
            for i, entry in enumerate(table):
                if isinstance(entry, dict):
                    keys.update(f"{section}[{i}].{k}" for k in entry)
    return frozenset(keys)


def read_toml(path: str | Path | None) -> Setup:
    """``path`` (or, with None, the embedded default) as a ``Setup``."""
    try:
        config = load_config(path)
    except ConfigError as exc:
        raise DoctorError(str(exc)) from None
    text = default_config_text() if path is None else Path(path).read_text(encoding="utf-8")
    explicit = _explicit_keys(tomllib.loads(text))
    return Setup(
        source=DEFAULT_SOURCE if path is None else str(path),
        syntax=TomlSyntax(),
        config=config,
        default_policy=PolicyEntry(),
        listeners=(Listener("transport", config.transport),),
        explicit=explicit,
    )
