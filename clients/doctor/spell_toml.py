"""Our TOML: how ``doctor`` names options, shows values and writes fixes.

Names are the dotted keys of ``minibroker/default.toml``
(``system_usage.temp_limit``); a policy option is shown with the entry it
comes from; a value the file does not set is marked ``(default)``. A fix is
the TOML to paste: a ``[section]`` table, or a ``[[destination_policy]]``
entry (merged into the file's own entry for that wildcard, if it has one).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from minibroker import config as cfg

from .model import Change, Listener, PolicyRef, Setup, format_size

__all__ = ["TomlSyntax", "toml_value"]

_SECTION_CLASSES = {
    "broker": cfg.BrokerSection,
    "transport": cfg.TransportConfig,
    "system_usage": cfg.SystemUsageConfig,
    "store": cfg.StoreConfig,
}


def _is_size(cls: type, name: str) -> bool:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    return name in fields and cfg.is_size(fields[name].metadata.get("parse"))


def toml_value(cls: type, name: str, value: Any) -> str:
    """``value`` of option ``name`` of section class ``cls``, as TOML text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f'"{value[0]},{value[1]}"'
    if isinstance(value, int) and _is_size(cls, name) and value:
        return f'"{format_size(value)}"'
    if isinstance(value, str):
        return f'"{value}"'
    return str(value)


def _entry_header(ref: PolicyRef) -> str:
    return f'[[destination_policy]] {ref.kind} = "{ref.pattern}"'


class TomlSyntax:
    """Spelling for minibroker's TOML configuration."""

    name = "toml"

    def setting(self, setup: Setup, key: str) -> str:
        section, option = key.split(".", 1)
        value = getattr(getattr(setup.config, section), option)
        text = f"{key} = {toml_value(_SECTION_CLASSES[section], option, value)}"
        return text if setup.is_set(key) else text + " (default)"

    def policy_setting(self, setup: Setup, ref: PolicyRef, key: str) -> str:
        value = toml_value(cfg.PolicyEntry, key, getattr(ref.entry, key))
        if ref.is_default:
            return f'{key} = {value} (default: no [[destination_policy]] for {ref.kind} "{ref.pattern}")'
        mark = "" if setup.is_set(f"destination_policy[{ref.index}].{key}") else " (default)"
        return f"{_entry_header(ref)}: {key} = {value}{mark}"

    def listener_setting(self, setup: Setup, listener: Listener, key: str) -> str:
        return self.setting(setup, f"transport.{key}")

    def render(self, setup: Setup, changes: tuple[Change, ...]) -> str:
        blocks: list[str] = []
        sections: dict[str, list[str]] = {}
        policies: dict[tuple[str, str], list[str]] = {}
        for c in changes:
            if c.kind is not None:
                line = f"{c.key} = {toml_value(cfg.PolicyEntry, c.key, c.value)}"
                policies.setdefault((c.kind, c.pattern or ">"), []).append(line)
            else:
                section, option = c.key.split(".", 1)
                line = f"{option} = {toml_value(_SECTION_CLASSES[section], option, c.value)}"
                sections.setdefault(section, []).append(line)
        for section, lines in sections.items():
            blocks.append("\n".join([f"[{section}]", *lines]))
        for (kind, pattern), lines in policies.items():
            has_entry = any(e.kind == kind and e.pattern == pattern for e in setup.config.destination_policy)
            head = [f'# add to your entry for {kind} "{pattern}"'] if has_entry else []
            blocks.append("\n".join([*head, "[[destination_policy]]", f'{kind} = "{pattern}"', *lines]))
        return "\n\n".join(blocks)
