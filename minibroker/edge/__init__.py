"""The edges that carry the core to the world: the asyncio server (TCP and
WebSocket listeners), one client socket's connection, the virtual network of the
labs and tests, and the web console."""

from __future__ import annotations

from minibroker.edge.connection import EdgeConnection, TcpConnection
from minibroker.edge.server import BrokerServer, open_store, serve
from minibroker.edge.virtual import PartialWrite, VirtualClient, VirtualNetwork

__all__ = [
    "BrokerServer",
    "EdgeConnection",
    "PartialWrite",
    "TcpConnection",
    "VirtualClient",
    "VirtualNetwork",
    "open_store",
    "serve",
]
