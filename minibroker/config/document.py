"""The whole configuration: ``BrokerConfig`` and, by their TOML names, the sections
and the arrays of tables it is made of (what the loader walks a document against)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from minibroker import wildcards

from .entries import AuthorizationEntry, PolicyEntry, User
from .sections import (
    BrokerSection,
    ConsoleConfig,
    StoreConfig,
    SystemUsageConfig,
    TempDestinationAuthorization,
    TransportConfig,
)
from .values import ANY_PORT

__all__ = ["BrokerConfig", "SECTIONS", "TABLE_ARRAYS"]


@dataclass(frozen=True)
class BrokerConfig:
    """The whole configuration."""

    broker: BrokerSection = field(default_factory=BrokerSection)
    transport: TransportConfig = field(default_factory=TransportConfig)
    console: ConsoleConfig = field(default_factory=ConsoleConfig)
    system_usage: SystemUsageConfig = field(default_factory=SystemUsageConfig)
    store: StoreConfig = field(default_factory=StoreConfig)
    destination_policy: tuple[PolicyEntry, ...] = ()
    users: tuple[User, ...] = ()
    authorization: tuple[AuthorizationEntry, ...] = ()
    temp_destination_authorization: TempDestinationAuthorization = field(default_factory=TempDestinationAuthorization)

    def policy_for(self, kind: str, name: str) -> PolicyEntry:
        """The most specific policy entry for a destination, or the defaults.

        As ActiveMQ's ``PolicyMap``: among the entries whose wildcard matches,
        the one with the most literal elements wins; ties go to the first.
        """
        best: PolicyEntry | None = None
        for entry in self.destination_policy:
            if entry.applies_to(kind, name) and (
                best is None or wildcards.specificity(entry.pattern) > wildcards.specificity(best.pattern)
            ):
                best = entry
        return best if best is not None else _DEFAULT_POLICY

    def on_free_ports(self) -> BrokerConfig:
        """A copy that listens on free ports only: STOMP on any free port, the optional
        listeners off unless they ask for ``"any"`` port (tests and live labs run beside
        other brokers on one machine)."""
        t, c = self.transport, self.console
        return self.replace(
            transport={"port": 0, "websocket_port": t.websocket_port if t.websocket_port == ANY_PORT else 0},
            console={"port": c.port if c.port == ANY_PORT else 0},
        )

    def replace(self, **sections: Any) -> BrokerConfig:
        """A copy with some options changed: ``replace(transport={"port": 0})``."""
        changes = {}
        for name, values in sections.items():
            current = getattr(self, name)
            changes[name] = dataclasses.replace(current, **values) if isinstance(values, dict) else values
        return dataclasses.replace(self, **changes)


_DEFAULT_POLICY = PolicyEntry()

#: The single-table sections, by their TOML names.
SECTIONS: dict[str, type] = {
    "broker": BrokerSection,
    "transport": TransportConfig,
    "console": ConsoleConfig,
    "system_usage": SystemUsageConfig,
    "store": StoreConfig,
    "temp_destination_authorization": TempDestinationAuthorization,
}

#: The arrays of tables, by their TOML names.
TABLE_ARRAYS: dict[str, type] = {"destination_policy": PolicyEntry, "users": User, "authorization": AuthorizationEntry}
