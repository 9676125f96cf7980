"""Broker configuration: TOML in, validated frozen dataclasses out.

The names follow ActiveMQ's (``memoryUsage limit`` becomes
``system_usage.memory_limit``, ``policyEntry`` becomes a
``[[destination_policy]]`` table, ``cursorMemoryHighWaterMark`` becomes
``cursor_memory_high_water_mark``). Every option is declared once, as a
dataclass field whose metadata carries its parser and its one-line doc; the
loader walks the TOML against those declarations, so an unknown key or a bad
value is refused at start with a message naming both, never a traceback:

    bad value for 'transport.port': 'abc' (expected an integer from 1 to 65535)
    unknown key 'transport.prot' in 'broker.toml': did you mean 'port'? (known keys: connect_timeout, ...)

The parts, one job each:

- ``values.py``: the parsers of option values (sizes, ports, heart-beats, ...) and ``option``;
- ``sections.py``: the single-table sections (``[broker]``, ``[transport]``, ``[store]`` ...);
- ``entries.py``: the arrays of tables (``[[destination_policy]]``, ``[[users]]``, ``[[authorization]]``);
- ``document.py``: ``BrokerConfig``, the whole, and the sections and arrays by their TOML names;
- ``loading.py``: a TOML document or file validated into a ``BrokerConfig``.

The embedded default configuration (``minibroker/default.toml``) is what
``minibroker serve`` runs with when given no ``--config``; a test checks that
it agrees with the defaults declared here.
"""

from __future__ import annotations

from .document import BrokerConfig
from .entries import AuthorizationEntry, PolicyEntry, User
from .loading import default_config_text, load_config, parse_config
from .sections import (
    BrokerSection,
    ConsoleConfig,
    StoreConfig,
    SystemUsageConfig,
    TempDestinationAuthorization,
    TransportConfig,
)
from .values import ANY_PORT, heart_beat, is_size, listener_port, parse_size

__all__ = [
    "BrokerConfig",
    "BrokerSection",
    "TransportConfig",
    "ConsoleConfig",
    "SystemUsageConfig",
    "StoreConfig",
    "PolicyEntry",
    "User",
    "AuthorizationEntry",
    "TempDestinationAuthorization",
    "load_config",
    "parse_config",
    "default_config_text",
    "parse_size",
    "is_size",
    "heart_beat",
    "listener_port",
    "ANY_PORT",
]
