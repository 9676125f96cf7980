"""What ``doctor`` checks: one model for both inputs, and what a check finds.

Theory of operation. A reader (``toml_reader`` for ours, ``xml_reader`` for
ActiveMQ's ``activemq.xml``) turns a file into a ``Setup``: our own
``BrokerConfig`` (the broker's validated configuration dataclasses, so every
check speaks one vocabulary) plus what a ``BrokerConfig`` cannot say: which
options the file set itself (the rest are defaults), the STOMP listeners (an
ActiveMQ file may have several connectors), the policy that applies to
destinations no entry matches (ActiveMQ's defaults are not ours: its topic
subscriptions swap to disk), and how to spell names, values and fixes in the
input's own syntax (``Syntax``).

Checks are functions ``Setup -> list[Finding]``. A ``Finding`` names its check,
severity and source, carries a headline, the triggering values (already spelled
in the input's syntax), the why, and the fix as abstract ``Change`` s that the
syntax renders as TOML or XML.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from minibroker.config import BrokerConfig, PolicyEntry, TransportConfig

__all__ = [
    "DoctorError",
    "ERROR",
    "WARNING",
    "INFO",
    "SEVERITIES",
    "Change",
    "Finding",
    "Listener",
    "Setup",
    "Syntax",
    "PolicyRef",
    "format_size",
    "human_size",
    "round_size",
    "power_of_two_below",
]

ERROR = "error"
WARNING = "warning"
INFO = "info"
#: Most severe first: the order of the report's groups.
SEVERITIES = (ERROR, WARNING, INFO)


class DoctorError(Exception):
    """The configuration cannot be read: one line for the user, exit status 2."""


def format_size(n: int) -> str:
    """``67108864`` -> ``"64 mb"``: the largest unit (powers of 1024) that divides ``n``."""
    for unit, scale in (("gb", 1024**3), ("mb", 1024**2), ("kb", 1024)):
        if n and n % scale == 0:
            return f"{n // scale} {unit}"
    return str(n)


def human_size(n: int) -> str:
    """``n`` for prose: exact when a unit divides it (``"64 mb"``), else one decimal (``"9.6 mb"``)."""
    exact = format_size(n)
    if exact != str(n) or n < 1024:
        return exact
    for unit, scale in (("gb", 1024**3), ("mb", 1024**2), ("kb", 1024)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return exact


def round_size(n: int, up: bool = False) -> int:
    """``n`` rounded to whole megabytes (kilobytes below one megabyte), for a suggested value."""
    scale = 1024**2 if n >= 1024**2 else 1024
    whole = -(-n // scale) if up else n // scale
    return max(whole, 1) * scale


def power_of_two_below(n: int, floor: int = 1024) -> int:
    """The largest power of two not above ``n`` (at least ``floor``): a round suggested size."""
    return max(1 << (max(n, 1).bit_length() - 1), floor)


@dataclass(frozen=True)
class Change:
    """One option to set, in our vocabulary.

    ``key`` is a section option (``"system_usage.temp_limit"``) or, with
    ``kind``/``pattern``, a destination-policy option (``"memory_limit"``);
    ``listener`` names the STOMP listener a transport option belongs to.
    """

    key: str
    value: Any
    kind: str | None = None
    pattern: str | None = None
    listener: str | None = None


@dataclass(frozen=True)
class Finding:
    """One problem (or note) in a configuration."""

    check: str
    severity: str
    source: str | None
    headline: str
    values: tuple[str, ...]
    why: str
    fix: str = ""
    changes: tuple[Change, ...] = ()
    snippet: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "severity": self.severity,
            "source": self.source,
            "headline": self.headline,
            "values": list(self.values),
            "why": self.why,
            "fix": {
                "text": self.fix,
                "snippet": self.snippet,
                "changes": [
                    {
                        k: v
                        for k, v in (
                            ("key", c.key),
                            ("value", list(c.value) if isinstance(c.value, tuple) else c.value),
                            ("kind", c.kind),
                            ("pattern", c.pattern),
                            ("listener", c.listener),
                        )
                        if v is not None
                    }
                    for c in self.changes
                ],
            },
        }


@dataclass(frozen=True)
class Listener:
    """A STOMP listener: ours is ``[transport]``; ActiveMQ's are its STOMP connectors."""

    name: str
    transport: TransportConfig
    uri: str = ""


@dataclass(frozen=True)
class PolicyRef:
    """A destination policy in effect: a file's entry (``index``), or the defaults."""

    kind: str
    pattern: str
    entry: PolicyEntry
    index: int | None  # position in the file's entries; None = no entry, defaults apply

    @property
    def is_default(self) -> bool:
        return self.index is None


class Syntax(Protocol):
    """How the input spells names, values and fixes (TOML or activemq.xml)."""

    name: str

    def setting(self, setup: Setup, key: str) -> str: ...

    def policy_setting(self, setup: Setup, ref: PolicyRef, key: str) -> str: ...

    def listener_setting(self, setup: Setup, listener: Listener, key: str) -> str: ...

    def render(self, setup: Setup, changes: tuple[Change, ...]) -> str: ...


@dataclass(frozen=True)
class Setup:
    """A configuration read for checking, whatever its syntax."""

    source: str
    syntax: Syntax
    config: BrokerConfig
    default_policy: PolicyEntry
    listeners: tuple[Listener, ...]
    explicit: frozenset[str] = frozenset()
    unknown: frozenset[str] = frozenset()  # options whose value the file does not tell (e.g. a percent of the disk)
    written: Mapping[str, str] = field(default_factory=dict)  # key -> the file's own text for it (XML)
    notes: tuple[Finding, ...] = field(default=())  # what the reader assumed, reported as info

    # ---------------------------------------------------------------- policies
    def policies(self, kind: str) -> list[PolicyRef]:
        """Every policy in effect for ``kind`` destinations: the file's entries,
        then the defaults if some destinations match no entry (no ``>`` entry)."""
        refs = [
            PolicyRef(kind, e.pattern, e, i) for i, e in enumerate(self.config.destination_policy) if e.kind == kind
        ]
        if not any(r.pattern == ">" for r in refs):
            refs.append(PolicyRef(kind, ">", self.default_policy, None))
        return refs

    def is_set(self, key: str) -> bool:
        return key in self.explicit

    # ---------------------------------------------------------------- spelling
    def show(self, key: str) -> str:
        return self.syntax.setting(self, key)

    def show_policy(self, ref: PolicyRef, key: str) -> str:
        return self.syntax.policy_setting(self, ref, key)

    def show_listener(self, listener: Listener, key: str) -> str:
        return self.syntax.listener_setting(self, listener, key)

    def render(self, changes: tuple[Change, ...]) -> str:
        return self.syntax.render(self, changes)
