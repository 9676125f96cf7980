"""The web console: the page (``static/``), its HTTP and WebSocket port (``web.py``)
and ``/metrics`` (``metrics.py``).

``ConsoleConnection`` is imported on first use, not with the package, so that
``python -m minibroker.console.vendor`` (a build step, which ``web`` imports)
runs as ``__main__`` without the package having imported it already.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .web import ConsoleConnection

__all__ = ["ConsoleConnection"]


def __getattr__(name: str) -> Any:
    if name == "ConsoleConnection":
        from .web import ConsoleConnection

        return ConsoleConnection
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
