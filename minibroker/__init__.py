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
"""

from __future__ import annotations

# First: importing corebuild decides which build of the core (compiled or the
# source) every later import loads.
from minibroker import corebuild  # noqa: F401  (imported for that decision)
from minibroker.config import BrokerConfig, load_config
from minibroker.core import Broker
from minibroker.core.actions import (
    Action,
    CheckLogin,
    Close,
    PauseReading,
    ResumeReading,
    Shutdown,
    Sync,
    Write,
    WriteFrames,
)
from minibroker.edge import VirtualNetwork
from minibroker.frames import Frame
from minibroker.protocol import FrameParser, encode

__all__ = [
    "Action",
    "Broker",
    "BrokerConfig",
    "CheckLogin",
    "Close",
    "Frame",
    "FrameParser",
    "PauseReading",
    "ResumeReading",
    "Shutdown",
    "Sync",
    "VirtualNetwork",
    "Write",
    "WriteFrames",
    "encode",
    "load_config",
]
