"""The web console: the page (``static/``), its HTTP and WebSocket port (``web.py``)
and ``/metrics`` (``metrics.py``); ``python -m minibroker.edge.console NODE_MODULES``
vendors the page's libraries (``vendor.py``)."""

from __future__ import annotations

from minibroker.edge.console.web import ConsoleConnection

__all__ = ["ConsoleConnection"]
