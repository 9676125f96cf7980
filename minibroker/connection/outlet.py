"""A connection as the destinations write to it: the base class of ``session.Session``.

A subscription (``destinations/subscription.py``) holds its connection and asks
it, for every message, whether it may write now and in which STOMP version,
then writes the MESSAGE frame. The session module names ``Subscription`` (a
session holds its subscriptions), so the subscription cannot name ``Session``
back: it names this class, which ``Session`` derives from. A base class, not a
``Protocol``: the compiled build reads a base class's attributes and calls its
methods directly, and a ``Protocol``'s by name.
"""

from __future__ import annotations

from minibroker.connection.security import Principal
from minibroker.connection.states import Writing

__all__ = ["Connection"]


class Connection:
    """A session (``session.Session``), as its subscriptions see it: where a
    MESSAGE frame is written, and whether it may be now."""

    id: int
    #: The session as the trace names it.
    tag: str
    #: The STOMP version negotiated ("1.0", "1.1", "1.2").
    version: str
    client_id: str | None
    #: Who logged in on it.
    principal: Principal
    #: May output be added now (``writing.can_write``: the outbound buffer has
    #: room, the socket is not full, the connection is open).
    writing: Writing
    #: A DISCONNECT was read: nothing more is dispatched to it.
    leaving: bool

    def write(self, data: bytes) -> None:
        """Queue ``data`` (one encoded frame) for the socket."""
        raise NotImplementedError
