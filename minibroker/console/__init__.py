"""The web console: the page (``static/``), its HTTP and WebSocket port (``web.py``)
and ``/metrics`` (``metrics.py``)."""
from .web import ConsoleConnection

__all__ = ["ConsoleConnection"]
