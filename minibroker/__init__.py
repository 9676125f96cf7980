"""minibroker: a teaching STOMP broker.

The packages, each importing only those above it in this list (the map of the
code and the reasons: ``docs/design-notes.md``):

- ``config``, ``errors``, ``eventloop``, ``frames``, ``digits``, ``wildcards``:
  the vocabulary every part shares; ``corebuild``: which build of the core runs
  (compiled by mypyc, or the source);
- ``selector``, ``trace``: message selectors, the trace of events;
- ``protocol``: STOMP on the wire;
- ``durability``: what the broker keeps on disk;
- ``connection``: one client's connection;
- ``destinations``: where messages wait;
- ``ops``: statistics, diagnosis, admin;
- ``core``: the sans-IO broker;
- ``edge``: the server, the sockets, the virtual network, the console.

Its public names are what an embedding program needs: ``Broker`` (events in),
``actions`` (what the broker asks of its edge: ``actions.Write``, ``actions.Close`` ...),
the configuration, the frame and its codec, and the ``VirtualNetwork`` that runs a
broker on a virtual clock.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# First: importing corebuild decides which build of the core (compiled or the
# source) every later import loads.
from minibroker import corebuild  # noqa: F401  (imported for that decision)

if TYPE_CHECKING:
    from minibroker.config import BrokerConfig, load_config
    from minibroker.core import Broker, actions
    from minibroker.edge import VirtualNetwork
    from minibroker.frames import Frame
    from minibroker.protocol import FrameParser, encode

__all__ = [
    "Broker",
    "BrokerConfig",
    "Frame",
    "FrameParser",
    "VirtualNetwork",
    "actions",
    "encode",
    "load_config",
]

#: Each public name and the package it comes from. They are imported at their first use,
#: not with ``minibroker``: a program that runs one part (``import minibroker.config``, a
#: ``minibroker`` command) loads that part, not the core, the edge and the console too.
_HOMES = {
    "Broker": "minibroker.core",
    "BrokerConfig": "minibroker.config",
    "Frame": "minibroker.frames",
    "FrameParser": "minibroker.protocol",
    "VirtualNetwork": "minibroker.edge",
    "actions": "minibroker.core",
    "encode": "minibroker.protocol",
    "load_config": "minibroker.config",
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its package at its first use (then kept here)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'minibroker' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value
