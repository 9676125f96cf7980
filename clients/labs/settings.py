"""One configuration key changed: ``lab run --set KEY=VALUE``, ``--sweep``, an exercise's ``keep``.

A KEY names an option as the configuration file spells it:

- ``SECTION.KEY``: ``system_usage.memory_limit=2 mb``, ``store.fsync=never``;
- ``destination_policy[PATTERN].KEY``: the queue policy whose ``queue`` is PATTERN
  (``topic:PATTERN`` for a topic's), ``destination_policy[B.>].memory_limit=256 kb``.
  A pattern the file has no entry for gets a new one, a copy of its ``>`` entry (the
  settings every such destination had), with the key changed.

VALUE is read as a TOML value when it is one (``5``, ``true``, ``"2 mb"``), else as text
(``2 mb``). The configuration changed is validated as the file is (``parse_config``):
an unknown key or a bad value gets the same one-line refusal.
"""

from __future__ import annotations

import copy
import re
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from minibroker.config import BrokerConfig, parse_config
from minibroker.errors import ConfigError

__all__ = ["Setting", "configure", "parse_setting", "parse_sweep", "read_toml", "setting_value"]

#: A key and the value it is set to.
Setting = tuple[str, Any]

_POLICY = re.compile(r"^destination_policy\[(?:(queue|topic):)?([^\]]+)\]\.(\w+)$")
_SECTION = re.compile(r"^(\w+)\.(\w+)$")


def parse_setting(text: str) -> Setting:
    """``"KEY=VALUE"`` as a key and a value; ConfigError when it is not that shape."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--set wants KEY=VALUE (e.g. system_usage.memory_limit=2mb), not {text!r}")
    return _check_key(key.strip()), _value(raw.strip())


def parse_sweep(text: str) -> tuple[str, list[Any]]:
    """``"KEY=V1,V2,..."`` as a key and its values (at least two)."""
    key, sep, raw = text.partition("=")
    values = [v.strip() for v in raw.split(",") if v.strip()]
    if not sep or not key.strip() or len(values) < 2:
        raise ConfigError(f"--sweep wants KEY=V1,V2,... with two values or more, not {text!r}")
    return _check_key(key.strip()), [_value(v) for v in values]


def _check_key(key: str) -> str:
    if not (_POLICY.match(key) or _SECTION.match(key)):
        raise ConfigError(
            f"unknown key {key!r}: a key is SECTION.KEY (store.fsync) or destination_policy[PATTERN].KEY "
            "(destination_policy[>].memory_limit)"
        )
    return key


def _value(raw: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def read_toml(path: Path) -> dict[str, Any]:
    """A configuration file's TOML document; ConfigError when it cannot be read or is not TOML."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read configuration file '{path}': {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"configuration file '{path}' is not valid TOML: {exc}") from None


def _policy_entry(data: dict[str, Any], kind: str, pattern: str, create: bool) -> dict[str, Any] | None:
    entries = data.setdefault("destination_policy", []) if create else data.get("destination_policy", [])
    for entry in entries:
        if entry.get(kind) == pattern:
            return entry
    if not create:
        return None
    base: dict[str, Any] = next((e for e in entries if e.get(kind) == ">"), {})
    entry = {k: v for k, v in copy.deepcopy(base).items() if k not in ("queue", "topic")}
    entry[kind] = pattern
    entries.append(entry)
    return entry


def _apply(data: dict[str, Any], key: str, value: Any) -> None:
    policy = _POLICY.match(key)
    if policy:
        kind, pattern, option = policy.group(1) or "queue", policy.group(2), policy.group(3)
        entry = _policy_entry(data, kind, pattern, create=True)
        assert entry is not None
        entry[option] = value
        return
    section, option = key.split(".", 1)
    table = data.setdefault(section, {})
    if not isinstance(table, dict):
        raise ConfigError(f"'{section}' is not a section of settings")
    table[option] = value


def setting_value(data: dict[str, Any], key: str) -> tuple[bool, Any]:
    """Whether the document sets ``key``, and its value there."""
    policy = _POLICY.match(key)
    if policy:
        entry = _policy_entry(data, policy.group(1) or "queue", policy.group(2), create=False)
        table: Any = entry or {}
        option = policy.group(3)
    else:
        section, option = key.split(".", 1)
        table = data.get(section, {})
    if isinstance(table, dict) and option in table:
        return True, table[option]
    return False, None


def configure(data: dict[str, Any], settings: Iterable[Setting], source: str) -> BrokerConfig:
    """The configuration ``data`` with ``settings`` applied, validated as a file is."""
    changed = copy.deepcopy(data)
    for key, value in settings:
        _apply(changed, key, value)
    return parse_config(changed, source)
